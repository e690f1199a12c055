"""bench/_machine.py: the busy-machine guard (with injected load readings), FLOP counts, the matmul ceiling."""

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def machine():
    spec = importlib.util.spec_from_file_location("bench_machine", ROOT / "bench" / "_machine.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_machine"] = mod
    spec.loader.exec_module(mod)
    return mod


def readings(*values):
    it = iter(values)
    return lambda: next(it)


def test_quiet_machine_is_a_result(machine, capsys):
    guard = machine.Guard(threads=2, cores=2, load_reader=readings(0.1, 0.9)).start()
    assert machine.finish(guard) == 0
    out = capsys.readouterr().out
    assert "machine quiet throughout" in out and "NOT A RESULT" not in out


def test_busy_before_is_refused(machine, capsys):
    guard = machine.start(2, load_reader=readings(1.6, 0.2))
    guard.cores = 2
    assert machine.finish(guard) == machine.EXIT_BUSY
    captured = capsys.readouterr()
    assert "NOT A RESULT" in captured.out and "1.60" in captured.out
    assert "warning: load average 1.60" in captured.err


def test_busy_after_counts_the_bench_own_threads(machine, capsys):
    # after the run, 2 of the load are the bench's own threads: 2.9 - 2 = 0.9 <= 1.0 (half of 2 cores)
    quiet = machine.Guard(threads=2, cores=2, load_reader=readings(0.0, 2.9)).start()
    assert machine.finish(quiet) == 0
    # 3.2 - 2 = 1.2 > 1.0: something else ran beside it
    busy = machine.Guard(threads=2, cores=2, load_reader=readings(0.0, 3.2)).start()
    assert machine.finish(busy) == machine.EXIT_BUSY
    assert "NOT A RESULT" in capsys.readouterr().out.splitlines()[-1]


def test_allow_busy_exits_zero_but_still_says_so(machine, capsys):
    guard = machine.Guard(threads=1, cores=2, load_reader=readings(5.0, 5.0)).start()
    assert machine.finish(guard, allow_busy=True) == 0
    assert "NOT A RESULT" in capsys.readouterr().out


def test_is_busy_threshold(machine):
    assert not machine.is_busy(1.0, 2)
    assert machine.is_busy(1.01, 2)
    assert not machine.is_busy(7.9, 16)
    assert machine.is_busy(3.0, 2, own=1.0)


def test_header_names_cpu_flags_threads_and_load(machine):
    import hardware

    guard = machine.Guard(threads=2, cores=2, load_reader=readings(0.25)).start()
    head = guard.header()
    assert hardware.cpu_model() in head and "2 threads" in head and "0.25" in head
    assert ("native bf16" in head) and (("no native bf16" in head) != hardware.cpu_has_native_bf16())


def test_encoder_flops_by_hand(machine):
    config = SimpleNamespace(hidden_size=384, intermediate_size=1536, num_hidden_layers=6)
    L, d, f = 100, 384, 1536
    one = 6 * (8 * L * d * d + 4 * L * d * f + 4 * L * L * d)
    assert machine.encoder_flops(config, [100]) == one
    assert machine.encoder_flops(config, [100, 100]) == 2 * one
    assert machine.encoder_flops(config, [200]) > 2 * one  # attention grows with L^2


def test_matmul_ceiling_is_measured(machine):
    gflops = machine.matmul_ceiling("float32", threads=1, n=128, seconds=0.05)
    assert 0.01 < gflops < 1e5


def test_scale_extrapolation_is_at_least_linear_where_the_work_is():
    """bench/scale.py: a stage whose measured growth is sublinear (fixed costs at small N) is extrapolated
    linearly when its work is linear in N; the growth it reports stays the measured one."""
    from bench.scale import LINEAR, extrapolate, report

    growth, at_100 = extrapolate([1, 10], [2.0, 8.0], 100)
    assert growth == pytest.approx(4.0) and at_100 == pytest.approx(32.0)  # the power law through both points
    growth, at_100 = extrapolate([1, 10], [2.0, 8.0], 100, min_exponent=1.0)
    assert growth == pytest.approx(4.0) and at_100 == pytest.approx(80.0)  # linear from the largest size
    assert extrapolate([1, 10], [2.0, 40.0], 100, min_exponent=1.0)[1] == pytest.approx(800.0)  # steeper stays steeper
    assert LINEAR == {"store": True, "index": True, "retrieve": True, "read": False}
    run = {"store": {"stage": "store", "load_s": 1.0, "peak_rss_mib": 100, "passages_per_s": 1000},
           "index": {"stage": "index", "index_s": 2.0, "peak_rss_mib": 200},
           "retrieve": {"stage": "retrieve", "search_s": 1.0, "has_answer_s": 1.0, "peak_rss_mib": 300, "dpr": {}},
           "read": {"stage": "read", "read_s": 5.0, "peak_rss_mib": 400}, "disk": {"store": 2**20, "bm25": 2**20}}
    big = {k: dict(v) for k, v in run.items()}
    big["index"]["index_s"] = 4.0  # x2 per 10x measured, x10 extrapolated
    results = {"args": {"questions": 10, "depth": 5, "read_questions": 2, "threads": 2}, "runs": {"1000": run, "10000": big}}
    text = report(results, [1000, 10000], 2)
    index_row = next(line for line in text.splitlines() if line.startswith("| index |") and "hours" not in line and "2.00" in line)
    assert "| 4.0 |" in index_row  # the measured seconds
    hours = [line for line in text.splitlines() if line.startswith("| index | ") and line.count("|") == 5][0]
    assert float(hours.split("|")[2]) == pytest.approx(4.0 * 21_015_324 / 10_000 / 3600, abs=0.01)


def test_scale_compares_store_plus_index_with_pyserinis_indexer(tmp_path):
    """bench/scale.py: Pyserini's indexer gets the TSV's passages as JSONL shards (contents = title\\ntext, as our
    store indexes them), and the report sets its time against our store + index time."""
    import csv
    import json

    from bench.scale import report, write_jsonl

    tsv = tmp_path / "psgs.tsv"
    rows = [("1", 'a "quoted" text', "Title One"), ("2", "untitled text", ""), ("3", "tab-free, comma, text", "T3")]
    with open(tsv, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, delimiter="\t")
        w.writerow(["id", "text", "title"])
        w.writerows(rows)
    write_jsonl(tsv, len(rows), tmp_path / "jsonl", shards=2)
    shards = sorted((tmp_path / "jsonl").glob("*.jsonl"))
    assert [p.name for p in shards] == ["docs-000.jsonl", "docs-001.jsonl"] and (tmp_path / "jsonl" / "_COMPLETE").is_file()
    docs = [json.loads(line) for p in shards for line in p.read_text(encoding="utf-8").splitlines()]
    assert docs == [{"id": pid, "contents": f"{title}\n{text}" if title else text} for pid, text, title in rows]

    def run(store_s, index_s, pyserini_s):
        return {"store": {"stage": "store", "load_s": store_s, "peak_rss_mib": 100, "passages_per_s": 1000},
                "index": {"stage": "index", "index_s": index_s, "peak_rss_mib": 200},
                "retrieve": {"stage": "retrieve", "search_s": 1.0, "has_answer_s": 1.0, "peak_rss_mib": 300, "dpr": {}},
                "read": {"stage": "read", "read_s": 5.0, "peak_rss_mib": 400}, "disk": {"store": 2**20, "bm25": 2**20},
                "pyserini": {"stage": "pyserini", "index_s": pyserini_s, "peak_rss_mib": 250}}

    results = {"args": {"questions": 10, "depth": 5, "read_questions": 2, "threads": 2},
               "runs": {"1000": run(1.0, 2.0, 2.7), "10000": run(2.0, 8.0, 12.0)}}
    lines = report(results, [1000, 10000], 2).splitlines()
    assert "| 1,000 | 3.0 | 333 | 2.7 | 370 | 0.90 |" in lines
    assert "| 10,000 | 10.0 | 1,000 | 12.0 | 833 | 1.20 |" in lines
    # --repeat: medians of the run pairs, the ratio of the medians with the lowest and highest pair ratio
    results["runs"]["10000"]["build_repeats"] = [[12.0, 9.0], [9.0, 11.0]]
    lines = report(results, [1000, 10000], 2).splitlines()
    assert "| 10,000 | 10.0 | 1,000 | 11.0 | 909 | 1.10 (0.75–1.22, 3 runs each) |" in lines
    assert any("medians of alternating runs" in line for line in lines)


def test_scale_report_at_dprs_size_is_measured_and_sets_our_search_against_bare_batch_search():
    """bench/scale.py: with DPR's passage count as the largest size the hours are the measured ones (not an
    extrapolation); the search comparison gives q/s, the speed-up, each side's own peak RSS (not the parent's
    wait4 figure, which starts at the parent's RSS) and a failed peer as a row; disk is set against the TSV."""
    from bench.scale import DPR_PASSAGES, parse_size, peak_rss, report

    assert parse_size("dpr") == DPR_PASSAGES == 21_015_324 and parse_size("1M") == 1_000_000

    def run(scale):
        return {"store": {"stage": "store", "load_s": 1.0 * scale, "wall_s": 2.0 * scale, "peak_rss_mib": 900,
                          "own_peak_rss_mib": 100, "children_peak_rss_mib": 0.0, "passages_per_s": 1000},
                "index": {"stage": "index", "index_s": 2.0 * scale, "wall_s": 3.0 * scale, "peak_rss_mib": 900,
                          "own_peak_rss_mib": 150, "children_peak_rss_mib": 500},
                "retrieve": {"stage": "retrieve", "search_s": 1.0, "has_answer_s": 1.0, "wall_s": 4.0, "peak_rss_mib": 300,
                             "search_s_at": {"100": 0.5, "1000": 1.0}, "dpr": {"Top20": 0.5, "Top100": 0.75}},
                "read": {"stage": "read", "read_s": 5.0, "wall_s": 6.0, "peak_rss_mib": 400},
                "disk": {"store": 3 * 2**20, "bm25": 2**20, "tsv": 2 * 2**20}}

    small, big = run(1), run(21)
    big["search"] = {"100": {"ours": {"questions": 50, "search_s": 1.0, "own_peak_rss_mib": 200, "children_peak_rss_mib": 0},
                             "bare": {"questions": 50, "search_s": 2.5, "own_peak_rss_mib": 800, "children_peak_rss_mib": 0},
                             "identical": True},
                     "1000": {"error": "error: stage bare-search failed (exit 1)"}}
    assert peak_rss(small["index"]) == 500 and peak_rss(small["retrieve"]) == 300  # own/children, else wait4's
    results = {"args": {"questions": 10, "depth": 1000, "depths": [100, 1000], "read_questions": 2, "threads": 2},
               "runs": {"1000000": small, str(DPR_PASSAGES): big}}
    lines = report(results, [1_000_000, DPR_PASSAGES], 2).splitlines()
    assert any(line.startswith("At 21,015,324 passages (DPR's Wikipedia count), measured") for line in lines)
    assert not any(line.startswith("Extrapolation") for line in lines)
    assert "| 21,015,324 | 100 | 50 | 50.0 | 20.0 | 2.50 | 200 | 800 | 0.25 | yes |" in lines
    assert "| 21,015,324 | 1000 | – | – | failed | – | – | – | – | – |" in lines
    assert "| 21,015,324 | 0.5 | 1.0 |" in lines  # search seconds at each depth
    assert any(line.startswith("| 21,015,324 | 2 | 3 | 1 | 2.00 |") for line in lines)  # (store + index) / TSV
    index_hours = next(line for line in lines if line.startswith("| index | ") and line.count("|") == 5)
    assert float(index_hours.split("|")[2]) == pytest.approx(42.0 / 3600, abs=0.01)  # measured, not scaled
