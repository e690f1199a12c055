"""The same configuration through both drivers gives the same numbers: pipeline.run at one corpus size and one n
equals pipeline.sweep's row for that n (and for a threshold selector) at that size."""

from __future__ import annotations

import json

import pytest

from tests.conftest import READER


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("QA_CACHE_DIR", str(tmp_path / "cache"))


COMMON = ["--dataset", "reqa_squad", "--limit", "25", "--reader", str(READER), "--depth", "10",
          "--metrics", "em,f1", "--reader-batch-size", "8"]


@pytest.mark.slow
def test_run_and_sweep_agree_on_every_metric(tmp_path):
    from pipeline.run import main as run_main
    from pipeline.sweep import main as sweep_main

    sweep_out = tmp_path / "sweep"
    assert sweep_main(COMMON + ["--corpus-sizes", "all", "--seeds", "1", "--n", "1-3", "--thetas", "0.8", "--no-ordinal",
                                "--bootstrap", "20", "--no-plots", "--out", str(sweep_out)]) == 0
    rows = {r["system"]: r for r in _csv(sweep_out / "results.csv")}
    assert {"top:1", "top:2", "top:3", "threshold:0.8,3", "oracle"} <= set(rows)
    for selector in ("top:1", "top:3", "threshold:0.8,3"):
        out = tmp_path / selector.replace(":", "_").replace(",", "_")
        assert run_main(COMMON + ["--selector", selector, "--threads", "1", "--out", str(out)]) == 0
        reading = json.loads((out / "metrics.json").read_text())["reading"]
        row = rows[selector]
        assert int(row["questions"]) == reading["questions"]
        for metric in ("em", "f1", "mean_n", "answer_recall"):
            assert float(row[metric]) == pytest.approx(reading[metric], abs=1e-6), (selector, metric)


def _csv(path):
    import csv

    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))
