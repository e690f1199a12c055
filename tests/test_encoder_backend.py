"""Dense encoders on OpenVINO (``backend=``, ``--encoder-backend``): vectors within the documented cosine of torch's,
the choice ``auto`` measures and records per CPU, embeddings cached apart per backend, bad values one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from data.errors import UserError
from retrievers.encoder import default_encoder_path
from retrievers.encoders import load_encoder
from retrievers.encoders import openvino as ov_encoder
from retrievers.registry import make_retriever
from tests.conftest import ROOT
from tests.test_encoders import PASSAGES, QUERIES, corpus_of


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("QA_CACHE_DIR", str(tmp_path / "cache"))


def tiny_sentence_transformer(directory: Path) -> Path:
    """A randomly initialised two-layer BERT, mean-pooled and normalized, as a sentence-transformers directory
    (all-MiniLM-L6-v2's tokenizer)."""
    import torch
    import transformers as tf
    from sentence_transformers import SentenceTransformer, models

    torch.manual_seed(0)
    tokenizer = tf.AutoTokenizer.from_pretrained(default_encoder_path())
    bert = tf.BertModel(tf.BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, intermediate_size=128))
    raw = directory / "raw"
    bert.save_pretrained(raw)
    tokenizer.save_pretrained(raw)
    word = models.Transformer(str(raw), max_seq_length=128)
    model = SentenceTransformer(modules=[word, models.Pooling(64, "mean"), models.Normalize()], device="cpu")
    out = directory / "tiny-st"
    model.save(str(out))
    return out


def entry_infos(cache: Path) -> list[dict]:
    root = cache / "encoder-openvino"
    return [json.loads((p / "info.json").read_text()) for p in sorted(root.iterdir()) if p.is_dir() and not p.name.startswith(".")]


@pytest.mark.slow
def test_auto_measures_both_precisions_once_and_keys_embeddings_by_its_choice(tmp_path):
    path = tiny_sentence_transformer(tmp_path)
    torch_enc = load_encoder(str(path), device="cpu", backend="torch")
    auto = load_encoder(str(path), device="cpu", backend="auto")
    auto_identity = auto.identity()  # the choice is made (measured) when first needed
    (info,) = entry_infos(tmp_path / "cache")
    check = info["check"]
    assert check["texts"] == 600 and check["split"] == "squad train" and check["torch_seconds"] > 0
    assert check["openvino"]["float32"]["min_cosine"] >= 0.9999  # the same arithmetic, fused
    chosen = info["chosen"]
    assert chosen in ("torch", "openvino-float32", "openvino-bfloat16") and info["cpu"] == ov_encoder.cpu_identity()
    if chosen != "torch":
        side = check["openvino"][chosen.split("-", 1)[1]]
        assert side["min_cosine"] >= ov_encoder.MIN_COSINE and side["speedup"] >= ov_encoder.MIN_SPEEDUP
    assert auto.info()["backend"] == chosen and auto.info()["openvino"]["chosen"] == chosen
    assert (auto_identity == torch_enc.identity()) == (chosen == "torch")
    a, t = auto.encode_passages(PASSAGES, show_progress=False), torch_enc.encode_passages(PASSAGES, show_progress=False)
    assert np.min(np.sum(a * t, axis=1)) >= ov_encoder.MIN_COSINE
    # a second encoder of the same model finds the record: nothing measured again
    again = load_encoder(str(path), device="cpu", backend="auto")
    assert again.info()["openvino"] == auto.info()["openvino"] and len(entry_infos(tmp_path / "cache")) == 1


@pytest.mark.slow
def test_dense_retrieval_on_openvino_ranks_as_torch_and_keeps_its_own_embeddings(tmp_path):
    """The offline all-MiniLM-L6-v2 through the retriever spec: the same ranking, embeddings cached apart."""
    corpus = corpus_of(PASSAGES)
    runs = {}
    for backend in ("torch", "openvino"):
        retriever = make_retriever(f"dense[backend={backend}]", {"dense": {"device": "cpu"}}).index(corpus)
        ranking = retriever.search(QUERIES, 4)
        runs[backend] = (ranking, retriever.embeddings_key_, retriever.facts())
    (rt, key_t, facts_t), (ro, key_o, facts_o) = runs["torch"], runs["openvino"]
    assert key_t != key_o and facts_o["embedding_shards"]["computed"] == facts_o["embedding_shards"]["shards"]
    assert facts_t["encoder"]["backend"] == "torch" and facts_o["encoder"]["backend"].startswith("openvino-")
    assert np.array_equal(rt.ids[:, 0], ro.ids[:, 0])
    assert np.allclose(rt.scores, ro.scores, atol=5e-3)


def test_bad_encoder_backends_are_one_line(tmp_path):
    with pytest.raises(UserError, match="backend='gpu'"):
        load_encoder(None, device="cpu", backend="gpu")
    done = subprocess.run([sys.executable, "-m", "pipeline.run", "--dataset", "squad_open", "--retriever", "dense",
                           "--encoder-backend", "gpu", "--limit", "2", "--out", str(tmp_path / "bad")], cwd=ROOT,
                          capture_output=True, text=True, env=dict(os.environ))
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0 and len(lines) == 1 and "encoder-backend" in lines[0], done.stderr
    assert not (tmp_path / "bad").exists() or not (tmp_path / "bad" / "metrics.json").exists()
