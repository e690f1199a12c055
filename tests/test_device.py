"""Devices and out-of-memory handling.

The out-of-memory halving is tested on CPU through the generic helper, with a
real callable that raises torch's own ``OutOfMemoryError`` for batches above a
size (what CUDA raises).  The CUDA paths (bf16 autocast, FAISS on GPU) run only
where a GPU is present.
"""

import numpy as np
import pytest
import torch

from data.errors import UserError
from retrievers.encoder import is_out_of_memory, resolve_device, run_in_batches

HAS_CUDA = torch.cuda.is_available()


def capped(limit, calls):
    """A batch runner that fails like CUDA when a batch has more than ``limit`` items."""

    def run(lo, hi):
        calls.append((lo, hi))
        if hi - lo > limit:
            raise torch.cuda.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {hi - lo} MiB")
        return list(range(lo, hi))

    return run


def test_oom_halves_the_batch_and_keeps_the_smaller_size(capsys):
    calls = []
    parts = run_in_batches(50, 32, capped(8, calls), what="test-halving")
    assert [x for part in parts for x in part] == list(range(50))  # every item once, in order
    sizes = [hi - lo for lo, hi in calls]
    assert sizes[:3] == [32, 16, 8]  # halved twice, then it fits
    assert all(s <= 8 for s in sizes[2:])  # later batches stay at the halved size
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("warning: test-halving: out of accelerator memory")


def test_oom_warning_is_said_once_per_component(capsys):
    run_in_batches(20, 16, capped(4, []), what="test-once")
    run_in_batches(20, 16, capped(2, []), what="test-once")
    assert len(capsys.readouterr().err.splitlines()) == 1


def test_oom_with_variable_batch_sizes():
    calls = []
    wanted = {0: 10, 5: 3}  # a token budget gives a size per start position
    parts = run_in_batches(23, lambda lo: wanted.get(lo, 10), capped(5, calls), what="test-variable")
    assert [x for part in parts for x in part] == list(range(23))
    sizes = [hi - lo for lo, hi in calls]
    assert sizes[:3] == [10, 5, 3]  # halved to the cap; a smaller wanted size is kept
    assert all(s <= 5 for s in sizes[1:])


def test_oom_on_a_single_item_is_a_user_error():
    with pytest.raises(UserError, match="batch of one"):
        run_in_batches(3, 4, capped(0, []), what="test-single")


def test_other_errors_are_not_swallowed():
    def run(lo, hi):
        raise ValueError("not memory")

    with pytest.raises(ValueError, match="not memory"):
        run_in_batches(3, 2, run, what="test-other")
    assert not is_out_of_memory(ValueError("out of memory"))
    assert is_out_of_memory(torch.cuda.OutOfMemoryError("CUDA out of memory"))


@pytest.mark.parametrize("device", ["tpu", "cuda:x", "gpu0"])
def test_bad_device_names(device):
    with pytest.raises(UserError, match="auto, cpu or cuda"):
        resolve_device(device)


@pytest.mark.skipif(HAS_CUDA, reason="checks the no-GPU message")
def test_cuda_without_a_gpu_is_a_user_error():
    assert resolve_device("auto") == "cpu"
    with pytest.raises(UserError, match="CUDA is not available"):
        resolve_device("cuda")


def test_faiss_stays_on_cpu_without_faiss_gpu():
    import faiss

    from retrievers.dense import _maybe_gpu

    index = faiss.IndexFlatIP(4)
    moved, resources = _maybe_gpu(index, "auto")
    if not hasattr(faiss, "StandardGpuResources") or not HAS_CUDA:
        assert moved is index and resources is None


# ---------------------------------------------------------------- GPU only
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_encoder_autocast_on_cuda_matches_cpu():
    from retrievers.encoder import encode_texts, load_sentence_encoder, resolve_encoder

    texts = ["The Broncos won Super Bowl 50.", "Levi's Stadium is in Santa Clara, California.", "short"]
    cpu = encode_texts(load_sentence_encoder(resolve_encoder(None), "cpu"), texts, show_progress=False)
    gpu = encode_texts(load_sentence_encoder(resolve_encoder(None), "cuda"), texts, show_progress=False)
    assert gpu.dtype == np.float32
    assert np.min(np.sum(cpu * gpu, axis=1)) > 0.99  # bf16/fp16 autocast: same directions


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_reader_on_cuda_finds_the_same_spans(reader_path):
    from readers.extractive import ExtractiveReader

    q = ["Who won Super Bowl 50?", "Where was Super Bowl 50 played?"]
    p = [
        "The Denver Broncos defeated the Carolina Panthers 24-10 to win Super Bowl 50.",
        "The game was played at Levi's Stadium in Santa Clara, California.",
    ]
    cpu = ExtractiveReader(reader_path, device="cpu", progress=False).read_pairs(q, p)
    gpu = ExtractiveReader(reader_path, device="cuda", progress=False).read_pairs(q, p)
    assert gpu.text == cpu.text
    np.testing.assert_allclose(gpu.score, cpu.score, atol=0.5)


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_faiss_gpu_search_equals_cpu():
    import faiss

    from retrievers.dense import _maybe_gpu

    if not hasattr(faiss, "StandardGpuResources"):
        pytest.skip("faiss-gpu is not installed")
    rng = np.random.default_rng(0)
    emb = rng.standard_normal((500, 32)).astype(np.float32)
    q = rng.standard_normal((7, 32)).astype(np.float32)
    cpu = faiss.IndexFlatIP(32)
    cpu.add(emb)
    gpu, resources = _maybe_gpu(faiss.IndexFlatIP(32), "cuda")
    assert resources is not None
    gpu.add(emb)
    (s1, i1), (s2, i2) = cpu.search(q, 10), gpu.search(q, 10)
    np.testing.assert_array_equal(i1, i2)
    np.testing.assert_allclose(s1, s2, rtol=1e-4, atol=1e-4)
