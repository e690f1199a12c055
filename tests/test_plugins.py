"""A third-party package (tests/qa_plugin) adds a selector, an answer metric, a retriever and a dataset loader
through entry points only; all four work from the command line, a config file, the sweep and the Python API.

Each check runs in a fresh process with the package on ``PYTHONPATH``, as an installed plugin would be
seen: its ``.dist-info/entry_points.txt`` is what ``importlib.metadata`` reads.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import READER, ROOT

PLUGIN = ROOT / "tests" / "qa_plugin"
COMMON = ["--reader", str(READER), "--threads", "1", "--reader-batch-size", "8"]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(PLUGIN), str(ROOT)])
    e["QA_CACHE_DIR"] = str(tmp_path_factory.mktemp("plugin-cache"))
    return e


def run(env, *args, module="pipeline.run"):
    proc = subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


@pytest.fixture(scope="module")
def cli_run(env, tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "run"
    run(env, "--dataset", "tiny_squad:2", "--limit", "15", "--retriever", "overlap[idf=false]", "--depth", "20",
        "--selector", "relative:0.8,5", "--metrics", "em,char_f1", *COMMON, "--out", out)
    return out


def test_all_four_plugins_from_the_command_line(cli_run):
    metrics = json.loads((cli_run / "metrics.json").read_text())
    assert metrics["dataset"] == "tiny_squad:2" and metrics["retriever"] == "overlap[idf=false]"
    chance = 10 / metrics["corpus_size"]  # R@10 of a random ranking with one gold sentence
    assert metrics["retrieval"]["reqa"]["sentence"]["R@10"] > 5 * chance  # the plugin retriever finds answers
    reading = metrics["reading"]
    assert 0 < reading["char_f1"] <= 1 and reading["char_f1"] >= reading["em"]  # character F1 gives partial credit
    assert reading["selector"] == "relative:0.8,5" and 1 <= reading["mean_n"] <= 5
    assert json.loads((cli_run / "selector.json").read_text())["selector"]["method"] == "relative"
    rows = [json.loads(line) for line in (cli_run / "per_query.jsonl").read_text().splitlines()]
    assert all("char_f1" in r for r in rows if "em" in r)
    assert "reading.char_f1" in metrics["ci95"]


@pytest.mark.slow
def test_all_four_plugins_from_a_config_file(env, cli_run, tmp_path):
    config = tmp_path / "plugins.yaml"
    config.write_text(textwrap.dedent(f"""\
        data: {{dataset: "tiny_squad:2", limit: 15}}
        retriever:
          spec: overlap
          depth: 20
          options: {{overlap: {{idf: "false"}}}}
        selector: "relative:0.8,5"
        reader: {{model: "{READER}", batch_size: 8}}
        metrics: {{answer: [em, char_f1]}}
        threads: 1
        """))
    out = tmp_path / "run"
    run(env, "--config", config, "--out", out)
    a, b = (json.loads((d / "metrics.json").read_text()) for d in (cli_run, out))
    assert a["reading"] == {**b["reading"], "selector": a["reading"]["selector"]}  # same reads, same scores
    assert a["retrieval"] == b["retrieval"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["retriever"]["options"] == {"overlap": {"idf": "false"}}


@pytest.mark.slow
def test_all_four_plugins_in_the_sweep(env, tmp_path):
    out = tmp_path / "sweep"
    run(env, "--dataset", "tiny_squad:2", "--limit", "12", "--retriever", "overlap", "--n", "1-3", "--corpus-sizes", "x1,all",
        "--seeds", "1", "--selector", "relative:0.8,3", "--metrics", "em,f1,char_f1", "--no-ordinal", "--no-plots",
        "--bootstrap", "20", *COMMON[:2], "--reader-batch-size", "8", "--out", out, module="pipeline.sweep")
    with open(out / "summary.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {"top:1", "top:3", "relative:0.8,3", "oracle"} <= {r["system"] for r in rows}
    for r in rows:
        assert 0 <= float(r["char_f1_mean"]) <= 1 and float(r["char_f1_mean"]) >= float(r["em_mean"]) - 1e-9
    summary = json.loads((out / "summary.json").read_text())
    assert "relative:0.8,3" in summary["regret"]["systems"]


@pytest.mark.slow
def test_all_four_plugins_from_the_python_api(env, tmp_path):
    script = textwrap.dedent(f"""\
        import json
        from pipeline import api

        ds = api.load_dataset("tiny_squad:2", "dev", limit=15)
        ranking = api.retrieve(api.make_retriever("overlap", overlap={{"idf": False}}), ds, depth=20)
        selector = api.make_selector("relative:0.8,5")
        n = api.select(selector, ranking, ds)
        reader = api.make_reader({str(READER)!r}, threads=1)
        predictions = api.read(reader, ds, ranking, n=n)
        scores = api.answer_metrics(predictions, ds, metrics=("em", "char_f1"))
        result = api.run({{"data": {{"dataset": "tiny_squad:2", "limit": 15}}, "retriever": {{"spec": "overlap[idf=false]", "depth": 20}},
                          "selector": "relative:0.8,5", "reader": {{"model": {str(READER)!r}}}, "threads": 1,
                          "metrics": {{"answer": ["em", "char_f1"]}}, "out": {str(tmp_path / "api-run")!r}}})
        print(json.dumps({{"scores": scores, "run": result.metrics["reading"], "mean_n": float(n.mean())}}))
        """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    # the notebook's stages and the whole run agree
    assert got["scores"]["em"] == pytest.approx(got["run"]["em"]) and got["scores"]["char_f1"] == pytest.approx(got["run"]["char_f1"])
    assert got["mean_n"] == pytest.approx(got["run"]["mean_n"])
