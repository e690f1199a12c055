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
    # the retrieval browser follows the answers, on the same questions as ReQA counts them (one per question text;
    # its own controls and page)
    assert 'id="first-gold-table"' in dom and 'id="r-missed"' in dom
    first = files_first_gold(reader_run)
    assert [q for q, _ in shown_first_gold(dom)] == list(first)[:25] and len(first) < len(details)
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


@pytest.mark.slow
def test_sweep_report_with_a_relative_out_embeds_its_plots(tmp_path):
    """README's commands: a sweep with a relative --out, then its report: summary.json names the plots relative to the
    sweep directory, and a report finds them whatever directory it runs from (and for summaries that recorded
    cwd-relative or absolute paths, by file name under the sweep directory)."""
    import os

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
               QA_CACHE_DIR=str(tmp_path / "cache"))

    def run_in(cwd, *args, module):
        return subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=900)

    proc = run_in(tmp_path, "--dataset", "squad_open", "--limit", "8", "--corpus-sizes", "x1,x2", "--seeds", "1", "--n", "1-3",
                  "--reader", READER, "--no-ordinal", "--thetas", "0.8", "--metrics", "em,f1", "--bootstrap", "20",
                  "--out", "runs/first-sweep", module="pipeline.sweep")
    assert proc.returncode == 0, proc.stderr[-3000:]
    sweep = tmp_path / "runs" / "first-sweep"
    summary = json.loads((sweep / "summary.json").read_text())
    pngs = [p for p in summary["plots"] if p.endswith(".png")]
    assert len(pngs) == 5 and all((sweep / p).is_file() for p in pngs)  # relative to the sweep directory
    proc = run_in(tmp_path, "runs/first-sweep", "--out", "runs/first-sweep/report.html", module="pipeline.report")
    assert proc.returncode == 0, proc.stderr[-2000:]
    page = (sweep / "report.html").read_text()
    assert page.count("<img ") == 5 and page.count("data:image/png;base64,") == 5
    from pipeline.report import build_report  # from another directory, and for summaries written before the fix

    assert build_report(sweep).count("<img ") == 5
    for recorded in ([f"runs/first-sweep/{p}" for p in summary["plots"]], [f"/elsewhere/first-sweep/{p}" for p in summary["plots"]]):
        (sweep / "summary.json").write_text(json.dumps({**summary, "plots": recorded}))
        assert build_report(sweep).count("<img ") == 5, recorded



# ------------------------------------------------------------------ retrieval-only runs
SQUAD_DEV = "squad/dev-v1.1.json.zip"


@pytest.fixture(scope="module")
def retrieval_run(tmp_path_factory):
    """A retrieval-only run over the first 820 SQuAD dev ids: 810 ReQA questions, the Super Bowl 50 article and 10 of
    Warsaw's (two articles, so the article filter is offered), depth 1000 (run.trec holds all 1000)."""
    out = tmp_path_factory.mktemp("retrieval_run")
    proc = run_cli("--dataset", "reqa_squad", "--split", "dev", "--retriever", "bm25", "--limit", "820",
                   "--threads", "1", "--out", out, module="pipeline.run")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


def files_first_gold(run_dir) -> dict:
    """Question id -> rank of its first gold passage in run.trec (None: not there), from run.trec and qrels.tsv alone,
    in queries.jsonl's order."""
    order = [json.loads(l)["_id"] for l in (run_dir / "queries.jsonl").read_text().splitlines()]
    gold: dict = {}
    for line in (run_dir / "qrels.tsv").read_text().splitlines()[1:]:
        qid, doc, grade = line.split("\t")
        if int(grade) > 0:
            gold.setdefault(qid, set()).add(doc)
    first = {qid: None for qid in order}
    for line in (run_dir / "run.trec").read_text().splitlines():
        qid, _, doc, rank, _, _ = line.split()
        if doc in gold.get(qid, ()) and (first[qid] is None or int(rank) < first[qid]):
            first[qid] = int(rank)
    return first


def embedded(page: str, ident: str) -> dict:
    blob = re.search(rf'<script type="application/json" id="{ident}">(.*?)</script>', page, re.S).group(1)
    return json.loads(blob.replace("<\\/", "</"))


def rendered_retrieval(dom: str) -> str:
    start = dom.index('<div id="r-questions">')
    return dom[start: dom.index("<script", start)]


def shown_first_gold(dom: str) -> list[tuple[str, str]]:
    """(question id, its 'first gold ...' line) of each question the page shows."""
    return re.findall(r'<div class="rq b\d"><b>.*?</b> <span class="meta">([^ <]+).*?<span class="first">([^<]*)</span>',
                      rendered_retrieval(dom))


@pytest.fixture(scope="module")
def retrieval_report(retrieval_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("retrieval_report") / "report.html"
    proc = run_cli(retrieval_run, "--out", out, module="pipeline.report")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


@pytest.mark.slow
def test_retrieval_only_report_has_first_gold_ranks_agreeing_with_run_trec_and_qrels(retrieval_run, retrieval_report, reqa_dev):
    page = retrieval_report.read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # self-contained
    assert "no answers to browse" in page and 'id="first-gold-table"' in page
    data = embedded(page, "retrieval-data")
    first = files_first_gold(retrieval_run)
    assert [q["id"] for q in data["questions"]] == list(first) and len(first) == 810
    assert {q["id"]: q["r"] for q in data["questions"]} == first
    assert data["depth"] == 1000 and data["retrieval_depth"] == 1000 and data["top"] == 10
    # the summary: rank buckets from the files; run.trec is the whole ranking, so a question not in it has rr 0
    rr = {r["id"]: r["rr"] for r in map(json.loads, (retrieval_run / "per_query.jsonl").read_text().splitlines())}
    ranks = list(first.values())
    assert all(rr[q] == 0 for q, r in first.items() if r is None)
    expected = [sum(r == 1 for r in ranks if r), sum(2 <= r <= 5 for r in ranks if r), sum(6 <= r <= 10 for r in ranks if r),
                sum(11 <= r <= 100 for r in ranks if r), sum(101 <= r <= 1000 for r in ranks if r),
                sum(r is None for r in ranks)]
    table = re.search(r'<table id="first-gold-table">(.*?)</table>', page, re.S).group(1)
    counts = [int(n) for n in re.findall(r"</a></td><td>(\d+)</td>", table)]
    assert counts == expected and sum(counts) == 810 and expected[4] > 0 and expected[5] > 0
    metrics = json.loads((retrieval_run / "metrics.json").read_text())
    assert expected[5] == metrics["retrieval"]["reqa"]["not_found_within_depth"]
    # the top 10 of each question is run.trec's, gold marked from the qrels; texts are the corpus', cut at 400
    run = {}
    for line in (retrieval_run / "run.trec").read_text().splitlines():
        qid, _, doc, rank, score, _ = line.split()
        run.setdefault(qid, []).append(doc)
    passages = data["passages"]
    gold = {}
    for line in (retrieval_run / "qrels.tsv").read_text().splitlines()[1:]:
        gold.setdefault(line.split("\t")[0], set()).add(line.split("\t")[1])
    for q in data["questions"]:
        assert [passages[p][0] for p, _, _ in q["t"]] == run[q["id"]][:10]
        assert [g for _, _, g in q["t"]] == [int(d in gold[q["id"]]) for d in run[q["id"]][:10]]
        outside = {passages[p][0] for p, _ in q.get("o", [])}
        assert outside == gold[q["id"]] - set(run[q["id"]][:10])  # the gold passages not in the top 10, all of them
    text_of = dict(zip(reqa_dev.corpus.ids, reqa_dev.corpus.texts))
    assert all(t == text_of[d][:400] and cut == (len(text_of[d]) > 400) for d, t, cut, _ in passages)
    assert data["notes"] == [] and data["fields"][0]["label"] == "article"
    assert data["fields"][0]["values"] == ["Super Bowl 50", "Warsaw"] and data["fields"][0]["filter"]


def squad_article_ids(article: str) -> set[str]:
    import zipfile

    from tests.conftest import DATA

    with zipfile.ZipFile(DATA / SQUAD_DEV) as z:
        squad = json.loads(z.read(z.namelist()[0]))
    return {qa["id"] for a in squad["data"] if a["title"] == article for p in a["paragraphs"] for qa in p["qas"]}


@pytest.mark.slow
def test_retrieval_browser_filters_in_headless_chromium(retrieval_run, retrieval_report, tmp_path):
    if CHROMIUM is None:
        pytest.skip("chromium not installed (install.sh installs Debian's chromium)")
    first = files_first_gold(retrieval_run)
    url = retrieval_report.as_uri()
    dom = chromium("--dump-dom", url, profile=tmp_path / "profile").stdout
    for control in ("r-missed", "r-k", "r-bucket", "r-field-0", "r-prev", "r-next"):
        assert f'id="{control}"' in dom
    shown = shown_first_gold(dom)
    assert len(shown) == 25 and ">810 questions, page 1 of 33" in dom
    for qid, line in shown:  # the ranks the page shows are run.trec's
        assert line == (f"first gold at rank {first[qid]}" if first[qid] else line) and (first[qid] is None) == ("not within" in line)
    assert '<div class="rp gold">' in rendered_retrieval(dom)
    # filters preset in the address: first gold not in run.trec; below rank k; an article; and the page
    missed = [q for q, r in first.items() if r is None]
    dom = chromium("--dump-dom", url + "#missed=1", profile=tmp_path / "profile").stdout
    assert f">{len(missed)} questions, page 1 of {-(-len(missed) // 25)}<" in dom
    assert [q for q, _ in shown_first_gold(dom)] == missed[:25] and all("not within" in line for _, line in shown_first_gold(dom))
    below = [q for q, r in first.items() if r is None or r > 5]
    dom = chromium("--dump-dom", url + "#k=5&page=2", profile=tmp_path / "profile").stdout
    assert f">{len(below)} questions, page 2 of {-(-len(below) // 25)}<" in dom
    assert [q for q, _ in shown_first_gold(dom)] == below[25:50]
    article = squad_article_ids("Warsaw")
    warsaw = [q for q in first if q in article]
    dom = chromium("--dump-dom", url + "#article=Warsaw", profile=tmp_path / "profile").stdout
    assert 0 < len(warsaw) < 25 and [q for q, _ in shown_first_gold(dom)] == warsaw
    assert f">{len(warsaw)} questions, page 1 of 1<" in dom
    dom = chromium("--dump-dom", url + "#bucket=0", profile=tmp_path / "profile").stdout  # the summary's "rank 1" link
    assert f">{sum(r == 1 for r in first.values())} questions, page 1" in dom
    shot = tmp_path / "retrieval.png"
    chromium("--window-size=1280,1600", f"--screenshot={shot}", url, profile=tmp_path / "profile")
    assert shot.stat().st_size > 10_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_retrieval_browser_options_and_a_dataset_that_is_gone(retrieval_run, tmp_path):
    """--top and --passage-chars shape the browser; a run whose dataset cannot be loaded keeps ids, ranks and scores."""
    out = tmp_path / "small.html"
    proc = run_cli(retrieval_run, "--out", out, "--top", "3", "--passage-chars", "50", module="pipeline.report")
    assert proc.returncode == 0, proc.stderr[-2000:]
    page = out.read_text()
    data = embedded(page, "retrieval-data")
    assert all(len(q["t"]) == 3 for q in data["questions"]) and all(len(p[1]) <= 50 for p in data["passages"])
    assert "texts are cut at 50 characters" in page and data["cut"] > 0
    moved = tmp_path / "moved"
    shutil.copytree(retrieval_run, moved)
    manifest = json.loads((moved / "manifest.json").read_text())
    manifest["config"]["data"]["dataset"] = f"squad_file:{tmp_path / 'gone.json'}"
    (moved / "manifest.json").write_text(json.dumps(manifest))
    proc = run_cli(moved, "--out", tmp_path / "gone.html", module="pipeline.report")
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = embedded((tmp_path / "gone.html").read_text(), "retrieval-data")
    assert "passage texts not available" in data["notes"][0] and "gone.json" in data["notes"][0]
    assert all(p[1] is None for p in data["passages"]) and {q["id"]: q["r"] for q in data["questions"]} == files_first_gold(moved)
    proc = run_cli(retrieval_run, "--out", tmp_path / "none.html", "--top", "0", module="pipeline.report")
    assert proc.returncode == 0 and 'id="retrieval-data"' not in (tmp_path / "none.html").read_text()


def test_first_gold_buckets_follow_the_depths():
    """The summary's rank buckets: 1, 2-5, 6-10, 11-100 below run.trec's top 100; fewer when a run ranks fewer."""
    from pipeline.report_retrieval import bucket_labels

    labels, edges = bucket_labels(100, 1000)
    assert edges == [1, 5, 10, 100]
    assert labels == ["rank 1", "rank 2–5", "rank 6–10", "rank 11–100", "beyond rank 100 (within depth 1000)",
                      "not within depth 1000", "no gold passage in the qrels"]
    labels, edges = bucket_labels(20, 20)  # --depth 20: run.trec is the whole ranking, nothing lies beyond it
    assert edges == [1, 5, 10, 20] and labels[3:5] == ["rank 11–20", "beyond rank 20"] and labels[5] == "not within depth 20"
