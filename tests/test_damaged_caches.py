"""Damaged, read-only and full caches, through the command users run (``python -m pipeline.run``).

A cached BM25 (Lucene) index or corpus store that is truncated, has a flipped
byte or lacks a file is found before it is used: the rerun prints one
``warning: <path>: ... damaged (<what>); removed and rebuilt`` line, rebuilds it,
exits 0 and writes the run.trec of an undamaged run, byte for byte.  Without the
check, Lucene opens an index checksumming only its small files: a damaged
postings or norms file was searched as it was (exit 0, other scores), and a
truncated one died with a Java traceback.  A read-only cache or a full disk is one
``error:`` line, exit 2, with nothing half-written.

Real Pyserini/Lucene on real data: ReQA SQuAD dev (10,250 sentences, the first
20 questions) for the index, BEIR SciFact (5,183 documents) for the store.
"""

import json
import os
import re
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import DATA, ROOT

REQA = ["--dataset", "reqa_squad", "--retriever", "bm25", "--limit", "20", "--threads", "2"]
SCIFACT = ["--dataset", "beir:scifact", "--split", "test", "--retriever", "bm25", "--limit", "20", "--threads", "2"]


# ------------------------------------------------------------------ helpers
def truncate(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def flip(path: Path, at: int | None = None) -> None:
    """Flip one bit of one byte in place (the middle one by default), as a bad sector or a stray write would."""
    at = path.stat().st_size // 2 if at is None else at
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x01]))


def largest(directory: Path, suffix: str) -> Path:
    return max(directory.glob(f"*{suffix}"), key=lambda p: p.stat().st_size)


def truncate_terms(index: Path) -> str:
    truncate(target := largest(index, ".tim"))
    return target.name


def flip_postings(index: Path) -> str:
    flip(target := largest(index, ".doc"))
    return target.name


def remove_norms(index: Path) -> str:
    (target := largest(index, ".nvd")).unlink()
    return target.name


# what is done to an index; each returns the name of the file the warning must name
DAMAGES = {"truncated": truncate_terms, "flipped byte": flip_postings, "missing file": remove_norms}


def environment(cache: Path, **extra) -> dict:
    env = dict(os.environ)
    env.update(QA_CACHE_DIR=str(cache), QA_DATA_DIR=str(DATA), HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               TQDM_DISABLE="1", QA_PROGRESS="0", **extra)
    return env


def run_main(argv: list[str], capfd) -> tuple[int, list[str]]:
    """``python -m pipeline.run`` in this process: exit status and stderr lines (Java's included: file descriptor 2)."""
    from pipeline.run import main

    capfd.readouterr()
    rc = main(argv)
    _, err = capfd.readouterr()
    return rc, err.splitlines()


def run_command(argv: list[str], env: dict, wrapper: list[str] = (), preexec_fn=None) -> subprocess.CompletedProcess:
    return subprocess.run([*wrapper, sys.executable, "-m", "pipeline.run", *argv], cwd=ROOT, env=env, text=True,
                          capture_output=True, timeout=600, preexec_fn=preexec_fn)


def one_index(cache: Path) -> Path:
    (done,) = (cache / "bm25").glob("*/_COMPLETE")
    return done.parent


def one_store(cache: Path) -> Path:
    (manifest,) = (cache / "corpus_store").glob("*/manifest.json")
    return manifest.parent


def snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


def can_mount_privately() -> bool:
    """Root with a private mount namespace (unshare -m): read-only binds and small file systems for one command."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def reqa_cache(tmp_path_factory):
    """A cache holding the BM25 index of ReQA SQuAD dev, and the run.trec of an undamaged run over it."""
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("QA_CACHE_DIR", str(cache))
        mp.setenv("QA_PROGRESS", "0")  # no progress lines on stderr
        from pipeline.run import main

        out = tmp_path_factory.mktemp("clean")
        assert main([*REQA, "--out", str(out)]) == 0
        yield cache, (out / "run.trec").read_bytes()


@pytest.fixture
def in_cache(reqa_cache, monkeypatch):
    cache, clean = reqa_cache
    monkeypatch.setenv("QA_CACHE_DIR", str(cache))
    monkeypatch.setenv("QA_PROGRESS", "0")
    return cache, clean


# ------------------------------------------------------- the check itself (fast)
@pytest.fixture(scope="module")
def small_index(tmp_path_factory, reqa_dev):
    """Our index of 2,000 ReQA sentences, built (and checked) once; tests damage copies of it."""
    from retrievers.lucene import build_index

    texts = list(reqa_dev.corpus.texts[:2000])
    path = tmp_path_factory.mktemp("small") / "idx"
    build_index(lambda: iter([texts]), len(texts), path, threads=2)
    return path


def _copy(index: Path, tmp_path: Path) -> Path:
    """A copy of the index with its check recorded (as a cache holds it after a run)."""
    from retrievers.lucene import verify_index

    copy = tmp_path / "idx"
    shutil.copytree(index, copy)
    check = verify_index(copy)
    assert check.problem is None and check.full  # a copy is new files: checked in full, then recorded
    again = verify_index(copy)
    assert again.problem is None and not again.full  # unchanged since: a stat per file
    return copy


@pytest.mark.parametrize("damage, expected", [
    (lambda d: truncate(largest(d, ".tim")), r"\.tim: CorruptIndexException: .*(truncated|footer)"),
    (lambda d: flip(largest(d, ".doc")), r"\.doc: CorruptIndexException: checksum failed"),
    (lambda d: flip(largest(d, ".nvd"), 100), r"\.nvd: CorruptIndexException: checksum failed"),
    (lambda d: flip(largest(d, ".fdt"), largest(d, ".fdt").stat().st_size - 2),  # in the footer's checksum itself
     r"\.fdt: CorruptIndexException: checksum failed"),
    (lambda d: largest(d, ".fnm").unlink(), r"\.fnm: missing"),
    (lambda d: flip(largest(d, ".si")), r"^_\d+\.si: CorruptIndexException: checksum failed"),
    (lambda d: next(d.glob("segments_*")).unlink(), r"IndexNotFoundException: no segments\* file found"),
    (lambda d: (d / "_COMPLETE").write_text('{"indexed": 5}\n'), r"holds 2000 documents, its build indexed 5"),
], ids=["truncated", "flipped-postings", "flipped-norms", "flipped-checksum", "missing", "flipped-segment-info",
        "no-commit", "wrong-count"])
def test_every_kind_of_damage_is_found(small_index, tmp_path, damage, expected):
    from retrievers.lucene import verify_index

    copy = _copy(small_index, tmp_path)
    damage(copy)
    check = verify_index(copy)
    assert check.full and check.problem is not None
    assert "\n" not in check.problem and len(check.problem) < 300
    assert re.search(expected, check.problem), check.problem


def test_a_flip_with_its_mtime_set_back_is_still_found(small_index, tmp_path):
    """The record of the last check holds ctime and inode too, which ``touch`` cannot set back."""
    from retrievers.lucene import verify_index

    copy = _copy(small_index, tmp_path)
    target = largest(copy, ".doc")
    st = target.stat()
    flip(target)
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert target.stat().st_mtime_ns == st.st_mtime_ns and target.stat().st_size == st.st_size
    check = verify_index(copy)
    assert check.full and check.problem and "checksum failed" in check.problem


def test_store_damage_is_found(tmp_path, monkeypatch):
    from data import corpus_store

    monkeypatch.setenv("QA_CACHE_DIR", str(tmp_path / "cache"))
    rows = [(str(i), f"title {i}", f"passage number {i} " * 20) for i in range(3000)]
    store = corpus_store.cached_store(["damage-test"], lambda: iter(rows))
    directory = store.directory
    assert corpus_store.check_store(directory) is None  # recorded by the build: no second read
    assert json.loads((directory / corpus_store.VERIFIED).read_text())["stamp"]
    arrow = directory / corpus_store.FILE_NAME
    original = arrow.read_bytes()
    flip(arrow)
    assert "checksum mismatch" in corpus_store.check_store(directory)
    arrow.write_bytes(original)
    assert corpus_store.check_store(directory) is None  # rewritten with its bytes: checked in full, sound
    truncate(arrow)
    assert "bytes, its build wrote" in corpus_store.check_store(directory)
    arrow.unlink()
    assert corpus_store.check_store(directory) == "passages.arrow is missing"


# ------------------------------------------------- damaged BM25 index, end to end
@pytest.mark.slow
@pytest.mark.parametrize("kind", list(DAMAGES))
def test_damaged_index_is_rebuilt_with_one_warning(in_cache, kind, tmp_path, capfd):
    from retrievers.lucene import verify_index

    cache, clean = in_cache
    index = one_index(cache)
    name = DAMAGES[kind](index)
    rc, err = run_main([*REQA, "--out", str(tmp_path / "out")], capfd)
    assert rc == 0, err
    assert len(err) == 1, err  # no Java traceback, nothing else
    assert err[0].startswith(f"warning: {index}: cached BM25 index is damaged (") and name in err[0], err
    assert err[0].endswith("removed and rebuilt")
    assert (tmp_path / "out" / "run.trec").read_bytes() == clean
    assert one_index(cache) == index and verify_index(index, force=True).problem is None
    assert not list(index.parent.glob(f".{index.name}.*")), "nothing of the damaged index is left"
    rc, err = run_main([*REQA, "--out", str(tmp_path / "again")], capfd)  # sound now: found sound, silently
    assert rc == 0 and err == [], err
    manifest = json.loads((tmp_path / "again" / "manifest.json").read_text())
    assert manifest["indexes"][0]["index_check"]["checksums"] == "unchanged since checked"


@pytest.mark.slow
def test_damage_the_record_cannot_see_fails_lucene_and_is_rebuilt(in_cache, tmp_path, capfd):
    """Damage below the file system leaves the files' stamps as they were: Lucene's own failure on opening the
    index then leads to a full check, the same warning and a rebuild, never a Java traceback."""
    from retrievers.lucene import VERIFIED, _stamp

    cache, clean = in_cache
    index = one_index(cache)
    truncate(target := largest(index, ".tim"))
    record = json.loads((index / VERIFIED).read_text())
    (index / VERIFIED).write_text(json.dumps({**record, "stamp": _stamp(index)}))  # as if nothing had changed
    for searcher in ("auto", "pyserini"):  # our batch helper, and Pyserini's batch_search
        rc, err = run_main([*REQA, "--retriever", f"bm25[searcher={searcher}]", "--out", str(tmp_path / searcher)], capfd)
        assert rc == 0, err
        assert len(err) == 1 and err[0].startswith(f"warning: {index}: cached BM25 index is damaged ({target.name}: ")
        assert err[0].endswith("; found opening it); removed and rebuilt"), err
        trec = (tmp_path / searcher / "run.trec").read_bytes()
        assert trec.replace(f"bm25[searcher={searcher}]".encode(), b"bm25") == clean
        truncate(target := largest(index, ".tim"))
        record = json.loads((index / VERIFIED).read_text())
        (index / VERIFIED).write_text(json.dumps({**record, "stamp": _stamp(index)}))
    rc, err = run_main([*REQA, "--out", str(tmp_path / "last")], capfd)  # leave the module's index sound
    assert rc == 0 and len(err) == 1 and "damaged" in err[0]


@pytest.mark.slow
def test_a_search_that_fails_on_a_damaged_index_starts_over_on_a_rebuilt_one(reqa_dev, tmp_path, capfd, monkeypatch):
    """A Java error while searching: the index is checked; damaged, it is rebuilt and every query searched again
    (nothing from the damaged index is kept); sound, the error is raised as it is (it is not the index's)."""
    from retrievers.bm25 import BM25Retriever

    monkeypatch.setenv("QA_PROGRESS", "0")
    corpus = reqa_dev.corpus
    queries = reqa_dev.queries.texts[:30]
    r = BM25Retriever(threads=2, index_dir=str(tmp_path / "bm25")).index(corpus)
    expected = r.search(queries, 100)
    if r._batch is None:
        pytest.skip("this process's JVM has no batch helper")
    from jnius import JavaException  # after index(): the JVM is started with our classpath

    real = type(r._batch).search
    calls = []

    def failing_once(self, *args):
        calls.append(self)
        if len(calls) == 1:
            raise JavaException("JVM exception occurred: boom", "java.util.concurrent.ExecutionException")
        return real(self, *args)

    monkeypatch.setattr(type(r._batch), "search", failing_once)
    index = r._path
    marker = index / "marker-of-the-damaged-copy"  # gone once the directory is replaced (inode numbers can be reused)
    marker.write_text("")
    flip(largest(index, ".doc"))  # in place: the open reader's memory map sees it
    capfd.readouterr()
    got = r.search(queries, 100)
    err = capfd.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"warning: {index}: cached BM25 index is damaged (") and \
        err[0].endswith("; found searching it); removed and rebuilt"), err
    assert index.is_dir() and not marker.exists(), "rebuilt"
    np.testing.assert_array_equal(got.ids, expected.ids)
    np.testing.assert_array_equal(got.scores, expected.scores)
    calls.clear()
    inode = index.stat().st_ino
    with pytest.raises(JavaException, match="boom"):  # a sound index: not rebuilt, the error goes on as it is
        r.search(queries, 100)
    assert index.stat().st_ino == inode and capfd.readouterr().err == ""
    r.close()


@pytest.mark.slow
def test_damaged_index_given_with_index_path_is_one_error_line(reqa_cache, tmp_path, capfd, monkeypatch):
    """An index we did not build is not ours to rebuild: one error line naming it and what is wrong, exit 2."""
    cache, _ = reqa_cache
    monkeypatch.setenv("QA_CACHE_DIR", str(cache))
    monkeypatch.setenv("QA_PROGRESS", "0")
    theirs = tmp_path / "theirs"
    shutil.copytree(one_index(cache), theirs)
    truncate(largest(theirs, ".tim"))
    rc, err = run_main([*REQA, "--bm25-index", str(theirs), "--out", str(tmp_path / "out")], capfd)
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith(f"error: {theirs}: the BM25 index is damaged (") and ".tim: " in err[0], err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_without_javac_a_damaged_index_is_found_and_rebuilt_too(tmp_path):
    """Pyserini's own path (no javac: JsonCollection build, batch_search), in a fresh process.  The sentences of the
    first 40 paragraphs of SQuAD v1.1 dev are the corpus: what is checked does not need the whole ReQA corpus."""
    env = environment(tmp_path / "cache", QA_JAVAC="none")
    small = ["--dataset", f"squad_file:{squad_slice_file(tmp_path, 40)}", *REQA[2:], "--depth", "100"]
    first = run_command([*small, "--out", str(tmp_path / "clean")], env)
    assert first.returncode == 0, first.stderr[-3000:]
    index = one_index(tmp_path / "cache")
    assert json.loads((index / "_COMPLETE").read_text())["collection"] == "JsonCollection"
    flip(largest(index, ".doc"))
    second = run_command([*small, "--out", str(tmp_path / "rerun")], env)
    assert second.returncode == 0, second.stderr[-3000:]
    lines = second.stderr.splitlines()
    fallback = [line for line in lines if "switched off (QA_JAVAC=none)" in line]  # the fallback's own warning
    damaged = [line for line in lines if line.startswith(f"warning: {index}: cached BM25 index is damaged (")]
    assert len(lines) == 2 and len(fallback) == len(damaged) == 1, lines
    assert ".doc: CorruptIndexException: checksum failed" in damaged[0] and damaged[0].endswith("removed and rebuilt"), lines
    assert (tmp_path / "rerun" / "run.trec").read_bytes() == (tmp_path / "clean" / "run.trec").read_bytes()


# ---------------------------------------------------- damaged corpus store, end to end
@pytest.fixture(scope="module")
def scifact_cache(tmp_path_factory):
    cache = tmp_path_factory.mktemp("scifact-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("QA_CACHE_DIR", str(cache))
        mp.setenv("QA_PROGRESS", "0")  # no progress lines on stderr
        from pipeline.run import main

        out = tmp_path_factory.mktemp("scifact-clean")
        assert main([*SCIFACT, "--out", str(out)]) == 0
        store = one_store(cache)
        yield cache, (out / "run.trec").read_bytes(), json.loads((store / "manifest.json").read_text())


STORE_DAMAGES = {
    "truncated": (lambda s: truncate(s / "passages.arrow"), "passages.arrow has "),
    "flipped byte": (lambda s: flip(s / "passages.arrow"), "passages.arrow: checksum mismatch"),
    "missing file": (lambda s: (s / "manifest.json").unlink(), "manifest.json is missing"),
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(STORE_DAMAGES))
def test_damaged_store_is_rebuilt_with_one_warning(scifact_cache, kind, tmp_path, capfd, monkeypatch):
    from data.corpus_store import check_store

    cache, clean, manifest = scifact_cache
    monkeypatch.setenv("QA_CACHE_DIR", str(cache))
    monkeypatch.setenv("QA_PROGRESS", "0")
    store = one_store(cache)
    damage, what = STORE_DAMAGES[kind]
    damage(store)
    rc, err = run_main([*SCIFACT, "--out", str(tmp_path / "out")], capfd)
    assert rc == 0, err
    assert len(err) == 1, err
    assert err[0].startswith(f"warning: {store}: cached corpus store is damaged ({what}"), err
    assert err[0].endswith("removed and rebuilt")
    assert (tmp_path / "out" / "run.trec").read_bytes() == clean
    rebuilt = json.loads((store / "manifest.json").read_text())
    assert (rebuilt["crc32"], rebuilt["file_bytes"], rebuilt["rows"]) == (manifest["crc32"], manifest["file_bytes"], 5183)
    assert check_store(store, force=True) is None
    assert not list(store.parent.glob(f".{store.name}.*")), "nothing of the damaged store is left"


# ------------------------------------------------------- read-only cache, full disk
def _read_only(cache: Path):
    """(command wrapper, undo) that makes ``cache`` read-only for one command: a read-only bind mount in a private
    mount namespace as root (permissions do not stop root), file modes otherwise."""
    if os.geteuid() == 0:
        if not can_mount_privately():
            pytest.skip("root without unshare -m: no way to make a directory read-only for root")
        return ["unshare", "-m", "sh", "-c", 'mount --bind -o ro "$0" "$0" && exec "$@"', str(cache)], lambda: None
    paths = [cache, *cache.rglob("*")]
    modes = {p: p.stat().st_mode for p in paths}
    for p in paths:
        p.chmod(0o555 if p.is_dir() else 0o444)
    return [], lambda: [p.chmod(m) for p, m in modes.items()]


@pytest.mark.slow
@pytest.mark.parametrize("filled", [True, False], ids=["cache-filled", "cache-empty"])
def test_read_only_cache_is_one_error_line(reqa_cache, tmp_path, filled):
    cache = reqa_cache[0] if filled else tmp_path / "empty-cache"
    cache.mkdir(exist_ok=True)
    before = snapshot(cache)
    wrapper, undo = _read_only(cache)
    try:
        proc = run_command([*REQA, "--out", str(tmp_path / "out")], environment(cache), wrapper)
    finally:
        undo()
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {cache}/"), lines
    assert "Read-only file system" in lines[0] or "Permission denied" in lines[0], lines
    assert ("BM25 index cache is not writable" in lines[0]) if filled else ("cannot create cache directory" in lines[0])
    assert snapshot(cache) == before, "nothing written to the cache"
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_full_disk_during_the_store_build_is_one_error_line(tmp_path):
    """The cache on a 4 MiB file system (root: a tmpfs in a private mount namespace), or files capped at 4 MiB
    (RLIMIT_FSIZE: writes past it fail with EFBIG), while the 7.9 MB SciFact store is built."""
    cache = tmp_path / "cache"
    cache.mkdir()
    listing = "import os,sys; print('LEFT', sorted(os.listdir(os.path.join(sys.argv[1], 'corpus_store'))))"
    if can_mount_privately():
        script = ('mount -t tmpfs -o size=4m tmpfs "$0" && "$@"; rc=$?; '
                  f'{sys.executable} -c "{listing}" "$0"; exit $rc')
        proc = run_command([*SCIFACT, "--out", str(tmp_path / "out")], environment(cache),
                           ["unshare", "-m", "sh", "-c", script, str(cache)])
        reason = "No space left on device"
        stdout = proc.stdout
    else:
        limit = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (4 << 20, 4 << 20))  # noqa: E731
        proc = run_command([*SCIFACT, "--out", str(tmp_path / "out")], environment(cache), preexec_fn=limit)
        reason = "File too large"
        stdout = f"LEFT {sorted(os.listdir(cache / 'corpus_store'))}"
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {DATA / 'scifact'}: {cache}/corpus_store/"), lines
    assert lines[0].endswith(f"corpus store build failed ({reason})"), lines
    left = [line for line in stdout.splitlines() if line.startswith("LEFT")]
    assert left and left[-1].endswith(".lock']") and left[-1].count("'") == 2, left  # the lock file, no store, no temp
    assert not (tmp_path / "out").exists()


# ------------------------- damaged dataset, embedding shard, FAISS index and read-cache shard, end to end
# A dense run with a cached HNSW index and the reader over the first 12 paragraphs of SQuAD v1.1 dev, 3 texts per
# embedding shard: one entry of each of the four caches is damaged, the rerun warns once per entry, rebuilds each
# and writes the outputs of the undamaged run, byte for byte.
DENSE_OUTPUTS = ("metrics.json", "run.trec", "predictions.json", "details.jsonl", "per_query.jsonl")


def squad_slice_file(directory: Path, paragraphs: int = 12) -> Path:
    import zipfile

    with zipfile.ZipFile(DATA / "squad" / "dev-v1.1.json.zip") as zf:
        dev = json.loads(zf.read(next(n for n in zf.namelist() if n.endswith(".json"))))
    article = dev["data"][0]
    path = directory / "dev-slice.json"
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": article["title"],
                                                            "paragraphs": article["paragraphs"][:paragraphs]}]}))
    return path


def dense_flags(data: Path, reads: Path) -> list[str]:
    from tests.conftest import READER

    return ["--dataset", f"squad_file:{data}", "--retriever", "dense", "--dense-index", "hnsw", "--reader", str(READER),
            "--selector", "top:2", "--depth", "20", "--limit", "10", "--metrics", "em,f1", "--threads", "1",
            "--read-cache", str(reads)]


@pytest.fixture(scope="module")
def dense_cache(tmp_path_factory):
    """A cache and a read cache filled by one clean dense run, and that run's outputs."""
    root = tmp_path_factory.mktemp("dense")
    data = squad_slice_file(root)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("QA_CACHE_DIR", str(root / "cache"))
        mp.setenv("QA_SHARD_ROWS", "3")
        mp.setenv("QA_PROGRESS", "0")
        from pipeline.run import main

        assert main([*dense_flags(data, root / "reads"), "--out", str(root / "clean")]) == 0
        yield root, data, {name: (root / "clean" / name).read_bytes() for name in DENSE_OUTPUTS}


def _dense_entries(root: Path) -> dict[str, Path]:
    """One entry of each cache: the dataset pickle, the second embedding shard, the FAISS index, a read shard."""
    (dataset,) = (root / "cache" / "datasets").glob("*.pkl")
    (index,) = (root / "cache" / "faiss-index").glob("*/index.*.faiss")
    return {"dataset": dataset, "embedding shard": sorted((root / "cache" / "embeddings").glob("*/rows-*.npy"))[1],
            "FAISS index": index, "read-cache shard": sorted((root / "reads").glob("reads-*.npz"))[0]}


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["truncated", "flipped byte"])
def test_damaged_dense_caches_are_rebuilt_with_one_warning_each(dense_cache, damage, tmp_path, capfd, monkeypatch):
    root, data, clean = dense_cache
    monkeypatch.setenv("QA_CACHE_DIR", str(root / "cache"))
    monkeypatch.setenv("QA_SHARD_ROWS", "3")
    monkeypatch.setenv("QA_PROGRESS", "0")
    entries = _dense_entries(root)
    damaged = {}
    for what, path in entries.items():
        if damage == "truncated":
            truncate(path)
        else:  # one bit of a byte of the payload (past any header), as a bad sector would
            flip(path, path.stat().st_size * 2 // 3)
        damaged[what] = path.read_bytes()
    rc, err = run_main([*dense_flags(data, root / "reads"), "--out", str(tmp_path / "out")], capfd)
    assert rc == 0, err
    assert len(err) == len(entries), err  # one line per damaged entry, nothing else
    for what, path in entries.items():
        (line,) = [line for line in err if line.startswith(f"warning: {path}: ")]
        assert " damaged (" in line and line.endswith("; removed and rebuilt"), (what, line)
        assert not path.exists() or path.read_bytes() != damaged[what], f"the damaged {what} is gone"
    for name in DENSE_OUTPUTS:
        assert (tmp_path / "out" / name).read_bytes() == clean[name], name
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["embedding_shards"]["computed"] == 1  # only the damaged shard is encoded again
    assert manifest["indexes"][0]["cache"] == "built", manifest["indexes"]
    assert 0 < manifest["reading"]["reads_done"] < 20 and manifest["reading"]["reads_reused"] > 0
    rebuilt = _dense_entries(root)  # and the rerun left a sound entry of each kind
    rc, err = run_main([*dense_flags(data, root / "reads"), "--out", str(tmp_path / "again")], capfd)
    assert rc == 0 and err == [], err
    assert _dense_entries(root) == rebuilt
    manifest = json.loads((tmp_path / "again" / "manifest.json").read_text())
    assert manifest["embedding_shards"]["computed"] == 0 and manifest["reading"]["reads_done"] == 0


def test_damaged_row_map_of_a_given_index_is_rebuilt(tmp_path, monkeypatch, capfd):
    """The cached Lucene-document -> corpus-row map of an index given with ``--bm25-index``: a flipped byte loaded
    silently (other rows for the same documents) before it carried a checksum."""
    from types import SimpleNamespace

    from retrievers.bm25 import _cached_row_map

    monkeypatch.setenv("QA_CACHE_DIR", str(tmp_path / "cache"))
    index = tmp_path / "theirs"
    index.mkdir()
    (index / "segments_1").write_bytes(b"commit")
    corpus = SimpleNamespace(content_key="corpus-key")
    rows = np.arange(1000, dtype=np.int64)[::-1].copy()
    builds = []

    def build():
        builds.append(1)
        return rows

    np.testing.assert_array_equal(_cached_row_map(index, corpus, build), rows)
    (path,) = (tmp_path / "cache" / "bm25" / "rowmaps").glob("*.npy")
    capfd.readouterr()
    np.testing.assert_array_equal(_cached_row_map(index, corpus, build), rows)
    assert len(builds) == 1 and capfd.readouterr().err == ""  # reused, silently
    for damage in (lambda p: flip(p, p.stat().st_size - 3), truncate):
        damage(path)
        np.testing.assert_array_equal(_cached_row_map(index, corpus, build), rows)
        err = capfd.readouterr().err.splitlines()
        assert len(err) == 1 and err[0].startswith(f"warning: {path}: cached BM25 row map is damaged ("), err
        assert err[0].endswith("; removed and rebuilt")
    assert len(builds) == 3
    np.testing.assert_array_equal(_cached_row_map(index, corpus, build), rows)
    assert len(builds) == 3
