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
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

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
