"""Crash-safe, resumable runs: a real ``python -m pipeline.run`` killed with SIGKILL
during encoding and during reading, then rerun, keeps the work it had finished
(the same shard files, no shard encoded again, the read chunks reused) and writes
the same bytes as an uninterrupted run.

Proved elsewhere, not repeated here: damaged embedding and read-cache shards are
rebuilt, never served (tests/test_damaged_caches.py, dense end to end); runs that
share a cache and a read cache, started together, equal a solo run
(tests/test_shared_caches.py); a kill inside every named stage resumes to the
reference's outputs (tests/test_kill_matrix.py).

``QA_SHARD_ROWS`` (texts per embedding shard, pairs per read chunk) is set
small so that a run on a small slice has many shards to be killed between.
"""

import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from tests.conftest import DATA, READER, ROOT

OUTPUTS = ("metrics.json", "predictions.json", "details.jsonl", "run.trec", "selector.json")
SHARD_ROWS = 3


@pytest.fixture(scope="module")
def squad_slice(tmp_path_factory) -> Path:
    """The first 12 paragraphs of SQuAD v1.1 dev (real data, small corpus)."""
    with zipfile.ZipFile(DATA / "squad" / "dev-v1.1.json.zip") as zf:
        name = next(n for n in zf.namelist() if n.endswith(".json"))
        dev = json.loads(zf.read(name))
    article = dev["data"][0]
    small = {"version": "1.1", "data": [{"title": article["title"], "paragraphs": article["paragraphs"][:12]}]}
    path = tmp_path_factory.mktemp("slice") / "dev-slice.json"
    path.write_text(json.dumps(small), encoding="utf-8")
    return path


def command(data: Path, out: Path, *extra) -> list[str]:
    return [
        sys.executable, "-m", "pipeline.run", "--dataset", f"squad_file:{data}", "--retriever", "dense",
        "--reader", str(READER), "--limit", "10", "--selector", "top:2", "--depth", "20", "--metrics", "em,f1", "--threads", "1",
        "--out", str(out), *extra,
    ]


def environment(cache: Path) -> dict:
    env = dict(os.environ)
    env.update(QA_CACHE_DIR=str(cache), QA_SHARD_ROWS=str(SHARD_ROWS), QA_DATA_DIR=str(DATA), HF_HUB_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", TQDM_DISABLE="1")
    return env


def start(data, out, cache, *extra) -> subprocess.Popen:
    return subprocess.Popen(command(data, out, *extra), cwd=ROOT, env=environment(cache), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen, timeout: float = 600) -> str:
    _, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return err


def kill_when(proc: subprocess.Popen, ready, timeout: float = 300) -> None:
    """SIGKILL ``proc`` as soon as ``ready()`` holds (polled); fails if it ended first."""
    t0 = time.monotonic()
    while not ready():
        if proc.poll() is not None:
            raise AssertionError(f"run ended before the kill point: {proc.stderr.read()[-2000:]}")
        if time.monotonic() - t0 > timeout:
            proc.kill()
            raise AssertionError("kill point not reached in time")
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL


def embedding_shards(cache: Path) -> list[Path]:
    return sorted(cache.glob("embeddings/*/rows-*.npy"))


def read_shards(out: Path) -> list[Path]:
    return sorted((out / "reads").glob("reads-*.npz"))


def manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def assert_same_outputs(a: Path, b: Path) -> None:
    for name in OUTPUTS:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


@pytest.mark.slow
def test_killed_runs_resume_to_byte_identical_outputs(squad_slice, tmp_path):
    # reference: an uninterrupted run with its own cache and read cache, at the same time as the killed runs
    ref = start(squad_slice, tmp_path / "ref", tmp_path / "cache-a", "--read-cache", str(tmp_path / "reads-a"))

    cache, out = tmp_path / "cache-b", tmp_path / "run-b"
    # 1. killed while encoding the corpus (some shards done, not all)
    proc = start(squad_slice, out, cache)
    kill_when(proc, lambda: len(embedding_shards(cache)) >= 2)
    first_shards = {p: p.stat().st_ino for p in embedding_shards(cache)}
    assert not (out / "metrics.json").exists() and not (out / "predictions.json").exists()

    # 2. rerun, killed while reading (some chunks done)
    proc = start(squad_slice, out, cache)
    kill_when(proc, lambda: len(read_shards(out)) >= 2)
    n_total_shards = len(embedding_shards(cache))
    assert len(first_shards) < n_total_shards  # the first kill was mid-encoding
    for path, inode in first_shards.items():  # finished shards were kept, not re-encoded
        assert path.stat().st_ino == inode
    assert not (out / "metrics.json").exists() and not (out / "predictions.json").exists()

    # 3. rerun to the end: only the missing reads are done
    finish(proc := start(squad_slice, out, cache))
    m = manifest(out)
    assert m["embedding_shards"] == {"shards": n_total_shards, "computed": 0, "reused": n_total_shards}
    reads = m["reading"]
    assert reads["reads_reused"] >= 2 * SHARD_ROWS and reads["reads_done"] > 0

    finish(ref)
    assert_same_outputs(tmp_path / "ref", out)
    assert not list(out.glob(".staging-*"))
    assert "timings_s" in m and "timings_s" not in json.loads((out / "metrics.json").read_text())
