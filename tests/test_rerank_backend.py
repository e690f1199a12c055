"""The cross-encoder on OpenVINO (``backend=``, ``--rerank-backend``): the choice ``auto`` measures on the SQuAD
train check sample and records per CPU, rankings as torch float32's, scores cached apart per backend, bad values
one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from data.errors import UserError
from retrievers import rerank_openvino as rov
from tests.conftest import ROOT
from tests.test_rerank import run_cli, scorer, tiny_cross_encoder, trec

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("QA_CACHE_DIR", str(tmp_path / "cache"))


def entry_infos(cache: Path) -> list[dict]:
    root = cache / "rerank-openvino"
    return [json.loads((p / "info.json").read_text()) for p in sorted(root.iterdir()) if p.is_dir() and not p.name.startswith(".")]


QUESTIONS = ["Who founded the university?", "When was the bridge built?", "Which river runs through the city?"]
PASSAGES = ["The university was founded by a group of monks in 1209.",
            "The bridge was built in 1894 over the river Thames.",
            "The city lies on the Danube, which runs through its centre."]


@pytest.mark.slow
def test_auto_measures_once_records_its_choice_and_keys_scores_by_it(tmp_path):
    model = tiny_cross_encoder(tmp_path / "ce", 3)
    torch_scorer = scorer(model, backend="torch")
    auto = scorer(model, backend="auto")
    auto_identity = auto.identity()  # the choice is made (measured) when first needed
    (info,) = entry_infos(tmp_path / "cache")
    check = info["check"]
    assert check["questions"] == 300 and check["candidates"] == 5 and check["pairs"] == 1500
    assert check["split"] == "squad train" and check["precision"] == "float32"
    assert check["torch"]["same_ranking_percent"] == 100.0  # torch float32 against itself
    chosen = info["chosen"]
    assert chosen in ("torch", "openvino") and info["cpu"] == rov.cpu_identity()
    if chosen == "openvino":
        assert check["openvino"]["same_ranking_percent"] >= rov.MIN_SAME_RANKING["float32"]
        assert check["speedup"] >= rov.MIN_SPEEDUP
    else:
        assert "reason" in info
    assert auto.facts()["backend"] == chosen and auto.facts()["openvino"]["chosen"] == chosen
    assert (auto_identity == torch_scorer.identity()) == (chosen == "torch")
    # a second scorer of the same model finds the record: nothing measured again
    again = scorer(model, backend="auto")
    assert again.resolved_backend() == chosen and len(entry_infos(tmp_path / "cache")) == 1


@pytest.mark.slow
def test_openvino_scores_as_torch_float32_and_is_keyed_apart(tmp_path):
    model = tiny_cross_encoder(tmp_path / "ce", 4)
    qs, ps = QUESTIONS * 3, [p for p in PASSAGES for _ in range(3)]
    torch_scores = scorer(model, backend="torch").score_pairs(qs, ps)
    forced = scorer(model, backend="openvino")
    ov_scores = forced.score_pairs(qs, ps)
    assert forced.resolved_backend() == "openvino" and forced.facts()["backend"] == "openvino"
    np.testing.assert_allclose(ov_scores, torch_scores, atol=1e-4)  # float32: the same arithmetic, fused
    assert forced.identity() != scorer(model, backend="torch").identity()


@pytest.mark.slow
def test_the_command_reranks_on_openvino_and_records_it(tmp_path, capsys):
    model = tiny_cross_encoder(tmp_path / "ce", 5)
    runs = {}
    for backend in ("torch", "openvino"):
        out = tmp_path / backend
        assert run_cli("--dataset", "reqa_squad", "--split", "dev", "--limit", "6", "--retriever", "bm25", "--depth",
                       "20", "--rerank", model, "--rerank-backend", backend, "--rerank-dtype", "float32", "--out", out) == 0
        manifest = json.loads((out / "manifest.json").read_text())
        facts = manifest["rerankers"][0]
        assert facts["backend"] == backend
        runs[backend] = trec(out / "run.trec")
    assert runs["torch"].keys() == runs["openvino"].keys()
    for qid, hits in runs["torch"].items():
        ov_hits = runs["openvino"][qid]
        np.testing.assert_allclose([s for _, s in hits], [s for _, s in ov_hits], atol=1e-4)


def test_bad_backends_are_one_line(tmp_path, capsys):
    model = tiny_cross_encoder(tmp_path / "ce", 6)
    with pytest.raises(UserError, match="rerank backend='onnx': expected one of auto, torch, openvino"):
        scorer(model, backend="onnx").identity()
    out = tmp_path / "bad"
    rc = run_cli("--dataset", "reqa_squad", "--limit", 3, "--depth", 5, "--rerank", f"{model}[backend=onnx]", "--out", out)
    err = capsys.readouterr().err.strip()
    assert rc != 0 and err.startswith("error: ") and "\n" not in err and "backend='onnx'" in err, err
    done = subprocess.run([sys.executable, "-m", "pipeline.run", "--dataset", "reqa_squad", "--limit", "3", "--rerank",
                           str(model), "--rerank-backend", "onnx", "--out", str(out)], cwd=ROOT, capture_output=True,
                          text=True)
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0 and len(lines) == 1 and "rerank-backend" in lines[0], done.stderr
    assert not out.exists()
