"""pipeline.report: a self-contained HTML report, rendered in real headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import READER, ROOT

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def run_cli(*args, module):
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=ROOT, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def reader_run(tmp_path_factory):
    """The default answer metrics (no --metrics) with the shared reader on a slice, offline."""
    out = tmp_path_factory.mktemp("reader_run")
    proc = run_cli("--dataset", "reqa_squad", "--split", "dev", "--retriever", "bm25", "--limit", "24", "--depth", "20",
                   "--reader", READER, "--selector", "top:3", "--threads", "1", "--out", out, module="pipeline.run")
    assert proc.returncode == 0, proc.stderr[-2000:]
    (out.parent / "stdout.txt").write_text(proc.stdout)
    (out.parent / "stderr.txt").write_text(proc.stderr)
    return out


@pytest.mark.slow
def test_default_reader_run_reports_five_answer_metrics_offline(reader_run):
    metrics = json.loads((reader_run / "metrics.json").read_text())
    reading = metrics["reading"]
    for name in ("em", "f1", "rouge_l", "meteor", "bert_f1"):
        assert 0.0 <= reading[name] <= 1.0, name  # fractions
        lo, hi = metrics["ci95"][f"reading.{name}"]
        assert lo <= reading[name] <= hi
    info = reading["bert_f1_info"]
    assert info["fallback"] and "all-MiniLM-L6-v2" in info["note"] and info["num_layers"] >= 1
    assert info["bert_score_version"] and info["rescale_with_baseline"] is False
    stderr = (reader_run.parent / "stderr.txt").read_text()
    assert sum(l.startswith("note: BERT-F1 uses the offline fallback") for l in stderr.splitlines()) == 1
    # the error split: wrong = retrieval misses + reading misses, printed and consistent with details.jsonl
    errors = reading["errors"]
    details = [json.loads(l) for l in (reader_run / "details.jsonl").read_text().splitlines()]
    assert errors["wrong"] == pytest.approx(errors["retrieval_misses"] + errors["reading_misses"])
    assert errors["retrieval_misses"] == pytest.approx(sum(d["error"] == "retrieval" for d in details) / len(details))
    assert all((d["error"] is None) == (d["em"] == 1.0) for d in details)
    assert all((d["error"] == "retrieval") == (not any(p["answer_bearing"] for p in d["read"])) for d in details if d["error"])
    assert "retrieval misses" in (reader_run.parent / "stdout.txt").read_text()
    per_query = [json.loads(l) for l in (reader_run / "per_query.jsonl").read_text().splitlines()]
    scored = [r["bert_f1"] for r in per_query if r.get("bert_f1") is not None]
    assert sum(scored) / len(scored) == pytest.approx(reading["bert_f1"], abs=1e-9)


def chromium(*args, profile):
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                           "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=180)


def rendered_questions(dom: str) -> str:
    start = dom.index('<div id="questions">')
    return dom[start: dom.index("<script", start)]


@pytest.mark.slow
def test_report_renders_in_headless_chromium(reader_run, tmp_path):
    out = tmp_path / "report.html"
    proc = run_cli(reader_run, "--out", out, module="pipeline.report")
    assert proc.returncode == 0, proc.stderr[-2000:]
    page = out.read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # self-contained: nothing fetched at view time
    if CHROMIUM is None:
        pytest.skip("chromium not installed (install.sh installs Debian's chromium): the HTML was built but not rendered")
    dom = chromium("--dump-dom", out.as_uri(), profile=tmp_path / "profile").stdout
    for table in ("retrieval-table", "reading-table", "errors-table"):
        assert f'id="{table}"' in dom
    assert "<td>bert_f1</td>" in dom
    for control in ("f-wrong", "f-kind", "f-n", "prev", "next"):
        assert f'id="{control}"' in dom
    assert '<option value="3">n = 3</option>' in dom  # filled in by the page's script
    questions = rendered_questions(dom)
    details = [json.loads(l) for l in (reader_run / "details.jsonl").read_text().splitlines()]
    assert questions.count('<div class="q ') == min(25, len(details))
    assert '<mark class="pred' in questions and '<mark class="gold">' in questions  # highlighted spans
    # a filter preset in the address: wrong answers that are retrieval misses only
    dom = chromium("--dump-dom", out.as_uri() + "#wrong=1&kind=retrieval", profile=tmp_path / "profile").stdout
    shown = re.findall(r'<div class="q ([a-z]+)"', rendered_questions(dom))
    expected = sum(d["error"] == "retrieval" for d in details)
    assert shown == ["retrieval"] * min(expected, 25) and f">{expected} questions, page 1" in dom
    shot = tmp_path / "report.png"
    chromium("--window-size=1200,1500", f"--screenshot={shot}", out.as_uri(), profile=tmp_path / "profile")
    assert shot.stat().st_size > 10_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_of_a_directory_that_is_no_run_is_one_error(tmp_path):
    proc = run_cli(tmp_path, module="pipeline.report")
    assert proc.returncode == 2 and proc.stderr.startswith("error:") and "neither a pipeline.run directory" in proc.stderr
