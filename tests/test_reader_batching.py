"""Reader batch shapes and precision follow the hardware, and never change a read."""

import numpy as np
import pytest

import hardware
from data.squad import load_squad_json
from readers import extractive
from readers.extractive import CPU_MAX_WINDOWS, CPU_TOKEN_BUDGET, CUDA_BATCH_SIZE, ExtractiveReader
from tests.conftest import DATA, READER


@pytest.fixture(scope="module")
def pairs():
    squad = load_squad_json(DATA / "squad" / "dev-v1.1.json.zip")
    rows = [(qa["question"], p["context"]) for a in squad["data"] for p in a["paragraphs"] for qa in p["qas"]][::500]
    # paragraphs (one or two windows each) and their first sentences (short windows): both batch very differently
    questions = [q for q, _ in rows] * 2
    passages = [c for _, c in rows] + [c.split(". ")[0] for _, c in rows]
    return questions, passages


@pytest.mark.slow
def test_default_batches_read_exactly_what_batch_one_reads(pairs):
    questions, passages = pairs
    one = ExtractiveReader(str(READER), batch_size=1, max_batch_tokens=10**9, device="cpu", dtype="float32", progress=False)
    default = ExtractiveReader(str(READER), device="cpu", dtype="float32", progress=False)
    a = one.read_pairs(questions, passages)
    b = default.read_pairs(questions, passages)
    assert default.batch_shape("cpu") == (CPU_MAX_WINDOWS, CPU_TOKEN_BUDGET)
    assert a.text == b.text
    assert np.array_equal(a.start_char, b.start_char) and np.array_equal(a.end_char, b.end_char)
    np.testing.assert_allclose(a.score, b.score, rtol=0, atol=1e-3)
    assert sum(t != "" for t in b.text) > 0.9 * len(b.text)


def test_batch_shape_defaults_by_device():
    r = ExtractiveReader(str(READER), max_length=2 * CPU_TOKEN_BUDGET)
    assert r.batch_shape("cpu") == (CPU_MAX_WINDOWS, 2 * CPU_TOKEN_BUDGET)  # never below one full window
    assert r.batch_shape("cuda") == (CUDA_BATCH_SIZE, None)
    assert r.batch_shape("cuda:1") == (CUDA_BATCH_SIZE, None)
    set_by_user = ExtractiveReader(str(READER), batch_size=8, max_batch_tokens=4096)
    assert set_by_user.batch_shape("cpu") == (8, 4096) and set_by_user.batch_shape("cuda") == (8, 4096)


def test_batching_is_not_part_of_the_read_identity():
    a = ExtractiveReader(str(READER), batch_size=1, device="cpu", dtype="float32")
    b = ExtractiveReader(str(READER), max_batch_tokens=2048, device="cpu", dtype="float32")
    assert a.identity() == b.identity()


def test_auto_precision_on_the_cpu_follows_native_bf16(capsys):
    auto = ExtractiveReader(str(READER), device="cpu", dtype="auto")
    _, dtype = auto._resolve_device_dtype()
    assert dtype == ("bfloat16" if hardware.cpu_has_native_bf16() else "float32")
    forced = ExtractiveReader(str(READER), device="cpu", dtype="bfloat16", progress=False).load()
    err = capsys.readouterr().err
    if hardware.cpu_has_native_bf16():
        assert "emulated" not in err
    else:
        assert "warning: reader dtype bfloat16 on a CPU without native bf16" in err
    assert forced.dtype_ == "bfloat16"


@pytest.mark.slow
def test_cpu_autocast_pads_spans_to_a_multiple_of_16_and_reads_what_exact_spans_read(pairs, monkeypatch):
    """bf16 autocast on the CPU rounds each batch's span up (few matmul shapes, so oneDNN's per-shape kernel cache
    stays small); the pad tokens are masked, so the reads are those of exact spans (bf16: equal answers but for
    near-ties); float32 keeps exact spans."""
    questions, passages = pairs
    reader = ExtractiveReader(str(READER), device="cpu", dtype="bfloat16", progress=False).load()
    spans: list[int] = []
    hook = reader.model_.register_forward_pre_hook(lambda m, args, kw: spans.append(kw["input_ids"].shape[1]),
                                                   with_kwargs=True)
    rounded = reader.read_pairs(questions, passages)
    assert spans and all(s % extractive.CPU_AUTOCAST_SPAN_MULTIPLE == 0 or s == max(spans) for s in spans)
    rounded_spans = list(spans)
    monkeypatch.setattr(extractive, "CPU_AUTOCAST_SPAN_MULTIPLE", 1)
    spans.clear()
    exact = reader.read_pairs(questions, passages)
    assert any(s % 16 for s in spans)  # exact spans: the rounding above was not a no-op
    assert sum(rounded_spans) >= sum(spans) and len(set(rounded_spans)) <= len(set(spans))
    same = np.mean([a == b for a, b in zip(rounded.text, exact.text)])
    assert same >= 0.95, same
    close = np.abs(rounded.score - exact.score) < 0.25  # bf16 logits: a few hundredths apart
    assert close.mean() >= 0.95
    hook.remove()
    f32 = ExtractiveReader(str(READER), device="cpu", dtype="float32", progress=False).load()
    spans.clear()
    f32.model_.register_forward_pre_hook(lambda m, args, kw: spans.append(kw["input_ids"].shape[1]), with_kwargs=True)
    f32.read_pairs(questions, passages)
    assert any(s % 16 for s in spans)
