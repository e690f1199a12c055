"""The extractive reader's backends (``backend=``, ``--reader-backend``): OpenVINO at float precision against torch,
the per-CPU choice ``auto`` makes and records, reads cached apart per backend, a checkpoint OpenVINO cannot convert
read with torch after one note."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from data.errors import UserError
from readers import openvino_backend as ovb
from readers.extractive import ExtractiveReader, ReadCache
from tests.conftest import READER
from tests.test_reader_int8 import dev_pairs, manifest_value, tiny_checkpoint

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def own_cache(tmp_path, monkeypatch):
    """A cache directory of the test's own: the OpenVINO entries it builds are its own."""
    monkeypatch.setenv("QA_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def entries(cache: Path) -> list[dict]:
    root = cache / "reader-openvino"
    return [json.loads((p / "info.json").read_text()) for p in sorted(root.iterdir()) if p.is_dir() and not p.name.startswith(".")]


@pytest.mark.slow
def test_auto_measures_once_records_its_choice_and_keys_reads_by_it(tmp_path, own_cache):
    path = tiny_checkpoint("bert", tmp_path)
    questions, passages = dev_pairs(40)
    auto = ExtractiveReader(str(path), dtype="float32", backend="auto", progress=False).load()
    (info,) = entries(own_cache)
    check = info["check"]
    assert check["questions"] == 300 and check["split"] == "squad train"
    assert check["torch_seconds"] > 0 and check["openvino_seconds"] > 0
    assert info["chosen"] in ("openvino", "torch") and info["cpu"] == ovb.cpu_identity()
    if info["chosen"] == "openvino":
        assert check["identical_percent"] >= 99.0 and check["speedup"] >= ovb.MIN_SPEEDUP
    else:
        assert info["reason"]
    assert auto.backend_ == info["chosen"] and auto.facts()["reader_backend"] == info["chosen"]
    assert auto.facts()["reader_openvino"]["check"] == check

    # a fresh reader takes the recorded choice without loading anything, and keys its reads as that backend's
    fresh = ExtractiveReader(str(path), dtype="float32", backend="auto", progress=False)
    assert fresh.resolved_backend() == info["chosen"] and getattr(fresh, "model_", None) is None
    chosen = ExtractiveReader(str(path), dtype="float32", backend=info["chosen"], progress=False)
    other = ExtractiveReader(str(path), dtype="float32", backend="torch" if info["chosen"] == "openvino" else "openvino",
                             progress=False)
    assert fresh.identity() == chosen.identity() != other.identity()

    # the record is what decides: the other choice written there is honoured by the next reader
    entry = next(p for p in (own_cache / "reader-openvino").iterdir() if p.is_dir() and not p.name.startswith("."))
    flipped = {**info, "chosen": "torch" if info["chosen"] == "openvino" else "openvino"}
    (entry / "info.json").write_text(json.dumps(flipped))
    assert ExtractiveReader(str(path), dtype="float32", backend="auto", progress=False).identity() == other.identity()


@pytest.mark.slow
def test_openvino_float32_reads_what_torch_reads_and_never_serves_torch_reads(tmp_path, own_cache, capsys):
    path = tiny_checkpoint("bert", tmp_path)
    questions, passages = dev_pairs(60)
    cache = ReadCache(tmp_path / "reads")
    torch_reads = ExtractiveReader(str(path), dtype="float32", progress=False).read_pairs(questions, passages, cache=cache)
    ov = ExtractiveReader(str(path), dtype="float32", backend="openvino", progress=False)
    ov_reads = ov.read_pairs(questions, passages, cache=cache)
    assert ov.backend_ == "openvino"
    assert (ov_reads.n_read, ov_reads.n_reused) == (len(set(zip(questions, passages))), 0)
    again = ExtractiveReader(str(path), dtype="float32", backend="openvino", progress=False)
    assert again.read_pairs(questions, passages, cache=cache).n_reused == ov_reads.n_read
    # a random tiny model has near ties, so a few answers may differ in float32; almost all agree
    assert np.mean([a == b for a, b in zip(torch_reads.text, ov_reads.text)]) >= 0.9
    assert np.allclose(torch_reads.score, ov_reads.score, atol=1e-3, rtol=1e-4)

    # a damaged converted model is removed and built again, with one warning line; it reads as before
    (entry,) = [p for p in (own_cache / "reader-openvino").iterdir() if p.is_dir() and not p.name.startswith(".")]
    blob = bytearray((entry / "model.bin").read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    (entry / "model.bin").write_bytes(bytes(blob))
    capsys.readouterr()
    rebuilt = ExtractiveReader(str(path), dtype="float32", backend="openvino", progress=False)
    assert rebuilt.read_pairs(questions, passages).text == ov_reads.text
    damaged = [line for line in capsys.readouterr().err.splitlines() if "damaged" in line]
    assert len(damaged) == 1 and str(entry) in damaged[0] and "rebuilt" in damaged[0]


def test_a_cached_choice_belongs_to_one_cpu_precision_and_openvino_version(monkeypatch):
    recipe32, recipe16 = ovb.FloatRecipe("float32"), ovb.FloatRecipe("bfloat16")
    key = ovb.entry_key("reader", recipe32, "sample")
    assert key != ovb.entry_key("reader", recipe16, "sample") != ovb.entry_key("reader", recipe32, "other sample")
    monkeypatch.setattr(ovb, "cpu_identity", lambda: "Some Other CPU|avx2")
    assert ovb.entry_key("reader", recipe32, "sample") != key


def test_a_checkpoint_openvino_cannot_convert_is_read_with_torch_after_one_note(tmp_path, own_cache, capsys):
    import torch

    class Eigen(torch.nn.Module):  # a data-dependent complex decomposition: no OpenVINO operation for it
        def forward(self, input_ids, attention_mask):
            x = input_ids.float()[:, :2, None] * attention_mask.float()[:, None, :2]
            return torch.linalg.eig(x).eigenvalues.real, x.sum(-1)

    example = {"input_ids": np.ones((2, 4), np.int64), "attention_mask": np.ones((2, 4), np.int64)}
    model, info = ovb.load_or_build_float("k" * 32, Eigen(), example, lambda *a: [], None, ovb.FloatRecipe(), 1, "eigen")
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    assert model is None and info["chosen"] == "torch" and "cannot convert 'eigen'" in info["reason"]
    assert len(notes) == 1 and "reading with torch" in notes[0]
    again, info2 = ovb.load_or_build_float("k" * 32, Eigen(), example, lambda *a: [], None, ovb.FloatRecipe(), 1, "eigen")
    assert again is None and info2 == info and not capsys.readouterr().err  # recorded: not tried again


def test_bad_backends_are_one_line(tmp_path):
    with pytest.raises(UserError, match="backend='gpu'"):
        ExtractiveReader(str(READER), backend="gpu").identity()
    with pytest.raises(UserError, match="not float16"):
        ExtractiveReader(str(READER), backend="openvino", dtype="float16", device="cpu").identity()
    for argv in (["--reader", str(READER), "--reader-backend", "gpu"],
                 ["--reader", "generative:smollm2-135m-instruct", "--reader-backend", "openvino"]):
        done = subprocess.run([sys.executable, "-m", "pipeline.run", "--dataset", "squad_open", "--retriever", "bm25",
                               "--limit", "2", "--out", str(tmp_path / "bad"), *argv], cwd=ROOT, capture_output=True,
                              text=True)
        lines = done.stderr.strip().splitlines()
        assert done.returncode != 0 and len(lines) == 1 and "backend" in lines[0], done.stderr
        assert not (tmp_path / "bad" / "metrics.json").exists()


@pytest.mark.slow
def test_pipeline_run_on_each_backend_says_which_in_its_manifest(tmp_path):
    """``--reader-backend`` through the command: the shared reader on OpenVINO float32 answers as on torch float32,
    the backend and its check in the manifest, its reads in their own cache entries; auto takes the recorded choice."""
    common = [sys.executable, "-m", "pipeline.run", "--dataset", "squad_open", "--reader", str(READER),
              "--retriever", "bm25", "--selector", "top:3", "--depth", "20", "--limit", "40", "--metrics", "em,f1",
              "--reader-dtype", "float32", "--read-cache", str(tmp_path / "reads")]
    env = {**os.environ, "QA_CACHE_DIR": str(tmp_path / "cache")}
    runs = {}
    for backend in ("torch", "openvino", "auto"):
        out = tmp_path / backend
        done = subprocess.run(common + ["--reader-backend", backend, "--out", str(out)], cwd=ROOT, capture_output=True,
                              text=True, env=env)
        assert done.returncode == 0, done.stderr[-2000:]
        runs[backend] = (json.loads((out / "metrics.json").read_text()), json.loads((out / "manifest.json").read_text()),
                         [json.loads(line) for line in (out / "details.jsonl").read_text().splitlines()])
    (mt, man_t, pt), (mo, man_o, po), (_, man_a, pa) = runs["torch"], runs["openvino"], runs["auto"]
    assert man_t["reading"]["reader_backend"] == "torch" and man_o["reading"]["reader_backend"] == "openvino"
    assert [p["id"] for p in pt] == [p["id"] for p in po]
    assert np.mean([a["answer"] == b["answer"] for a, b in zip(pt, po)]) >= 0.98
    assert abs(mo["reading"]["em"] - mt["reading"]["em"]) <= 0.03
    check = man_o["reading"]["reader_openvino"]["check"]
    assert check["questions"] == 300 and check["identical_percent"] >= 99.0
    assert manifest_value(man_o, "reads_reused") == 0 < manifest_value(man_o, "reads_done")
    # auto: the choice recorded by the openvino run (same checkpoint, precision, CPU), its reads reused
    chosen = man_o["reading"]["reader_openvino"]["chosen"]
    assert man_a["reading"]["reader_backend"] == chosen and man_a["flags"]["reader_backend"] == "auto"
    assert manifest_value(man_a, "reads_done") == 0
    assert [p["answer"] for p in pa] == [p["answer"] for p in (po if chosen == "openvino" else pt)]
