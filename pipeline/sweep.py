"""Noise-information trade-off sweep: ``python -m pipeline.sweep``.

The command-line face of :func:`pipeline.tradeoff_sweep.run_sweep_experiment`:
flags (or ``--config FILE``) become one typed :class:`pipeline.config.SweepConfig`
and the sweep runs the same stages as ``pipeline.run`` over corpus sizes, n
and seeds, sharing reads through the read cache.  See
:mod:`pipeline.tradeoff_sweep` for what it measures and writes.
"""

from __future__ import annotations

import sys

from pipeline.cli import config_from_argv, main_guard
from pipeline.config import SweepConfig
from pipeline.tradeoff_sweep import print_summary, run_sweep_experiment


def parse_config(argv: list[str] | None = None) -> tuple[SweepConfig, dict]:
    """``(config, flags)`` from the command line (``--config FILE`` filled in by the flags given)."""
    return config_from_argv(SweepConfig, argv, "python -m pipeline.sweep", __doc__.splitlines()[0])


@main_guard
def main(argv: list[str] | None = None) -> int:
    config, flags = parse_config(argv)
    result = run_sweep_experiment(config, flags=flags)
    print_summary(result.summary, result.out, result.manifest.get("levels"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
