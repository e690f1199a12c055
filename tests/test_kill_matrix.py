"""The kill matrix, CI form: one SIGKILL inside every named stage of a real command, then a rerun that must write
what an uninterrupted run writes (``tests/kill_matrix.py`` has the harness; ``python -m tests.kill_matrix``
is the long form, N kills per stage).

To stay short, the kills of one command are chained: the first run is killed inside the first stage, its
rerun inside the second stage, and so on; the last rerun goes to the end and is compared with the
reference.  Each kill is also a kill during a recovery, the harder case.  References are made once per
module and shared, and the chains run in two lanes side by side (one per core): all of them run when
the first stage test asks.
"""

import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.kill_matrix import CHAINS, STAGES, VOLATILE, Kill, Matrix, Reference, compare

SEED = 20240  # the kill points of the CI form; the long form takes --seed


@pytest.fixture(scope="module")
def matrix(tmp_path_factory) -> Matrix:
    return Matrix(tmp_path_factory.mktemp("kill-matrix"))


def _lanes() -> list[list[tuple]]:
    """The chains in two lanes run side by side (two cores): the reading command's long chain, and the rest."""
    longest = max(CHAINS, key=len)
    return [[longest], [c for c in CHAINS if c is not longest]]


@pytest.fixture(scope="module")
def chain_kills(matrix):
    """Every chain's kills, run once (two lanes in parallel) when the first stage test asks."""
    done: dict[str, Kill] = {}

    def run(chains):
        pending = list(chains)
        while pending:
            chain = pending.pop(0)
            kills = matrix.run_plan(chain, SEED)
            for kill in kills:
                # a kill placed by time lands after a short stage when this run is faster than the reference was,
                # or the run passes a stage of milliseconds between two polls: that stage is then killed on its
                # own (drawn again, earlier), not counted as a failure to resume; the chain goes on after it
                missed = (kill.error or "").startswith(f"RuntimeError: the run ended (exit 0) before {kill.stage}")
                if (kill.inside is False and not kill.error) or missed:
                    kill = matrix.kill_once(kill.stage, SEED, 1)
                    rest = chain[chain.index(kill.stage) + 1:]
                    if missed and rest:
                        pending.insert(0, rest)
                done[kill.stage] = kill

    with ThreadPoolExecutor(2) as pool:
        for future in [pool.submit(run, lane) for lane in _lanes()]:
            future.result()

    def kill_of(stage: str) -> Kill:
        if stage not in done:
            chain = next(c for c in CHAINS if stage in c)
            failed = [done[s].error for s in chain if s in done and done[s].error]
            pytest.fail(f"not reached: an earlier kill of the chain failed: {failed[0] if failed else '?'}")
        return done[stage]

    return kill_of


@pytest.mark.slow
@pytest.mark.parametrize("stage", [s for chain in CHAINS for s in chain])
def test_a_kill_inside_the_stage_resumes_to_the_same_outputs(chain_kills, stage):
    kill = chain_kills(stage)
    assert not kill.error, kill.error
    assert kill.inside, f"the kill landed outside {stage}: {kill.at}"
    assert kill.visible == [], "a finished output of the killed stage is visible after the kill"
    assert kill.rerun_rc == 0
    assert kill.differences == [], "\n".join(kill.differences)
    assert kill.left_after_rerun == [], "the rerun left temporary files behind"
    assert kill.recovered


def test_every_stage_is_in_one_chain_of_one_command():
    named = [s for chain in CHAINS for s in chain]
    assert sorted(named) == sorted(STAGES) and len(named) == len(set(named))
    for chain in CHAINS:
        assert len({STAGES[s].command for s in chain}) == 1


# ------------------------------------------------- the comparison can fail (fast, no subprocess)
def _reference(tmp_path: Path) -> Reference:
    out, cache = tmp_path / "ref" / "out", tmp_path / "ref" / "cache"
    (out / "qrels").mkdir(parents=True)
    (cache / "embeddings" / "k").mkdir(parents=True)
    (out / "metrics.json").write_text('{"MRR": 0.5}\n')
    (out / "qrels" / "dev.tsv").write_text("q\td\t1\n")
    (out / "costs.jsonl").write_text('{"id": "a", "passages_read": 2, "reader_s": 0.25}\n')
    (out / "manifest.json").write_text(json.dumps({"config": {"out": str(out)}, "timings_s": {"read": 1.0},
                                                   "data": {"corpus_store": f"{cache}/corpus_store/x"}}))
    (cache / "embeddings" / "k" / "rows-0-4.abc.npy").write_bytes(b"\x93NUMPY 1234")
    return Reference("read", out, cache, 1.0, {}, {})


def _copy(ref: Reference, tmp_path: Path) -> tuple[Path, Path]:
    out, cache = tmp_path / "run" / "out", tmp_path / "run" / "cache"
    shutil.copytree(ref.out, out)
    shutil.copytree(ref.cache, cache)
    manifest = json.loads((out / "manifest.json").read_text().replace(str(ref.out), str(out))
                          .replace(str(ref.cache), str(cache)))
    manifest["timings_s"] = {"read": 7.5}  # a resumed run's times differ: not a difference
    (out / "manifest.json").write_text(json.dumps(manifest))
    (out / "costs.jsonl").write_text('{"id": "a", "passages_read": 2, "reader_s": 0.01}\n')
    return out, cache


def test_the_comparison_ignores_times_and_places_only(tmp_path):
    ref = _reference(tmp_path)
    out, cache = _copy(ref, tmp_path)
    assert compare("run", ref, out, cache) == []
    assert {"timings_s", "reader_s", "peak_rss_mb"} <= VOLATILE

    (out / "qrels" / "dev.tsv").write_text("q\td\t2\n")  # one byte
    os.remove(out / "metrics.json")  # a missing final file
    (out / "costs.jsonl").write_text('{"id": "a", "passages_read": 3, "reader_s": 0.01}\n')  # a count, not a time
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["config"]["limit"] = 9
    (out / "manifest.json").write_text(json.dumps(manifest))
    (cache / "embeddings" / "k" / "rows-0-4.abc.npy").write_bytes(b"\x93NUMPY 1235")
    found = compare("run", ref, out, cache)
    assert "qrels/dev.tsv: bytes differ" in found
    assert "metrics.json: only in the reference" in found
    assert any(d.startswith("costs.jsonl[0]/passages_read") for d in found), found
    assert any(d.startswith("manifest.json/config/limit") for d in found), found
    assert "cache embeddings/k/rows-0-4.abc.npy: bytes differ" in found


def test_a_kill_outside_its_stage_or_a_visible_output_is_not_a_recovery():
    good = Kill("reading", "read", 1, 0, kill_s=1.0, at="after event 2 of 6", inside=True, rerun_rc=0)
    assert good.recovered and good.problems() == []
    assert not Kill("reading", "read", 1, 0, inside=False, rerun_rc=0).recovered
    assert not Kill("reading", "read", 1, 0, inside=True, rerun_rc=0, visible=["out/predictions.json"]).recovered
    assert not Kill("reading", "read", 1, 0, inside=True, rerun_rc=0, left_after_rerun=["out/.staging-x"]).recovered
    assert not Kill("reading", "read", 1, 0, inside=True, rerun_rc=1).recovered
