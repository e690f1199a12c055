"""Test settings: local data from ../shared/data, offline hub, quiet tokenizers."""

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("QA_DATA_DIR", str((ROOT / ".." / "shared" / "data").resolve()))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

DATA = Path(os.environ["QA_DATA_DIR"])
MODELS = (ROOT / ".." / "shared" / "models").resolve()
READER = MODELS / "minilm-squad-reader"


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
