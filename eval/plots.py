"""Line plots of a trade-off sweep (matplotlib, Agg backend), saved as PNG and SVG.

The figures mirror Kratzwald & Feuerriegel (2018), "Adaptive Document
Retrieval for Deep Question Answering", EMNLP, Figures 1-3: exact match,
recall and the number of answer-bearing passages against the number n of
passages read, one curve per corpus size; and exact match against the corpus
size for fixed and adaptive n.  A curve may carry a confidence band
(``low``/``high``, drawn shaded) and a seed spread (``std``, drawn as error
bars when any is non-zero).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from data.io import atomic_path


def curves_by_size(rows: Sequence[dict], key: str, sizes: Sequence[int], label: Callable[[int], str], with_ci: bool = False) -> list[dict]:
    """One curve per corpus size from aggregated sweep rows (``n``, ``{key}_mean``, ``{key}_std``; ``with_ci``: the
    interval ``{key}_ci_low`` / ``_high`` where the rows have it, as a sweep writes it for its objective)."""
    curves = []
    for size in sizes:
        rs = sorted((r for r in rows if r["corpus_size"] == size), key=lambda r: int(r["n"]))
        curve = {
            "label": label(size),
            "x": [int(r["n"]) for r in rs],
            "y": [float(r[f"{key}_mean"]) for r in rs],
            "std": [float(r.get(f"{key}_std", 0.0) or 0.0) for r in rs],
        }
        if with_ci and rs and rs[0].get(f"{key}_ci_low", "") != "":
            curve["low"] = [float(r[f"{key}_ci_low"]) for r in rs]
            curve["high"] = [float(r[f"{key}_ci_high"]) for r in rs]
        curves.append(curve)
    return curves


def plot_curves(
    curves: list[dict], stem: str | Path, *, xlabel: str, ylabel: str, title: str = "", logx: bool = False, integer_x: bool = False
) -> list[str]:
    """Draw ``curves`` (dicts with label, x, y and optional low/high/std/dashed) into ``stem``.png and .svg."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # the legend goes below the axes, so it never hides a curve however many there are
    longest = max((len(str(c["label"])) for c in curves), default=0)
    columns = max(1, min(3 if longest <= 25 else 2 if longest <= 45 else 1, len(curves)))  # long labels: fewer columns
    legend_rows = -(-len(curves) // columns)
    fig, ax = plt.subplots(figsize=(6.4, 4.0 + 0.2 * legend_rows), dpi=110, layout="constrained")
    colors = plt.get_cmap("viridis")(np.linspace(0.05, 0.9, max(len(curves), 1)))
    for color, c in zip(colors, curves):
        x, y = np.asarray(c["x"], float), np.asarray(c["y"], float)
        style = "--" if c.get("dashed") else "-"
        marker = "o" if len(x) <= 12 else None
        ax.plot(x, y, style, color=color, label=c["label"], marker=marker, markersize=3.5, linewidth=1.6)
        if c.get("low") is not None and c.get("high") is not None:
            ax.fill_between(x, np.asarray(c["low"], float), np.asarray(c["high"], float), color=color, alpha=0.18, linewidth=0)
        std = np.asarray(c.get("std") or [], float)
        if std.size == x.size and np.any(std > 0):
            ax.errorbar(x, y, yerr=std, fmt="none", ecolor=color, elinewidth=0.8, capsize=2)
    if logx:
        ax.set_xscale("log")
    if integer_x:
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        if len(title) > 64 and ": " in title:  # a long dataset name (open:CORPUS+QUESTIONS) on a line of its own
            title = title.replace(": ", ":\n", 1)
        ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    if curves:
        fig.legend(loc="outside lower center", ncol=columns, fontsize=7.5, frameon=False)
    return save_figure(fig, stem)


COST_MARKERS = {"threshold": "D", "ordinal": "s", "gap": "^", "rlt": "v", "confidence": "P", "oracle": "*"}


def _theta(system: str) -> float:
    """A threshold system's theta (``threshold:0.6,20`` -> 0.6), for ordering its shades."""
    try:
        return float(system.split(":", 1)[1].split(",", 1)[0])
    except (IndexError, ValueError):
        return 0.0


def plot_cost(rows: Sequence[dict], stem: str | Path, *, title: str = "", metric: str = "em",
              ylabel: str = "exact match (%)") -> list[str]:
    """``metric`` (EM by default, in %) against mean passages read, one panel per corpus size: fixed n as a curve,
    every other system as a labelled point, the Pareto front (oracle left out) as a dashed step line.  ``rows``:
    cost.csv rows with ``metric`` in percent."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted({int(r["corpus_size"]) for r in rows})
    cols = min(len(sizes), 3)
    grid = -(-len(sizes) // cols)
    fig, axes = plt.subplots(grid, cols, figsize=(4.2 * cols, 3.4 * grid + 0.6), dpi=110, layout="constrained", squeeze=False)
    # the thresholds as one family of diamonds shaded along theta; every other selector its own marker and colour
    thresholds = sorted({r["system"] for r in rows if r["family"] == "threshold"}, key=_theta)
    others = sorted({r["system"] for r in rows if r["family"] not in ("top", "threshold")})
    colors = dict(zip(thresholds, plt.get_cmap("viridis")(np.linspace(0.05, 0.85, max(len(thresholds), 1)))))
    colors.update(zip(others, plt.get_cmap("tab10")(np.arange(len(others)) % 10)))
    marker_of = {r["system"]: COST_MARKERS.get(r["family"], "X") for r in rows}
    for ax, size in zip(axes.flat, sizes):
        rs = [r for r in rows if int(r["corpus_size"]) == size]
        fixed = sorted((r for r in rs if r["family"] == "top"), key=lambda r: float(r["mean_passages"]))
        ax.plot([float(r["mean_passages"]) for r in fixed], [float(r[metric]) for r in fixed], "-", color="0.45", marker="o",
                markersize=2.5, linewidth=1.2, label="top:n (fixed)")
        front = sorted((r for r in rs if r["pareto_front"] in (True, "True")), key=lambda r: float(r["mean_passages"]))
        if front:
            ax.step([float(r["mean_passages"]) for r in front], [float(r[metric]) for r in front], "--", where="post",
                    color="black", linewidth=0.9, alpha=0.6, label="Pareto front")
        for r in rs:
            if r["family"] == "top":
                continue
            ax.plot(float(r["mean_passages"]), float(r[metric]), marker_of[r["system"]], color=colors[r["system"]],
                    markersize=6 if r["family"] != "threshold" else 5, label=r["system"], linestyle="none")
        ax.set_title(f"corpus size {size:,}", fontsize=9)
        ax.set_xlabel("mean passages read per question")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[len(sizes):]:
        ax.axis("off")
    handles = {}
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncol=min(4, len(handles)), fontsize=7, frameon=False)
    return save_figure(fig, stem)


def save_figure(fig, stem: str | Path) -> list[str]:
    """Write ``fig`` to ``stem``.png and .svg (each atomically), close it, return the paths."""
    import matplotlib.pyplot as plt

    written = []
    stem = Path(stem)
    for ext in ("png", "svg"):
        path = stem.parent / f"{stem.name}.{ext}"  # not with_suffix: a stem like "mu0.5_em" keeps its whole name
        # an SVG without its creation date and with ids from a fixed salt (not uuid4): a rerun writes the same bytes
        with atomic_path(path) as tmp, plt.rc_context({"svg.hashsalt": "qa-retrieval-eval"}):
            fig.savefig(tmp, format=ext, **({"metadata": {"Date": None}} if ext == "svg" else {}))
        written.append(str(path))
    plt.close(fig)
    return written
