"""The mutation-testing command (tests/mutation.py) on one small module: it runs mutmut end to end and its
score counts what mutmut reports (the full table is docs/mutation.md; not run in CI: minutes per module)."""

import shutil

import pytest

pytest.importorskip("mutmut")


@pytest.mark.slow
def test_mutation_command_scores_a_module():
    from tests.mutation import run_module, table

    row = run_module("selection/oracle.py", ["tests/test_selectors.py"])  # the smallest module: ~20 mutants
    assert row["mutants"] > 10
    assert row["killed"] + row["timeout"] + row["survived"] + row["no_tests"] == row["mutants"]
    assert row["score"] == pytest.approx((row["killed"] + row["timeout"]) / (row["mutants"] - row["equivalent"]))
    assert row["killed"] > 0 and len(row["survivors"]) == row["survived"] + row["no_tests"] - row["equivalent"]
    assert "`selection/oracle.py`" in table([row])
    assert shutil.which("git")
