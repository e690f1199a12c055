"""``python -m tests.fault_table`` turns the parts' results into the right rows (fast: results written here, no part
is run)."""

import json
import re
from pathlib import Path

import pytest

from tests import fault_table
from tests.fault_table import (CACHE_CASES, CONCURRENT, END, START, cache_rows, concurrency_rows, fuzz_rows,
                               junit_cases, kill_rows, main, markdown, replace_in_docs, summarize)

TESTS = Path(__file__).resolve().parent


def kill(stage, command, index, recovered=True, problems=()):
    return {"stage": stage, "command": command, "seed": 1, "index": index, "recovered": recovered,
            "problems": list(problems)}


KILLS = [kill("reading", "read", 0), kill("reading", "read", 1),
         kill("reading", "read", 2, False, ["metrics.json: bytes differ"]),
         kill("corpus store", "export", 0), kill("final model", "train", 0)]
FUZZ = [{"format": "squad", "cases_tried": 100, "failures": 0}, {"format": "squad", "cases_tried": 250, "failures": 0},
        {"format": "trec-run", "cases_tried": 80, "failures": 1}]


def junit(path: Path, cases: list[tuple[str, str]]) -> Path:
    """A pytest --junitxml file: (test id, outcome) pairs."""
    body = []
    for name, outcome in cases:
        inner = {"passed": "", "failed": '<failure message="AssertionError: the warning is missing">x</failure>',
                 "skipped": '<skipped type="pytest.skip" message="needs root">s</skipped>'}[outcome]
        body.append(f'<testcase classname="tests.test_x" name="{name}" time="1.0">{inner}</testcase>')
    path.write_text('<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">'
                    + "".join(body) + "</testsuite></testsuites>")
    return path


def test_kills_are_counted_per_stage_in_the_matrix_order():
    rows = kill_rows(KILLS)
    assert [r["stage"] for r in rows] == ["corpus store", "reading", "final model"]
    reading = rows[1]
    assert (reading["command"], reading["kills"], reading["recovered"]) == ("python -m pipeline.run", 3, 2)
    assert reading["failures"] == ["kill 2: metrics.json: bytes differ"]
    assert rows[0] == {"stage": "corpus store", "command": "python -m pipeline.export", "kills": 1, "recovered": 1,
                       "failures": []}


def test_fuzz_cases_are_summed_per_format_and_a_failed_case_counts():
    rows = {r["format"]: r for r in fuzz_rows(FUZZ)}
    assert (rows["squad"]["properties"], rows["squad"]["cases"], rows["squad"]["failed"]) == (2, 350, 0)
    assert (rows["trec-run"]["cases"], rows["trec-run"]["failed"]) == (80, 1)
    # a fuzz test that failed with no failed case in the report (outside the cases) is a failure of its own
    tests = [{"name": "test_config_valid_and_damaged", "param": None, "outcome": "failed", "message": "boom"}]
    rows = fuzz_rows(FUZZ[:2], tests)
    assert rows[-1]["format"] == "(outside the cases)" and rows[-1]["failed"] == 1
    assert rows[-1]["failing_tests"] == ["test_config_valid_and_damaged: boom"]


def test_damaged_cache_cases_expand_to_what_they_damage(tmp_path):
    cases = junit_cases(junit(tmp_path / "j.xml", [
        ("test_damaged_dense_caches_are_rebuilt_with_one_warning_each[truncated]", "passed"),
        ("test_damaged_dense_caches_are_rebuilt_with_one_warning_each[flipped byte]", "failed"),
        ("test_damaged_store_is_rebuilt_with_one_warning[truncated]", "passed"),
        ("test_read_only_cache_is_one_error_line[cache-empty]", "skipped"),
        ("test_something_new", "passed")]))
    assert cases[1] == {"file": "tests.test_x", "name": "test_damaged_dense_caches_are_rebuilt_with_one_warning_each",
                        "param": "flipped byte", "outcome": "failed",
                        "message": "AssertionError: the warning is missing"}
    rows = {(r["what"], r["fault"]): r for r in cache_rows(cases)}
    for what in fault_table.DENSE:
        assert (rows[(what, "truncated")]["passed"], rows[(what, "truncated")]["failed"]) == (1, 0)
        assert (rows[(what, "flipped byte")]["passed"], rows[(what, "flipped byte")]["failed"]) == (0, 1)
        assert rows[(what, "flipped byte")]["messages"] == ["AssertionError: the warning is missing"]
    assert rows[("corpus store", "truncated")]["check"] == fault_table.REBUILT
    assert rows[("cache directory", "read-only (empty)")]["skipped"] == 1
    assert rows[("test_something_new", "")]["passed"] == 1  # a test the table does not know still has a row
    # the markdown shows one row per cache kind and check, naming the fault that failed
    (pickle,) = [g for g in fault_table.grouped(cache_rows(cases)) if g["what"] == "dataset pickle"]
    assert (pickle["fault"], pickle["cases"], pickle["passed"], pickle["failed"]) == \
        ("truncated; flipped byte (failed)", 2, 1, 1)


def test_concurrent_runs_count_each_run(tmp_path):
    cases = junit_cases(junit(tmp_path / "j.xml", [
        ("test_runs_started_together_share_every_cache_and_equal_solo_runs", "passed"),
        ("test_two_identical_runs_started_together_equal_a_solo_run", "failed"),
        ("test_read_only_output_directory_is_one_error_line", "passed")]))
    rows = {r["runs"]: r for r in concurrency_rows(cases)}
    assert (rows[4]["identical"], rows[4]["failed"]) == (4, 0)
    assert (rows[2]["identical"], rows[2]["failed"]) == (0, 1)
    # the unwritable output directories go to the fault table, the runs together do not
    assert [r["what"] for r in cache_rows(cases)] == ["output directory"]


def test_the_summary_fails_on_any_failure_and_the_markdown_shows_it():
    good = summarize({"kills": KILLS[:2], "fuzz": FUZZ[:2], "caches": [], "concurrency": []})
    assert good["ok"] and good["totals"]["kills"] == good["totals"]["recovered"] == 2
    assert not summarize({"kills": KILLS, "fuzz": FUZZ[:2]})["ok"]  # a kill not recovered
    assert not summarize({"kills": KILLS[:2], "fuzz": FUZZ})["ok"]  # a failed fuzz case
    assert not summarize({"kills": KILLS[:2], "parts": {"caches": {"rc": 1, "error": ""}}})["ok"]
    text = markdown(summarize({"kills": KILLS, "fuzz": FUZZ}))
    assert text.startswith("**FAILURES**: 4 of 5 kills recovered identically; 1 of 430 fuzz cases failed.")
    assert markdown(good).startswith("**Every fault recovered, every case passed**: 2 of 2 kills")
    assert "| reading | `python -m pipeline.run` | 3 | 2 | kill 2: metrics.json: bytes differ |" in text
    assert "| trec-run | 1 | 80 | 1 |" in text
    assert "5 kills, 4 recovered identically." in text and "430 fuzz cases, 1 failed." in text
    assert "Not run: caches, concurrency." in text
    fuzz_only = markdown(summarize({"fuzz": FUZZ[:2]}))  # the headline names only what ran
    assert fuzz_only.startswith("**Every fault recovered, every case passed**: 0 of 350 fuzz cases failed.\n")


def test_the_headline_counts_the_damaged_inputs_accepted():
    """Reports that count them (``accepted_damaged``) give the headline the number the guide promises is 0; an older
    report without the count leaves it out rather than claim 0."""
    counted = [dict(e, accepted_damaged=0) for e in FUZZ[:2]] + [dict(FUZZ[2], accepted_damaged=1)]
    rows = {r["format"]: r for r in fuzz_rows(counted)}
    assert (rows["squad"]["accepted"], rows["trec-run"]["accepted"]) == (0, 1)
    text = markdown(summarize({"fuzz": counted}))
    assert text.startswith("**FAILURES**: damaged input accepted in 1 case; 1 of 430 fuzz cases failed.")
    assert "430 fuzz cases, 1 failed, 1 of them damaged input accepted." in text
    clean = markdown(summarize({"fuzz": counted[:2]}))
    assert clean.startswith("**Every fault recovered, every case passed**: damaged input accepted in 0 cases; 0 of 350")
    assert summarize({"fuzz": [*counted[:2], FUZZ[0]]})["totals"]["fuzz_accepted"] is None
    assert "damaged input accepted" not in markdown(summarize({"fuzz": FUZZ}))


def test_a_fuzz_case_that_accepts_damaged_input_is_counted_as_such(tmp_path, monkeypatch):
    from tests.test_fuzz_parsers import ACCEPTED, Tally

    monkeypatch.setenv("QA_FUZZ_REPORT", str(tmp_path / "fuzz.json"))
    tally = Tally("toy")

    def prop():
        for outcome in ("ok", "accepted", "other"):
            try:
                with tally.case():
                    assert outcome != "accepted", f"{ACCEPTED}: [('0', '', '')]"
                    assert outcome != "other", "a valid file was refused"
            except AssertionError:
                pass

    tally.run(prop)
    assert json.loads((tmp_path / "fuzz.json").read_text()) == [
        {"format": "toy", "cases_tried": 3, "failures": 2, "accepted_damaged": 1}]


def test_the_command_exits_non_zero_on_a_failed_kill_or_fuzz_case(tmp_path):
    out = tmp_path / "results"
    out.mkdir()
    (out / "kills.jsonl").write_text("".join(json.dumps(k) + "\n" for k in KILLS[:2]))
    (out / "fuzz.json").write_text(json.dumps(FUZZ[:2]))
    assert main(["--parts", "--out", str(out)]) == 0
    table = (out / "faults.md").read_text()
    assert "2 kills, 2 recovered identically." in table and "350 fuzz cases, 0 failed." in table
    assert json.loads((out / "faults.json").read_text())["totals"]["fuzz_cases"] == 350

    (out / "fuzz.json").write_text(json.dumps(FUZZ))
    assert main(["--parts", "--out", str(out)]) == 1
    (out / "fuzz.json").write_text(json.dumps(FUZZ[:2]))
    (out / "kills.jsonl").write_text("".join(json.dumps(k) + "\n" for k in KILLS))
    assert main(["--parts", "--out", str(out)]) == 1


def test_the_docs_table_is_replaced_between_the_markers(tmp_path):
    docs = tmp_path / "faults.md"
    docs.write_text(f"# Faults\n\nbefore\n\n{START}\nold table\n{END}\n\nafter\n")
    replace_in_docs(docs, "| new | table |\n")
    assert docs.read_text() == f"# Faults\n\nbefore\n\n{START}\n| new | table |\n{END}\n\nafter\n"
    docs.write_text("no markers\n")
    with pytest.raises(SystemExit):
        replace_in_docs(docs, "x")
    real = (TESTS.parent / "docs" / "faults.md").read_text()
    assert real.count(START) == 1 and real.count(END) == 1


def test_every_test_the_table_names_exists():
    """A renamed test would drop out of the table's rows: the names are those of the test files."""
    defined = set()
    for name in ("test_damaged_caches.py", "test_shared_caches.py"):
        defined |= set(re.findall(r"^def (test_\w+)", (TESTS / name).read_text(), re.M))
    assert set(CACHE_CASES) | set(CONCURRENT) <= defined
    damaged = set(re.findall(r"^def (test_\w+)", (TESTS / "test_damaged_caches.py").read_text(), re.M))
    assert damaged <= set(CACHE_CASES)


def test_the_fuzz_split_gives_each_format_its_cases():
    """``--fuzz-examples`` is per format: the tests ``HALF_A_FORMAT`` selects are those of the formats fuzzed by two
    properties, each of which then gets half."""
    source = (TESTS / "test_fuzz_parsers.py").read_text()
    formats: dict[str, list[str]] = {}
    for name, body in re.findall(r"^def (test_\w+)\(.*?\n(.*?)(?=^def |\Z)", source, re.M | re.S):
        m = re.search(r'Tally\("([^"]+)"\)', body)
        if m:
            formats.setdefault(m.group(1), []).append(name)

    def half(name):  # the -k expression, for these names
        return "valid_round_trip" in name or ("damaged" in name and "valid_and_damaged" not in name
                                              and "through_the_commands" not in name)

    assert fault_table.HALF_A_FORMAT == ("valid_round_trip or (damaged and not valid_and_damaged and not "
                                         "through_the_commands)")
    assert len(formats) >= 12
    for fmt, tests in formats.items():
        assert len(tests) in (1, 2), (fmt, tests)
        assert all(half(t) == (len(tests) == 2) for t in tests), (fmt, tests)
