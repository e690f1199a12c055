"""``pipeline.run --engine ray`` on a local Ray instance equals the local engine.

One run with ``rrf:bm25+dense`` and the reader covers every Ray stage: BM25
search over query blocks (Ray tasks, each with its own JVM), dense corpus
encoding and reading (Ray Data ``map_batches`` over actor pools).  The local
reference runs at the same time in a subprocess with its own cache.

Ray is started once for the module, in this process, which already runs a JVM:
the JVM's SIGSEGV handler is checked to survive that start.
"""

import ctypes
import json
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from tests.conftest import DATA, READER, ROOT

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")

SHARD_ROWS = "3"


@pytest.fixture(scope="module")
def squad_slice(tmp_path_factory):
    with zipfile.ZipFile(DATA / "squad" / "dev-v1.1.json.zip") as zf:
        dev = json.loads(zf.read(next(n for n in zf.namelist() if n.endswith(".json"))))
    article = dev["data"][0]
    path = tmp_path_factory.mktemp("slice") / "dev-slice.json"
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": article["title"], "paragraphs": article["paragraphs"][:8]}]}))
    return path


def flags(data, out):
    return ["--dataset", f"squad_file:{data}", "--retriever", "rrf:bm25+dense", "--reader", str(READER), "--limit", "10",
            "--selector", "top:2", "--depth", "20", "--metrics", "em,f1", "--threads", "1", "--out", str(out)]


class _Sigaction(ctypes.Structure):  # glibc's struct sigaction on Linux
    _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16), ("flags", ctypes.c_int),
                ("restorer", ctypes.c_void_p)]


class _DlInfo(ctypes.Structure):
    _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p), ("sname", ctypes.c_char_p),
                ("saddr", ctypes.c_void_p)]


def sigsegv_owner() -> str | None:
    """The shared object whose function handles SIGSEGV in this process now (None off Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None)
    action, info = _Sigaction(), _DlInfo()
    libc.sigaction(11, None, ctypes.byref(action))
    libc.dladdr(ctypes.c_void_p(action.handler), ctypes.byref(info))
    return os.path.basename((info.fname or b"?").decode())


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory):
    """A local Ray instance (2 CPUs) started in this process as ``pipeline.run --engine ray`` starts it
    (``RayEngine.start``), with the JVM already running and Ray's failure-signal handler switched on, as in a
    fresh process that imported ``ray`` before the JVM (this module imports it first).  Its workers inherit a
    fresh cache dir and the test knobs.  Yields the cache and the owner of the SIGSEGV handler before and after
    the start."""
    from ray._private import ray_constants

    from pipeline.ray_engine import RayEngine
    from retrievers.java import import_pyserini_lucene

    cache = tmp_path_factory.mktemp("ray-cache")
    names = ("QA_CACHE_DIR", "QA_SHARD_ROWS", "RAY_DISABLE_FAILURE_SIGNAL_HANDLER")
    saved = {k: os.environ.get(k) for k in names}
    saved_switch = ray_constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER
    os.environ.update(QA_CACHE_DIR=str(cache), QA_SHARD_ROWS=SHARD_ROWS)
    os.environ.pop("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", None)  # Ray's default: its handler on (an earlier test
    ray_constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER = False  # in this process may have switched it off)
    import_pyserini_lucene()  # this process runs a JVM (earlier BM25 tests already started it)
    before = sigsegv_owner()
    assert not ray.is_initialized()
    RayEngine(actors=2).start()
    after = sigsegv_owner()
    try:
        yield cache, (before, after)
    finally:
        ray.shutdown()
        ray_constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER = saved_switch
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads glibc's sigaction")
@pytest.mark.slow  # it needs the module's Ray start
def test_starting_ray_leaves_the_jvms_sigsegv_handler_in_place(local_ray):
    """A Ray driver that already runs a JVM keeps the JVM's SIGSEGV handler.

    Without it the JVM's deliberate SIGSEGVs hit Ray's failure handler and the
    process dies at random ("Fatal Python error: Segmentation fault").
    """
    _, (before, after) = local_ray
    assert before == after == "libjvm.so"


def read_trec(path):
    rows = [line.split() for line in path.read_text().splitlines()]
    return [(r[0], r[2], int(r[3])) for r in rows], np.array([float(r[4]) for r in rows])


def test_retrievers_are_swapped_for_ray_versions_inside_fusion():
    from pipeline.ray_engine import RayBM25Retriever, RayDenseRetriever, RayEngine
    from retrievers.registry import make_retriever

    fused = RayEngine().adapt_retriever(make_retriever("rrf:bm25+dense", bm25_options={"k1": 1.2}))
    bm25, dense = fused.members
    assert isinstance(bm25, RayBM25Retriever) and bm25.k1 == 1.2
    assert isinstance(dense, RayDenseRetriever) and dense.name == "dense"


@pytest.mark.slow
def test_ray_engine_equals_local_engine(squad_slice, local_ray, tmp_path):
    import torch

    from pipeline.run import main

    env = dict(os.environ, QA_CACHE_DIR=str(tmp_path / "local-cache"), QA_SHARD_ROWS=SHARD_ROWS, HF_HUB_OFFLINE="1",
               TQDM_DISABLE="1", TOKENIZERS_PARALLELISM="false")
    local = subprocess.Popen([sys.executable, "-m", "pipeline.run", *flags(squad_slice, tmp_path / "local")], cwd=ROOT,
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    threads = torch.get_num_threads()
    try:
        assert main([*flags(squad_slice, tmp_path / "ray"), "--engine", "ray", "--ray-actors", "2"]) == 0
    finally:
        torch.set_num_threads(threads)
    _, err = local.communicate(timeout=600)
    assert local.returncode == 0, err[-2000:]
    a, b = tmp_path / "local", tmp_path / "ray"

    manifest = json.loads((b / "manifest.json").read_text())
    assert manifest["engine"]["engine"] == "ray" and manifest["engine"]["cluster_resources"]["CPU"] == 2
    assert manifest["embedding_shards"]["computed"] == manifest["embedding_shards"]["shards"] > 1  # encoded on Ray
    reads = manifest["reading"]["reads_done"]
    assert 0 < reads == json.loads((a / "manifest.json").read_text())["reading"]["reads_done"]  # read on Ray
    assert len(list((b / "reads").glob("reads-*.npz"))) == -(-reads // int(SHARD_ROWS))  # a cache shard per chunk

    # same ids and ranks; scores equal up to float rounding
    (ids_a, scores_a), (ids_b, scores_b) = read_trec(a / "run.trec"), read_trec(b / "run.trec")
    assert ids_a == ids_b
    np.testing.assert_allclose(scores_a, scores_b, atol=1e-5)
    # same answers and spans
    assert json.loads((a / "predictions.json").read_text()) == json.loads((b / "predictions.json").read_text())
    details_a = [json.loads(line) for line in (a / "details.jsonl").read_text().splitlines()]
    details_b = [json.loads(line) for line in (b / "details.jsonl").read_text().splitlines()]
    for x, y in zip(details_a, details_b, strict=True):
        assert (x["id"], x["passages"], x["answer"], x["answer_rank"]) == (y["id"], y["passages"], y["answer"], y["answer_rank"])
        assert x["score"] == pytest.approx(y["score"], abs=1e-4)
    metrics_a = json.loads((a / "metrics.json").read_text())
    metrics_b = json.loads((b / "metrics.json").read_text())
    assert metrics_a["reading"] == metrics_b["reading"]
    for level in ("sentence", "paragraph"):
        for name, value in metrics_a["retrieval"]["reqa"][level].items():
            assert metrics_b["retrieval"]["reqa"][level][name] == pytest.approx(value, abs=1e-6)

    # a rerun of the same Ray command finds every shard and chunk done and writes the same bytes
    before = {name: (b / name).read_bytes() for name in ("metrics.json", "predictions.json", "details.jsonl", "run.trec")}
    try:
        assert main([*flags(squad_slice, b), "--engine", "ray", "--ray-actors", "2"]) == 0
    finally:
        torch.set_num_threads(threads)
    manifest = json.loads((b / "manifest.json").read_text())
    assert manifest["embedding_shards"]["computed"] == 0 and manifest["reading"]["reads_done"] == 0
    assert {name: (b / name).read_bytes() for name in before} == before


@pytest.mark.slow
def test_ray_reads_in_int8_as_the_local_engine_and_says_so_in_its_manifest(squad_slice, local_ray, tmp_path):
    """``--reader-dtype int8 --engine ray``: the actors read with the cached int8 model the local run built (same
    answers), the manifest records the actors' precision and recipe, and int8 reads are never served to float32."""
    import torch

    from pipeline.run import main

    cache, _ = local_ray
    int8 = ["--retriever", "bm25", "--reader-dtype", "int8"]
    env = dict(os.environ, QA_CACHE_DIR=str(cache), QA_SHARD_ROWS=SHARD_ROWS, TQDM_DISABLE="1")
    local = subprocess.run([sys.executable, "-m", "pipeline.run", *flags(squad_slice, tmp_path / "local"), *int8], cwd=ROOT,
                           env=env, capture_output=True, text=True, timeout=600)
    assert local.returncode == 0, local.stderr[-2000:]
    a, b = tmp_path / "local", tmp_path / "ray"
    threads = torch.get_num_threads()
    try:
        assert main([*flags(squad_slice, b), *int8, "--engine", "ray", "--ray-actors", "2"]) == 0
        on_ray = json.loads((b / "manifest.json").read_text())["reading"]
        assert json.loads((a / "predictions.json").read_text()) == json.loads((b / "predictions.json").read_text())
        # the same command in float32 on the same output (and read cache): every pair is read again
        assert main([*flags(squad_slice, b), *int8[:2], "--reader-dtype", "float32", "--engine", "ray", "--ray-actors", "2"]) == 0
    finally:
        torch.set_num_threads(threads)
    here = json.loads((a / "manifest.json").read_text())["reading"]
    assert on_ray["reads_done"] == here["reads_done"] > 0
    assert on_ray["reader_dtype"] == here["reader_dtype"] == "int8"
    assert on_ray["reader_int8"] == here["reader_int8"] and "identical_percent" in json.dumps(on_ray["reader_int8"])
    in_float = json.loads((b / "manifest.json").read_text())["reading"]
    assert in_float["reader_dtype"] == "float32" and "reader_int8" not in in_float
    assert in_float["reads_done"] == here["reads_done"] and in_float["reads_reused"] == 0
