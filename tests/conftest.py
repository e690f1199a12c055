"""Test settings: local data from ../shared/data, the suite's own cache, offline hub, quiet tokenizers."""

import importlib
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("QA_DATA_DIR", str((ROOT / ".." / "shared" / "data").resolve()))
# QA_DATA_DIR=../shared/data (relative, as the docs write it) must still find the data from the temporary
# directories some tests run commands in
os.environ["QA_DATA_DIR"] = str(Path(os.environ["QA_DATA_DIR"]).resolve())
# the suite's own cache (indexes, stores, embeddings, int8 readers), kept in the checkout between runs and never
# mixed into the user's ~/.cache/qa-retrieval-eval; QA_CACHE_DIR set by the caller wins
os.environ.setdefault("QA_CACHE_DIR", str(ROOT / ".cache" / "tests"))
# the suite reads, encodes, re-ranks and embeds BERT-F1's tokens with torch unless a test asks for a backend: auto measures OpenVINO against torch
# once per checkpoint, precision and cache directory (~20 s with the shared reader), and tests use many cache directories
os.environ.setdefault("QA_READER_BACKEND", "torch")
os.environ.setdefault("QA_ENCODER_BACKEND", "torch")
os.environ.setdefault("QA_RERANK_BACKEND", "torch")
os.environ.setdefault("QA_BERTSCORE_BACKEND", "torch")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")



def _one_core_per_worker() -> None:
    """Under ``pytest -n N`` on a machine of N cores, each worker (and every command it starts: affinity is
    inherited) runs on a core of its own.  Otherwise every worker's torch, FAISS and Java take all the cores and
    two workers' thread pools thrash each other (a sweep measured at 74 s alone took 282 s beside another worker
    on 2 cores).  The commands size their thread pools by their affinity (``hardware.available_cores``)."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (worker.startswith("gw") and count.isdigit() and hasattr(os, "sched_setaffinity")):
        return
    cores = sorted(os.sched_getaffinity(0))
    os.environ.setdefault("QA_TESTS_ALL_CORES", ",".join(map(str, cores)))
    if int(count) == len(cores) > 1:
        os.sched_setaffinity(0, {cores[int(worker[2:]) % len(cores)]})


_one_core_per_worker()
ALL_CORES = os.environ.setdefault("QA_TESTS_ALL_CORES", ",".join(map(str, sorted(os.sched_getaffinity(0))))
                                  if hasattr(os, "sched_getaffinity") else "")

# the files that need several cores at once (two lanes of kills, Ray actors, concurrent runs, two training
# processes, answer metrics scored in a forked process beside BERT-F1) get the worker's affinity back to every
# core while they run
MULTI_CORE_FILES = ("test_kill_matrix.py", "test_ray.py", "test_shared_caches.py", "test_train.py",
                    "test_answer_metrics_speed.py")
# the longest files first (minutes each on 2 cores; measured with --durations): ``--dist loadfile`` hands files out
# in this order, so the short ones fill in at the end instead of one long file running alone
LONGEST_FIRST = ("test_kill_matrix.py", "test_ray.py", "test_reader_int8.py", "test_sweep.py", "test_run_cli.py",
                 "test_shared_caches.py", "test_generative.py", "test_thai.py", "test_report.py", "test_encoders.py",
                 "test_damaged_caches.py", "test_adaptive_selectors.py", "test_api_docs.py", "test_resume.py",
                 "test_open_corpus.py", "test_gpu_check.py")


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # xdist would put the files with most tests first instead
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    rank = {name: k for k, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(Path(str(item.fspath)).name, len(rank)))  # stable: the rest keep their order


@pytest.fixture(scope="module", autouse=True)
def _all_cores_for_multi_core_files(request):
    pinned = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    wanted = {int(c) for c in ALL_CORES.split(",") if c}
    if pinned is None or not wanted or Path(str(request.fspath)).name not in MULTI_CORE_FILES:
        yield
        return
    os.sched_setaffinity(0, wanted)
    try:
        yield
    finally:
        os.sched_setaffinity(0, pinned)
DATA = Path(os.environ["QA_DATA_DIR"])
MODELS = (ROOT / ".." / "shared" / "models").resolve()
READER = MODELS / "minilm-squad-reader"
PLUGIN_DIR = ROOT / "tests" / "qa_plugin"  # an example third-party package: its .dist-info declares entry points


@pytest.fixture
def plugin_package(monkeypatch):
    """tests/qa_plugin on sys.path, as if ``pip install``-ed: call the fixture with the registries that should see it
    now; on teardown they forget it again (sys.path restored, their plugins re-read)."""
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    importlib.invalidate_caches()
    seen = []

    def use(*registries):
        for registry in registries:
            registry.reload_plugins()
            seen.append(registry)

    yield use
    for registry in seen:
        registry.reload_plugins()


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


@pytest.fixture(scope="session")
def reader_path() -> Path:
    return READER


@pytest.fixture(scope="session")
def reqa_dev():
    from data.registry import load_dataset

    return load_dataset("reqa_squad", "dev")
