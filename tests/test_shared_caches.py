"""Runs that share one cache directory, through the command users run (``python -m pipeline.run``).

Four processes started together on one ``open:`` dataset (24 SQuAD dev paragraphs as a DPR-style TSV corpus, the
questions of the first 12): a BM25 run, a dense run with a cached HNSW index (the offline all-MiniLM-L6-v2 encoder)
and the reader, the same dense run on Ray (``--engine ray``, a local Ray instance: encoding and reading on Ray
actors) sharing its read cache, and an RRF run of BM25 and dense with the reader.  Every shared artifact (the corpus
store, the BM25 index, the embedding shards, the FAISS index, the read-cache shards) is wanted by at least two of
them at once.  Each must finish silently (a half-built artifact read by another would be found damaged and warned
about, or change its outputs) with the outputs of the same command run alone (the Ray run: of the local command),
each artifact built by one process only, and no temporary files left.

Only identical commands share the read cache here: a read depends in its last bits on the other windows of its
batch (under bfloat16 autocast, enough to change an answer), so a run that reuses reads another command made can
differ from a solo run of it.

With ``QA_LONG_FORM=1`` (``python -m tests.fault_table``), also two identical runs started together, each with
the outputs of the command run alone.

Also: an output directory that cannot be written is one error line, exit 2, nothing written, and the same command
into a writable directory succeeds.
"""

import csv
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import DATA, READER, ROOT

OUTPUTS = ("metrics.json", "run.trec", "per_query.jsonl", "qrels.tsv")
READ_OUTPUTS = ("predictions.json", "details.jsonl")
RETRIEVERS = {"bm25": "bm25", "dense": "dense", "rrf": "rrf:bm25+dense"}
PROCESSES = {"bm25": "bm25", "dense": "dense", "dense-ray": "dense", "rrf": "rrf"}  # process -> its command
SHARD_ROWS = "8"  # 24 passages: three embedding shards to interleave


def environment(cache: Path) -> dict:
    env = dict(os.environ)
    env.update(QA_CACHE_DIR=str(cache), QA_DATA_DIR=str(DATA), QA_SHARD_ROWS=SHARD_ROWS, HF_HUB_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", TQDM_DISABLE="1", QA_PROGRESS="0")
    return env


@pytest.fixture(scope="module")
def open_data(tmp_path_factory) -> str:
    """``open:CORPUS+QUESTIONS``: the first 24 paragraphs of SQuAD v1.1 dev's first article as a DPR TSV corpus,
    the questions of its first 12 paragraphs as a SQuAD file."""
    root = tmp_path_factory.mktemp("open-data")
    with zipfile.ZipFile(DATA / "squad" / "dev-v1.1.json.zip") as zf:
        dev = json.loads(zf.read(next(n for n in zf.namelist() if n.endswith(".json"))))
    article = dev["data"][0]
    with open(root / "psgs.tsv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, delimiter="\t", lineterminator="\n")
        writer.writerow(["id", "text", "title"])
        writer.writerows((str(i), p["context"], article["title"]) for i, p in enumerate(article["paragraphs"][:24]))
    (root / "questions.json").write_text(json.dumps(
        {"version": "1.1", "data": [{"title": article["title"], "paragraphs": article["paragraphs"][:12]}]}))
    return f"open:{root / 'psgs.tsv'}+squad@{root / 'questions.json'}"


def flags(dataset: str, retriever: str, out: Path, reads: Path | None = None) -> list[str]:
    """The BM25 run retrieves only; the others read the top 2 of each question too (into ``reads``, or
    ``<out>/reads``)."""
    argv = ["--dataset", dataset, "--retriever", RETRIEVERS[retriever], "--dense-index", "hnsw", "--depth", "20",
            "--limit", "8", "--threads", "1", "--out", str(out)]
    if retriever != "bm25":
        argv += ["--reader", str(READER), "--selector", "top:2", "--metrics", "em,f1"]
        argv += ["--read-cache", str(reads)] if reads else []
    return argv


def outputs(out: Path) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in (*OUTPUTS, *READ_OUTPUTS) if (out / name).exists()}


def manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def leftovers(*roots: Path) -> list[str]:
    """Temporary files and directories, staging directories and damaged copies left under ``roots`` (lock files,
    which locking keeps by design, are not garbage)."""
    found = []
    for root in roots:
        for p in root.rglob("*"):
            name = p.name
            if name.endswith(".tmp") or name.startswith(".staging-") or ".damaged." in name or name.startswith("tmp"):
                found.append(str(p.relative_to(root)))
    return sorted(found)


@pytest.fixture(scope="module")
def solo(open_data, tmp_path_factory):
    """Each command run alone, one after another over one cache (in this process)."""
    root = tmp_path_factory.mktemp("solo")
    results = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("QA_SHARD_ROWS", SHARD_ROWS)
        mp.setenv("QA_PROGRESS", "0")
        mp.setenv("QA_CACHE_DIR", str(root / "cache"))
        from pipeline.run import main

        for name in RETRIEVERS:
            assert main(flags(open_data, name, root / name)) == 0
            results[name] = outputs(root / name)
    assert set(results["bm25"]) == set(OUTPUTS) and set(results["rrf"]) == {*OUTPUTS, *READ_OUTPUTS}
    results["java"] = root / "cache" / "java"  # our compiled BM25 helper and the JVM's class-data archive
    return results


@pytest.fixture(scope="module")
def together(open_data, solo, tmp_path_factory):
    """The four processes started at the same moment over one cache holding nothing but the compiled Java helper
    (compiling it is not what is tested here, and costs CPU time); the two dense ones share a read cache."""
    import shutil

    pytest.importorskip("ray")
    root = tmp_path_factory.mktemp("together")
    cache, reads = root / "cache", root / "reads"
    shutil.copytree(solo["java"], cache / "java")
    procs = {}
    for name, command in PROCESSES.items():
        argv = flags(open_data, command, root / name, reads if command == "dense" else None)
        if name.endswith("-ray"):
            argv += ["--engine", "ray", "--ray-actors", "1"]
        procs[name] = subprocess.Popen([sys.executable, "-m", "pipeline.run", *argv], cwd=ROOT, env=environment(cache),
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    errors = {}
    for name, proc in procs.items():
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, (name, err[-3000:])
        errors[name] = err
    return root, cache, reads, errors


@pytest.mark.slow
def test_runs_started_together_share_every_cache_and_equal_solo_runs(solo, together):
    root, cache, reads, errors = together
    for name, command in PROCESSES.items():
        # no warning: nothing shared was found damaged or half-built (Ray logs its own lines; ours start with "xxx: ")
        ours = [line for line in errors[name].splitlines() if line.startswith(("warning: ", "error: ", "note: "))]
        assert ours == [] and (errors[name] == "" or name.endswith("-ray")), (name, errors[name][-3000:])
        assert outputs(root / name) == solo[command], name

    runs = {name: manifest(root / name) for name in PROCESSES}
    # the BM25 index (wanted by bm25 and rrf) was built by one process; the other found it built and sound
    bm25 = [next(i for i in runs[name]["indexes"] if i["retriever"] == "bm25") for name in ("bm25", "rrf")]
    assert sorted(i["index_check"]["checksums"] for i in bm25) == ["all files, after the build", "unchanged since checked"], bm25
    assert len({i["index"] for i in bm25}) == 1
    # the embedding shards (wanted by three): each of the three encoded once, by whichever process got to it
    dense = ("dense", "dense-ray", "rrf")
    shards = [runs[name]["embedding_shards"] for name in dense]
    assert [s["shards"] for s in shards] == [3, 3, 3] and sum(s["computed"] for s in shards) == 3, shards
    # the FAISS index: built once, loaded by the other two
    faiss = [next(i for i in runs[name]["indexes"] if i.get("factory")) for name in dense]
    assert sorted(i["cache"] for i in faiss) == ["built", "loaded", "loaded"], faiss
    assert len({i["path"] for i in faiss}) == 1
    # one corpus store, one BM25 index, one set of shards, one FAISS index in the cache
    (store,) = [p for p in (cache / "corpus_store").iterdir() if p.is_dir()]
    assert {runs[name]["data"]["corpus_store"] for name in PROCESSES} == {str(store)}
    assert len(list((cache / "bm25").glob("*/_COMPLETE"))) == 1
    assert len(list((cache / "embeddings").glob("*/rows-*.npy"))) == 3
    assert len(list((cache / "faiss-index").glob("*/index.*.faiss"))) == 1
    # the shared read cache: whole shards (published atomically) holding every pair either dense run read
    from readers.extractive import ReadCache

    assert runs["dense-ray"]["engine"]["engine"] == "ray"
    reading = [runs[name]["reading"] for name in ("dense", "dense-ray")]
    assert all(r["read_cache"] == str(reads) and r["reads_done"] + r["reads_reused"] == 16 for r in reading), reading
    assert len(ReadCache(reads)) == 16
    assert leftovers(cache, reads, *(root / name for name in PROCESSES)) == []


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("QA_LONG_FORM"), reason="long form only: python -m tests.fault_table")
def test_two_identical_runs_started_together_equal_a_solo_run(open_data, solo, tmp_path):
    """The same command (RRF of BM25 and dense, with the reader) twice at the same moment over one cache holding
    only the compiled Java helper: both want every artifact at once.  Each finishes silently with the outputs of
    the command run alone; each artifact is built by one of them; no temporary files are left."""
    import shutil

    cache = tmp_path / "cache"
    shutil.copytree(solo["java"], cache / "java")
    runs = ("first", "second")
    procs = {name: subprocess.Popen([sys.executable, "-m", "pipeline.run", *flags(open_data, "rrf", tmp_path / name)],
                                    cwd=ROOT, env=environment(cache), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True) for name in runs}
    for name, proc in procs.items():
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0 and err == "", (name, err[-3000:])
        assert outputs(tmp_path / name) == solo["rrf"], name
    done = [manifest(tmp_path / name) for name in runs]
    bm25 = [next(i for i in m["indexes"] if i["retriever"] == "bm25") for m in done]
    assert len({i["index"] for i in bm25}) == 1
    shards = [m["embedding_shards"] for m in done]
    assert [s["shards"] for s in shards] == [3, 3] and sum(s["computed"] for s in shards) == 3, shards
    faiss = [next(i for i in m["indexes"] if i.get("factory")) for m in done]
    assert sorted(i["cache"] for i in faiss) == ["built", "loaded"], faiss
    assert len(list((cache / "bm25").glob("*/_COMPLETE"))) == 1
    assert len(list((cache / "embeddings").glob("*/rows-*.npy"))) == 3
    assert len(list((cache / "faiss-index").glob("*/index.*.faiss"))) == 1
    assert leftovers(cache, *(tmp_path / name for name in runs)) == []


# ---------------------------------------------------------------- unwritable output directories
def retrieval_flags(dataset: str, out: Path) -> list[str]:
    """A retrieval-only dense run (over the cache the runs above filled: quick)."""
    return ["--dataset", dataset, "--retriever", "dense", "--depth", "20", "--limit", "8", "--threads", "1",
            "--out", str(out)]


def rerun_into(dataset: str, cache: Path, out: Path, capfd, monkeypatch) -> None:
    """The same command into a writable directory: it succeeds (in this process)."""
    from pipeline.run import main

    monkeypatch.setenv("QA_CACHE_DIR", str(cache))
    monkeypatch.setenv("QA_PROGRESS", "0")
    capfd.readouterr()
    assert main(retrieval_flags(dataset, out)) == 0
    assert capfd.readouterr().err == "" and (out / "metrics.json").is_file() and (out / "run.trec").is_file()


# one Python process runs the command twice (``pipeline.run``'s main), so both cases pay for one start
TWO_RUNS = """
import json, os, sys
from pipeline.run import main
rcs = []
for argv in json.loads(sys.argv[1]):
    print("=== run", file=sys.stderr, flush=True)
    rcs.append(main(argv))
print("RESULT " + json.dumps({"rcs": rcs, "left": sorted(os.listdir(sys.argv[2]))}))
"""


@pytest.fixture(scope="module")
def unwritable(open_data, together, tmp_path_factory):
    """In a private mount namespace (root: permissions do not stop root), the retrieval-only command into a
    read-only bind mount holding an earlier file, then into an empty 8 KiB tmpfs (the outputs do not fit):
    ``(read_only_dir, its snapshot before, full_dir, [(exit status, stderr lines)] per run, what full_dir held
    after)``."""
    from tests.test_damaged_caches import can_mount_privately, snapshot

    if not can_mount_privately():
        pytest.skip("needs root and unshare -m for a read-only mount and a small file system")
    root = tmp_path_factory.mktemp("unwritable")
    read_only, full = root / "read-only", root / "full"
    read_only.mkdir()
    full.mkdir()
    (read_only / "earlier.txt").write_text("a file of an earlier run\n")
    before = snapshot(read_only)
    argv = json.dumps([retrieval_flags(open_data, read_only), retrieval_flags(open_data, full)])
    script = 'mount --bind -o ro "$0" "$0" && mount -t tmpfs -o size=8k tmpfs "$1" && exec "$2" -c "$3" "$4" "$1"'
    proc = subprocess.run(["unshare", "-m", "sh", "-c", script, str(read_only), str(full), sys.executable, TWO_RUNS,
                           argv], cwd=ROOT, env=environment(together[1]), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[len("RESULT "):])
    errs = [chunk.splitlines() for chunk in proc.stderr.split("=== run\n")[1:]]
    return read_only, before, full, list(zip(result["rcs"], errs, strict=True)), result["left"]


@pytest.mark.slow
def test_read_only_output_directory_is_one_error_line(open_data, together, unwritable, capfd, monkeypatch):
    from tests.test_damaged_caches import snapshot

    read_only, before, _, runs, _ = unwritable
    rc, err = runs[0]
    assert rc == 2 and err == [f"error: {read_only}: output directory is not writable (Read-only file system)"], err
    assert snapshot(read_only) == before  # nothing written
    rerun_into(open_data, together[1], read_only, capfd, monkeypatch)  # writable here


@pytest.mark.slow
def test_full_disk_while_writing_outputs_is_one_error_line(open_data, together, unwritable, capfd, monkeypatch):
    """The final files do not fit: the error names the file being written, and the directory is left empty."""
    _, _, full, runs, left = unwritable
    rc, err = runs[1]
    assert rc == 2 and len(err) == 1, err
    assert re.fullmatch(rf"error: {re.escape(str(full))}/[\w.]+: write failed \(No space left on device\)", err[0]), err
    assert left == []  # nothing half-written, no staging directory
    rerun_into(open_data, together[1], full, capfd, monkeypatch)  # the same directory, not full here


@pytest.mark.slow
def test_output_path_under_a_file_is_one_error_line(open_data, together, tmp_path, capfd, monkeypatch):
    from pipeline.run import main

    monkeypatch.setenv("QA_CACHE_DIR", str(together[1]))
    monkeypatch.setenv("QA_PROGRESS", "0")
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory\n")
    capfd.readouterr()
    assert main(retrieval_flags(open_data, a_file / "out")) == 2
    assert capfd.readouterr().err.splitlines() == [f"error: {a_file}/out: cannot create output directory (Not a directory)"]
    assert a_file.read_text() == "not a directory\n" and sorted(os.listdir(tmp_path)) == ["a-file"]
    rerun_into(open_data, together[1], tmp_path / "out", capfd, monkeypatch)
