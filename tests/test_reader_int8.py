"""The int8 reader (``dtype="int8"``, ``--reader-dtype int8``): built once per checkpoint and recipe, cached,
reads apart from float reads, close to float32 on real SQuAD questions, generic over QA architectures."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from data.errors import UserError
from readers.extractive import ExtractiveReader, ReadCache
from readers.int8 import FFN_OUTPUT, Int8Recipe
from tests.conftest import DATA, READER

ROOT = Path(__file__).resolve().parents[1]
NO_VALIDATION = Int8Recipe(validation_questions=0)
USERS_CACHE = os.environ.get("QA_CACHE_DIR")  # the suite's cache: its BM25 index and datasets are shared with other tests


def dev_pairs(n: int):
    """(questions, paragraphs) of the first ``n`` SQuAD v1.1 dev questions with their gold paragraphs."""
    with zipfile.ZipFile(DATA / "squad" / "dev-v1.1.json.zip") as z:
        data = json.loads(z.read("dev-v1.1.json"))
    rows = [(qa["question"], p["context"]) for a in data["data"] for p in a["paragraphs"] for qa in p["qas"]]
    return [q for q, _ in rows[:n]], [p for _, p in rows[:n]]


@pytest.fixture(scope="module")
def int8_cache(tmp_path_factory):
    """One cache directory for the module, so the shared reader's int8 model is built once."""
    path = tmp_path_factory.mktemp("int8-cache")
    old = os.environ.get("QA_CACHE_DIR")
    os.environ["QA_CACHE_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("QA_CACHE_DIR", None)
    else:
        os.environ["QA_CACHE_DIR"] = old


def tiny_checkpoint(kind: str, directory: Path) -> Path:
    """A randomly initialised QA model of architecture ``kind`` with the shared reader's (WordPiece) tokenizer."""
    import torch
    import transformers as tf

    vocab = tf.AutoTokenizer.from_pretrained(str(READER)).vocab_size
    common = dict(vocab_size=vocab, max_position_embeddings=512, initializer_range=0.2)
    config = {
        "bert": tf.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, **common),
        # two token types, so the WordPiece tokenizer's segment ids fit; still RoBERTa's architecture
        "roberta": tf.RobertaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                                    type_vocab_size=2, pad_token_id=0, **{**common, "max_position_embeddings": 514}),
        "distilbert": tf.DistilBertConfig(dim=64, n_layers=2, n_heads=4, hidden_dim=128, vocab_size=vocab,
                                          max_position_embeddings=512, initializer_range=0.2),
    }[kind]
    torch.manual_seed(0)
    model = tf.AutoModelForQuestionAnswering.from_config(config)
    out = directory / kind
    model.save_pretrained(out)
    tokenizer = tf.AutoTokenizer.from_pretrained(str(READER))
    if kind == "distilbert":
        tokenizer.model_input_names = ["input_ids", "attention_mask"]
    tokenizer.save_pretrained(out)
    return out


@pytest.mark.parametrize("kind", ["bert", "roberta", "distilbert"])  # MiniLM is a BERT: the shared reader below
def test_the_recipe_quantizes_each_architecture_and_tracks_float32(kind, tmp_path, int8_cache, capsys):
    path = tiny_checkpoint(kind, tmp_path)
    questions, passages = dev_pairs(60)
    exact = ExtractiveReader(str(path), dtype="float32", progress=False).read_pairs(questions, passages)
    int8 = ExtractiveReader(str(path), dtype="int8", int8_recipe=NO_VALIDATION, progress=False).load()
    info = int8.model_.info
    # per layer, q/k/v/attention output/FFN in in int8, the FFN output projection kept in float (the recipe), plus
    # the span head in int8; the two weightless attention products of each layer are float by nature
    ffn_out = [name for name in info["matmuls_float"] if re.fullmatch(FFN_OUTPUT, name)]
    assert info["matmuls_int8_weights"] == 2 * 5 + 1 and len(ffn_out) == 2, info
    assert info["validation"] == {"questions": 0}
    fast = int8.read_pairs(questions, passages)
    for text, passage, start, end in zip(fast.text, passages, fast.start_char, fast.end_char):
        assert passage[start:end] == text
    # random weights make near ties between spans, so the answer texts of a random model move under any noise
    # (identical answers are checked on the real reader below); the best-span scores must follow float32's
    assert np.corrcoef(exact.score, fast.score)[0, 1] > 0.99
    assert np.max(np.abs(exact.score - fast.score)) < 0.1 * np.ptp(exact.score)
    if kind == "bert":  # whole layers in float; a layer the model lacks is named in one warning
        recipe = Int8Recipe(float_ffn_output=False, float_layers=(0, 7), validation_questions=0)
        layered = ExtractiveReader(str(path), dtype="int8", int8_recipe=recipe, progress=False).load()
        warned = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
        assert len(warned) == 1 and "no encoder layer 7" in warned[0], warned
        floats = layered.model_.info["matmuls_float"]
        assert layered.model_.info["matmuls_int8_weights"] == 6 + 1
        assert sum(".layer.0." in n for n in floats) == sum(".layer.1." in n for n in floats) + 6


@pytest.mark.slow
def test_the_shared_reader_in_int8_agrees_with_float32_and_its_reads_are_cached_apart(tmp_path, int8_cache):
    questions, passages = dev_pairs(200)
    exact = ExtractiveReader(str(READER), dtype="float32", progress=False)
    int8 = ExtractiveReader(str(READER), dtype="int8", int8_recipe=Int8Recipe(validation_questions=40), progress=False)
    keys = set(int8.pair_keys(questions, passages))
    assert not keys & set(exact.pair_keys(questions, passages))
    cache = ReadCache(tmp_path / "reads")
    slow = exact.read_pairs(questions, passages, cache=cache)
    fast = int8.read_pairs(questions, passages, cache=cache)
    assert (fast.n_read, fast.n_reused) == (len(keys), 0)  # a float read is never served for an int8 request
    again = ExtractiveReader(str(READER), dtype="float32", progress=False).read_pairs(questions, passages, cache=cache)
    assert (again.n_read, again.n_reused) == (0, len(keys))  # nor the reverse: float32 finds its own reads
    assert again.text == slow.text
    # the documented tolerance (docs/readers.md): at least 94% of answers identical on 200 dev questions
    # (97-98% measured on larger samples), EM within a point
    same = np.mean([a == b for a, b in zip(slow.text, fast.text)])
    assert same >= 0.94, same
    validation = int8.model_.info["validation"]
    assert validation["questions"] == 40 and validation["split"] == "squad train"
    assert validation["identical_percent"] >= 85 and abs(validation["em_int8"] - validation["em_float32"]) <= 5
    # a second reader finds the built model in the cache; a damaged weights file is rebuilt with one warning
    entry = next(p for p in (int8_cache / "reader-int8").iterdir() if p.is_dir() and not p.name.startswith(".")
                 and json.loads((p / "info.json").read_text()) == int8.model_.info)  # the tiny models' are beside it
    built = (entry / "info.json").read_text()
    blob = bytearray((entry / "model.bin").read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    (entry / "model.bin").write_bytes(bytes(blob))
    rebuilt = subprocess.run(
        [sys.executable, "-c", "from readers.extractive import ExtractiveReader as R; from readers.int8 import Int8Recipe as I;"
         f"r = R({str(READER)!r}, dtype='int8', int8_recipe=I(validation_questions=40), progress=False);"
         f"print(r.read_pairs({questions[:3]!r}, {passages[:3]!r}).text)"],
        cwd=ROOT, capture_output=True, text=True, env={**os.environ, "QA_CACHE_DIR": str(int8_cache)})
    assert rebuilt.returncode == 0, rebuilt.stderr
    damaged = [line for line in rebuilt.stderr.splitlines() if "damaged" in line]
    assert len(damaged) == 1 and str(entry) in damaged[0] and "rebuilt" in damaged[0]
    assert rebuilt.stdout.strip() == repr(fast.text[:3])
    assert (entry / "info.json").read_text() == built


def test_int8_is_asked_for_never_chosen_and_runs_on_the_cpu(tmp_path):
    auto = ExtractiveReader(str(READER), progress=False)
    assert auto.identity() != ExtractiveReader(str(READER), dtype="int8", progress=False).identity()
    with pytest.raises(UserError, match="int8 runs on the CPU"):
        ExtractiveReader(str(READER), dtype="int8", device="cuda").load()
    with pytest.raises(UserError, match="activation_group_size"):
        ExtractiveReader(str(READER), dtype="int8", int8_recipe=Int8Recipe(activation_group_size=-1)).load()
    with pytest.raises(UserError, match="float_layers"):
        ExtractiveReader(str(READER), dtype="int8", int8_recipe=Int8Recipe(float_layers=("0",))).load()
    # recipes are part of the identity: their reads are cached apart
    assert (ExtractiveReader(str(READER), dtype="int8", progress=False).identity()
            != ExtractiveReader(str(READER), dtype="int8", int8_recipe=Int8Recipe(activation_group_size=32)).identity())


def test_a_model_the_converter_cannot_trace_is_one_clear_line():
    import torch

    from readers import int8

    class Eigen(torch.nn.Module):  # a data-dependent complex decomposition: no OpenVINO operation for it
        def forward(self, input_ids, attention_mask):
            x = input_ids.float()[:, :2, None] * attention_mask.float()[:, None, :2]
            return torch.linalg.eig(x).eigenvalues.real, x.sum(-1)

    example = {"input_ids": np.ones((2, 4), np.int64), "attention_mask": np.ones((2, 4), np.int64)}
    with pytest.raises(UserError) as err:
        int8.convert(Eigen(), example, "eigen")
    message = str(err.value)
    assert "\n" not in message and "cannot convert 'eigen' (Eigen) to OpenVINO" in message


@pytest.mark.slow
def test_pipeline_run_reads_in_int8_and_says_so_in_its_manifest(tmp_path):
    """``--reader-dtype int8`` through the command users run: same questions answered, metrics close to float32's,
    the recipe and its measured agreement in the manifest, the int8 reads in their own cache entries."""
    common = [sys.executable, "-m", "pipeline.run", "--dataset", "squad_open", "--reader", str(READER),
              "--retriever", "bm25", "--selector", "top:3", "--depth", "20", "--limit", "60", "--metrics", "em,f1", "--read-cache", str(tmp_path / "reads")]
    runs = {}
    for dtype in ("float32", "int8"):
        out = tmp_path / dtype
        env = {k: v for k, v in os.environ.items() if k != "QA_CACHE_DIR"}
        env.update({"QA_CACHE_DIR": USERS_CACHE} if USERS_CACHE else {})
        done = subprocess.run(common + ["--reader-dtype", dtype, "--out", str(out)], cwd=ROOT, capture_output=True,
                              text=True, env=env)
        assert done.returncode == 0, done.stderr[-2000:]
        runs[dtype] = (json.loads((out / "metrics.json").read_text()), json.loads((out / "manifest.json").read_text()),
                       [json.loads(line) for line in (out / "details.jsonl").read_text().splitlines()])
    (m32, manifest32, p32), (m8, manifest, p8) = runs["float32"], runs["int8"]
    assert [p["id"] for p in p32] == [p["id"] for p in p8]
    assert np.mean([a["answer"] == b["answer"] for a, b in zip(p32, p8)]) >= 0.9
    assert abs(m8["reading"]["em"] - m32["reading"]["em"]) <= 0.05
    facts = json.dumps(manifest)
    assert '"reader_dtype": "int8"' in facts and "int8-openvino-wc-dq-v2" in facts and "identical_percent" in facts
    assert '"float_ffn_output": true' in facts
    # same read cache directory, and nothing of the float32 run's reads was reused
    assert manifest_value(manifest, "reads_done") == manifest_value(manifest32, "reads_done") > 0
    assert manifest_value(manifest, "reads_reused") == 0

    # the sweep reads in int8 too and its manifest says so (the recipe and the agreement it was built with)
    out = tmp_path / "sweep"
    done = subprocess.run([sys.executable, "-m", "pipeline.sweep", "--dataset", "squad_open", "--reader", str(READER),
                           "--reader-dtype", "int8", "--n", "1-2", "--corpus-sizes", "x1", "--every", "700", "--limit", "6",
                           "--no-plots", "--out", str(out)], cwd=ROOT, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    swept = json.loads((out / "manifest.json").read_text())
    assert swept["reader"]["reader_dtype"] == "int8"
    assert swept["reader"]["reader_int8"] == manifest_value(manifest, "reader_int8")


def manifest_value(manifest: dict, key: str):
    def find(node):
        if isinstance(node, dict):
            if key in node:
                return node[key]
            for value in node.values():
                found = find(value)
                if found is not None:
                    return found
        return None

    return find(manifest)
