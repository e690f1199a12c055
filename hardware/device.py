"""Accelerator devices: device names, CUDA out-of-memory detection, and batches halved on it.

Shared by the encoders (:mod:`retrievers.encoder`), the reader
(:mod:`readers.extractive`, :mod:`readers.halving`) and the pipeline, so each
stage names devices and recovers from running out of accelerator memory the
same way.  torch is imported only inside the functions.
"""

from __future__ import annotations

import contextlib

from data.errors import UserError

_OOM_WARNED: set[str] = set()


# ------------------------------------------------------------------ devices
def is_device_name(device: str) -> bool:
    """True for ``auto``, ``cpu``, ``cuda`` and ``cuda:<index>``."""
    device = str(device)
    return device in ("auto", "cpu", "cuda") or (device.startswith("cuda:") and device[5:].isdigit())


def auto_device() -> str:
    """``cuda`` where a CUDA device is available, else ``cpu``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_device(device: str = "auto") -> str:
    """A ``--device`` value (``auto``, ``cpu``, ``mps``, ``cuda[:i]``) checked against this machine.

    ``auto`` becomes ``cuda`` or ``cpu``; a malformed name, CUDA on a machine
    without it, or an index past the last device is a ``UserError``.
    """
    import torch

    device = str(device)
    if device == "auto":
        return auto_device()
    if device in ("cpu", "mps"):
        return device
    if not is_device_name(device):
        raise UserError(f"--device {device!r}: use auto, cpu or cuda[:i]")
    if not torch.cuda.is_available():
        raise UserError(f"--device {device}: CUDA is not available on this machine")
    if ":" in device and int(device[5:]) >= torch.cuda.device_count():
        raise UserError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return device


# ------------------------------------------------------------ out of memory
def attention_kernels(device: str):
    """Context for a model's forward passes on ``device``: on CUDA, attention without cuDNN's kernel.

    PyTorch picks cuDNN's fused attention for bf16/fp16 on Hopper GPUs; it builds an execution
    plan on the CPU for every new input shape (about 5 ms each, measured on an H200 with torch 2.11),
    and our length-sorted batches have many shapes, so a pass spent most of its CPU time there while
    the GPU waited. Flash and memory-efficient attention need no plan. Elsewhere: no change.
    """
    if not str(device).startswith("cuda"):
        return contextlib.nullcontext()
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # torch without the backend selector: its default
        return contextlib.nullcontext()
    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


def is_out_of_memory(err: BaseException) -> bool:
    """True for a CUDA (or other accelerator) out-of-memory error."""
    try:
        import torch

        if isinstance(err, torch.OutOfMemoryError):
            return True
    except (ImportError, AttributeError):
        pass
    return isinstance(err, RuntimeError) and "out of memory" in str(err).lower() and "cuda" in str(err).lower()


def release_accelerator_memory() -> None:
    """Hand cached CUDA blocks back (``torch.cuda.empty_cache``); nothing without CUDA or torch."""
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:
        pass


def warn_out_of_memory(what: str, size: int) -> None:
    """Say once per run and component that batches were halved."""
    if what in _OOM_WARNED:
        return
    _OOM_WARNED.add(what)
    from data.io import warn

    warn(f"{what}: out of accelerator memory; batches halved to {size} and retried")


def run_in_batches(n: int, batch_size, run, *, what: str = "batch") -> list:
    """``run(lo, hi)`` over ``[0, n)`` in consecutive batches; the results, in order.

    ``batch_size`` is an int or ``lo -> int`` (the size of the batch that
    starts at ``lo``).  A batch that runs out of CUDA memory is halved and
    retried, and every later batch is capped at the halved size; the run says
    so once (a ``warning:`` line).  A single item that does not fit is a
    ``UserError``.
    """
    out = []
    cap: int | None = None
    lo = 0
    while lo < n:
        size = batch_size(lo) if callable(batch_size) else int(batch_size)
        if cap is not None:
            size = min(size, cap)
        size = max(1, min(size, n - lo))
        try:
            out.append(run(lo, lo + size))
        except Exception as err:
            if not is_out_of_memory(err):
                raise
            release_accelerator_memory()
            if size == 1:
                raise UserError(f"{what}: out of accelerator memory with a batch of one (use --device cpu or a smaller max length)") from None
            cap = size // 2
            warn_out_of_memory(what, cap)
            continue
        lo += size
    return out
