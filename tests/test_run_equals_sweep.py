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


@pytest.mark.slow
def test_adaptive_selectors_and_their_costs_agree_between_run_and_sweep(tmp_path):
    """gap and confidence (a fixed threshold: nothing fitted) read the same passages and give the same answers
    through both drivers; the sweep's cost columns are the means of its per-question passages read."""
    import numpy as np

    from pipeline.run import main as run_main
    from pipeline.sweep import main as sweep_main

    specs = ("gap:5,1", "confidence:5,threshold=6.0")
    sweep_out = tmp_path / "sweep"
    assert sweep_main(COMMON + ["--corpus-sizes", "all", "--seeds", "1", "--n", "1-5", "--thetas", "0.8", "--no-ordinal",
                                "--bootstrap", "50", "--no-plots", "--out", str(sweep_out)]
                      + [arg for spec in specs for arg in ("--selector", spec)]) == 0
    rows = {r["system"]: r for r in _csv(sweep_out / "results.csv")}
    cost = {r["system"]: r for r in _csv(sweep_out / "cost.csv")}
    level = json.loads(next((sweep_out / "levels").glob("*.json")).read_text())
    with np.load(next((sweep_out / "levels").glob("*.npz"))) as z:
        sys_n = z["sys_n"]
    for m, system in enumerate(level["systems"]):
        assert float(cost[system]["mean_passages"]) == pytest.approx(sys_n[:, m].mean(), abs=1e-6)
        assert float(rows[system]["mean_n"]) == pytest.approx(sys_n[:, m].mean(), abs=1e-6)
    for spec in specs:
        system = next(s for s in rows if s.startswith(spec.split(",")[0]))
        out = tmp_path / spec.replace(":", "_").replace(",", "_").replace("=", "_")
        assert run_main(COMMON + ["--selector", spec, "--threads", "1", "--out", str(out)]) == 0
        reading = json.loads((out / "metrics.json").read_text())["reading"]
        for metric in ("em", "f1", "mean_n", "answer_recall"):
            assert float(rows[system][metric]) == pytest.approx(reading[metric], abs=1e-6), (spec, metric)
        per_question = [json.loads(line)["passages_read"] for line in (out / "costs.jsonl").read_text().splitlines()]
        assert np.mean(per_question) == pytest.approx(float(cost[system]["mean_passages"]), abs=1e-6)
    # the saving at equal EM is read off the fixed-n rows of the same table
    for spec in specs:
        system = next(s for s in cost if s.startswith(spec.split(",")[0]))
        row = cost[system]
        if row["fixed_n"]:
            fixed = cost[f"top:{row['fixed_n']}"]
            assert float(fixed["em"]) >= float(row["em"]) - 1e-9
            assert float(row["saving"]) == pytest.approx(float(fixed["mean_passages"]) - float(row["mean_passages"]), abs=1e-6)
            earlier = [cost[f"top:{n}"] for n in range(1, int(row["fixed_n"]))]
            assert all(float(r["em"]) < float(row["em"]) - 1e-9 for r in earlier)
    # pipeline.compare tests the sweep's systems pairwise on the same questions as the runs (ids included)
    from pipeline.compare import load_sweep_runs, main as compare_main

    systems = ["top:1", *(next(s for s in cost if s.startswith(spec.split(",")[0])) for spec in specs)]
    runs = load_sweep_runs(sweep_out, systems)
    run_ids = [json.loads(line)["id"] for line in (out / "costs.jsonl").read_text().splitlines()]
    for run in runs:
        assert list(run.rows) == run_ids
        assert np.mean([r["em"] for r in run.rows.values()]) == pytest.approx(float(cost[run.name]["em"]), abs=1e-6)
        assert np.mean([r["passages_read"] for r in run.rows.values()]) == pytest.approx(float(cost[run.name]["mean_passages"]))
    assert compare_main([str(sweep_out), "--systems", ";".join(systems), "--out", str(tmp_path / "cmp")]) == 0
    pairs = _csv(tmp_path / "cmp" / "compare_pairs.csv")
    assert {(p["metric"], p["a"], p["b"]) for p in pairs} >= {("passages_read", "top:1", systems[2]), ("em", "top:1", systems[1])}
    # pipeline.sweep_report prints the cost table from the same cost.csv
    from pipeline.sweep_report import report

    text = report(sweep_out, [1, 5])
    assert "| corpus | system | EM (%) | mean passages read | Pareto front |" in text
    for system in systems[1:]:
        line = next(line for line in text.splitlines() if f"`{system}` | {100 * float(cost[system]['em']):.2f} |" in line)
        assert f"| {float(cost[system]['mean_passages']):.2f} |" in line
