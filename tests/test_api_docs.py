"""docs/api.md's examples run as written: the Python API a notebook uses, on real data and the real reader."""

from __future__ import annotations

import re

import pytest

from tests.conftest import ROOT

DOC = ROOT / "docs" / "api.md"


def code_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("QA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)


@pytest.mark.slow
def test_api_doc_examples_run_in_order(capsys):
    blocks = code_blocks(DOC.read_text(encoding="utf-8"))
    assert len(blocks) >= 7, "docs/api.md lost its examples"
    namespace: dict = {}
    for i, block in enumerate(blocks):
        try:
            exec(compile(block, f"docs/api.md block {i + 1}", "exec"), namespace)
        except Exception as e:  # name the block that broke
            raise AssertionError(f"docs/api.md block {i + 1} failed: {type(e).__name__}: {e}\n{block}") from e
    printed = capsys.readouterr().out
    assert "MRR" in printed and "ordinal reads" in printed
    # the API's numbers are the command's: the run's metrics.json equals the in-notebook scoring of the same ranking
    result = namespace["result"]
    assert 0.0 <= result.metrics["reading"]["em"] <= 1.0


@pytest.mark.slow
def test_api_retrieval_equals_the_command(tmp_path):
    """api.retrieve + api.retrieval_metrics give exactly pipeline.run's retrieval metrics on the same slice."""
    import json

    from pipeline import api
    from pipeline.run import main

    out = tmp_path / "run"
    assert main(["--dataset", "reqa_squad", "--limit", "60", "--depth", "100", "--out", str(out)]) == 0
    ds = api.load_dataset("reqa_squad", "dev", limit=60)
    scores = api.retrieval_metrics(api.retrieve("bm25", ds, depth=100), ds)
    assert json.loads((out / "metrics.json").read_text())["retrieval"] == json.loads(json.dumps(scores))
