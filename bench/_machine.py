"""Benchmarks that cannot lie by accident: machine state, a busy-machine guard, the matmul ceiling.

Every script in ``bench/`` calls :func:`start` before it measures and
:func:`finish` after, so each printed table carries the CPU model, the flags
that decide precision (avx512_bf16, amx), the torch threads and the 1-minute
load average before and after.  A ratio measured while other processes held the
cores is not a result (a 2-core machine at load 10 turned a 0.67x reader
speed-up into "4.74x"), so :func:`finish` refuses to call the run a result when
the machine was busy: the script still prints its table, marked ``NOT A
RESULT``, and exits with status 3 unless ``--allow-busy`` was given.

Busy means the 1-minute load average, less the benchmark's own running threads,
is above half the cores (``BUSY_FRACTION``).  Before the run the benchmark has
not started, so its own share is 0; after, it is the number of threads it ran
(the load average trails by about a minute, so that share is an upper bound).

:func:`matmul_ceiling` measures what a dense matmul reaches on this machine at a
given precision and thread count, and :func:`encoder_flops` counts the
floating-point operations of a BERT-style encoder forward pass from its config
and the real token counts, so a reader's or encoder's throughput can be stated
as a share of the machine's ceiling.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import hardware  # noqa: E402

BUSY_FRACTION = 0.5
EXIT_BUSY = 3


def read_load() -> float:
    """The 1-minute load average."""
    return os.getloadavg()[0]


def is_busy(load: float, cores: int, own: float = 0.0) -> bool:
    """True when ``load`` less this benchmark's own ``own`` threads exceeds ``BUSY_FRACTION`` x ``cores``."""
    return load - own > BUSY_FRACTION * cores


@dataclass
class Guard:
    """Machine state around one benchmark run (see the module docstring)."""

    threads: int
    cores: int = field(default_factory=hardware.available_cores)
    load_reader: object = read_load
    load_before: float = float("nan")
    load_after: float = float("nan")
    started: float = 0.0

    def start(self) -> "Guard":
        self.load_before = float(self.load_reader())
        self.started = time.time()
        return self

    def finish(self) -> "Guard":
        self.load_after = float(self.load_reader())
        return self

    @property
    def busy_before(self) -> bool:
        return is_busy(self.load_before, self.cores)

    @property
    def busy_after(self) -> bool:
        return is_busy(self.load_after, self.cores, own=self.threads)

    @property
    def busy(self) -> bool:
        return self.busy_before or self.busy_after

    def header(self) -> str:
        import torch

        info = hardware.describe()
        flags = ", ".join(info["cpu_flags"]) or "none of interest"
        bf16 = "native bf16" if info["native_bf16"] else "no native bf16 (bf16 is emulated)"
        return (
            f"machine: {info['cpu']}; flags: {flags}; {bf16}; {self.cores} cores; "
            f"torch {torch.__version__}, {self.threads} threads; load average before {self.load_before:.2f}"
        )

    def footer(self) -> str:
        state = (
            f"load average before {self.load_before:.2f}, after {self.load_after:.2f} "
            f"(busy above {BUSY_FRACTION * self.cores:.1f} beyond the bench's own {self.threads} threads)"
        )
        if self.busy:
            return f"NOT A RESULT: the machine was busy ({state}); rerun on an idle machine"
        return f"machine quiet throughout: {state}"

    def as_dict(self) -> dict:
        return {
            **hardware.describe(),
            "threads": self.threads,
            "load_before": self.load_before,
            "load_after": self.load_after,
            "busy": self.busy,
        }


def start(threads: int, *, load_reader=read_load, quiet: bool = False) -> Guard:
    """Record the machine state before a benchmark and print its header line."""
    guard = Guard(threads=threads, load_reader=load_reader).start()
    if not quiet:
        print(guard.header(), file=sys.stderr)
        if guard.busy_before:
            print(f"warning: load average {guard.load_before:.2f} on {guard.cores} cores before the run: "
                  f"figures will be marked NOT A RESULT", file=sys.stderr)
    return guard


def finish(guard: Guard, *, allow_busy: bool = False, file=None) -> int:
    """Record the load after the run, print the verdict; the exit status a bench should return."""
    guard.finish()
    print(guard.footer(), file=file or sys.stdout)
    if guard.busy and not allow_busy:
        return EXIT_BUSY
    return 0


def add_guard_args(parser) -> None:
    parser.add_argument("--allow-busy", action="store_true",
                        help="exit 0 even when the machine was busy (the table is still marked NOT A RESULT)")


# ----------------------------------------------------------------- ceilings


def matmul_ceiling(dtype: str = "float32", threads: int | None = None, n: int = 1024, seconds: float = 1.0) -> float:
    """GFLOP/s of an ``n x n @ n x n`` torch matmul on the CPU at ``dtype`` with ``threads`` threads.

    The best of repeated timed loops of about ``seconds`` in all (after a warm-up),
    2 n^3 floating-point operations per product.
    """
    import torch

    old = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        dt = getattr(torch, dtype)
        g = torch.Generator().manual_seed(0)
        a = torch.randn(n, n, generator=g).to(dt)
        b = torch.randn(n, n, generator=g).to(dt)
        with torch.inference_mode():
            torch.matmul(a, b)
            best = 0.0
            deadline = time.perf_counter() + seconds
            while True:
                reps = 3
                t0 = time.perf_counter()
                for _ in range(reps):
                    torch.matmul(a, b)
                dt_s = time.perf_counter() - t0
                best = max(best, reps * 2 * n**3 / dt_s / 1e9)
                if time.perf_counter() > deadline:
                    break
        return best
    finally:
        torch.set_num_threads(old)


def encoder_flops(config, lengths) -> float:
    """Floating-point operations of one forward pass of a BERT-style encoder over sequences of ``lengths`` tokens.

    Per layer and sequence of L tokens with hidden size d and feed-forward size f:
    Q, K, V and output projections 4 x 2 L d^2, feed-forward 2 x 2 L d f, attention
    scores and weighted values 2 x 2 L^2 d (Vaswani et al. 2017, counted as in
    Kaplan et al. 2020 with 2 operations per multiply-add); embeddings, layer norms,
    softmax and the span head are left out (under 1%).
    """
    d = int(config.hidden_size)
    f = int(getattr(config, "intermediate_size", 4 * d))
    layers = int(config.num_hidden_layers)
    total = 0.0
    for L in lengths:
        L = float(L)
        total += layers * (8 * L * d * d + 4 * L * d * f + 4 * L * L * d)
    return total


def ceilings(threads: int, dtypes=("float32", "bfloat16")) -> dict[str, float]:
    """:func:`matmul_ceiling` for each dtype (GFLOP/s)."""
    return {dt: matmul_ceiling(dt, threads) for dt in dtypes}


def ceiling_line(ceil: dict[str, float]) -> str:
    return "matmul ceiling (1024^3, GFLOP/s): " + ", ".join(f"{k} {v:.1f}" for k, v in ceil.items())
