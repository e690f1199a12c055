"""What the machine can do: CPU model and the instruction-set flags that decide precision.

Every stage that picks a precision or a batch shape for the CPU asks here, so
readers, encoders, training and the benchmarks follow one rule: bfloat16 only
where the CPU has bf16 matrix instructions (AVX512-BF16 or AMX-BF16).  Without
them PyTorch emulates bf16 and it runs about 5x slower than float32 (measured on
a 2-core AMD EPYC with AVX2 only: 4.5 vs 24.6 reader passages/s).
"""

from __future__ import annotations

import functools
import os

# flags that change which precision / kernels are fast
FLAGS_OF_INTEREST = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")


@functools.lru_cache(maxsize=1)
def _cpuinfo() -> tuple[str, frozenset[str]]:
    model, flags = "", frozenset()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if not model and line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                elif not flags and line.startswith("flags"):
                    flags = frozenset(line.split(":", 1)[1].split())
                if model and flags:
                    break
    except OSError:
        pass
    if not model:
        import platform

        model = platform.processor() or platform.machine()
    return model, flags


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), e.g. ``AMD EPYC``."""
    return _cpuinfo()[0]


def cpu_flags() -> frozenset[str]:
    """All CPU flags the kernel reports (empty where ``/proc/cpuinfo`` is absent)."""
    return _cpuinfo()[1]


def cpu_flags_of_interest() -> list[str]:
    """The flags of :data:`FLAGS_OF_INTEREST` this CPU has."""
    flags = cpu_flags()
    return [f for f in FLAGS_OF_INTEREST if f in flags]


def cpu_has_native_bf16() -> bool:
    """True when the CPU has bfloat16 matrix instructions (AVX512-BF16 or AMX-BF16; Linux flags)."""
    flags = cpu_flags()
    return "avx512_bf16" in flags or "amx_bf16" in flags


def available_cores() -> int:
    """Cores this process may run on (its affinity mask), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def describe() -> dict:
    """CPU model, flags of interest, native bf16, cores: for manifests and benchmark headers."""
    return {
        "cpu": cpu_model(),
        "cpu_flags": cpu_flags_of_interest(),
        "native_bf16": cpu_has_native_bf16(),
        "cores": available_cores(),
    }


@functools.lru_cache(maxsize=1)
def _libc_trim():
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to hand back this way
        return None


def release_heap() -> None:
    """Hand the heap's freed memory back to the OS (glibc ``malloc_trim``; elsewhere nothing).

    Work whose tensors change shape from batch to batch (generation over prompts of every length) frees
    memory glibc keeps in its heap, fragmented, instead of returning: a process's RSS then grows batch after
    batch although nothing stays alive (the position experiment's 2,364 prompts reached 10 GB). Trimming
    after each batch keeps RSS at the model plus one batch; it costs milliseconds.
    """
    trim = _libc_trim()
    if trim is not None:
        trim(0)
