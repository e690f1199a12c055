"""Figures (eval/plots.py): written under the whole stem given, one point per selector with its own look."""

from __future__ import annotations

from eval.plots import plot_cost


def _rows():
    rows = []
    for size in (1000, 10000):
        for n in (1, 2, 3):
            rows.append({"corpus_size": size, "system": f"top:{n}", "family": "top", "mean_passages": n, "em": 40 + n,
                         "pareto_front": n == 1})
        for system, family, read, em in (("threshold:0.6,20", "threshold", 2.2, 45), ("threshold:0.75,20", "threshold", 3.1, 44),
                                          ("gap:20,5", "gap", 6.5, 41), ("confidence:20", "confidence", 2.0, 43),
                                          ("oracle", "oracle", 2.5, 50)):
            rows.append({"corpus_size": size, "system": system, "family": family, "mean_passages": read, "em": em,
                         "pareto_front": False})
    return rows


def test_cost_plot_keeps_a_stem_with_a_dot_and_gives_every_selector_its_own_look(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures = []
    real_close = plt.close
    plt.close = lambda fig=None: figures.append(fig)  # keep the figure to look at its points
    try:
        written = plot_cost(_rows(), tmp_path / "sweep_mu0.5_em_vs_passages", title="t")
    finally:
        plt.close = real_close
    assert sorted(written) == sorted(str(tmp_path / f"sweep_mu0.5_em_vs_passages.{e}") for e in ("png", "svg"))
    assert all((tmp_path / f"sweep_mu0.5_em_vs_passages.{e}").stat().st_size > 0 for e in ("png", "svg"))
    ax = figures[0].axes[0]
    looks = {}
    for line in ax.get_lines():
        label = line.get_label()
        if label.startswith(("top:", "Pareto", "_")):
            continue
        looks[label] = (line.get_marker(), tuple(round(c, 3) for c in matplotlib.colors.to_rgba(line.get_color())))
    assert len(looks) == 5 and len(set(looks.values())) == 5  # no two selectors look the same
    assert looks["threshold:0.6,20"][0] == looks["threshold:0.75,20"][0] == "D"  # one family, shaded
    assert len({looks[s][0] for s in ("gap:20,5", "confidence:20", "oracle", "threshold:0.6,20")}) == 4
    real_close(figures[0])


def test_the_same_plot_twice_is_the_same_bytes(tmp_path):
    """A rerun of a sweep writes its figures byte for byte again: no creation date in the SVG, no random ids."""
    import time

    import matplotlib

    matplotlib.use("Agg")
    first = plot_cost(_rows(), tmp_path / "a" / "cost", title="t")
    time.sleep(1.1)  # another second on the clock
    again = plot_cost(_rows(), tmp_path / "b" / "cost", title="t")
    for x, y in zip(sorted(first), sorted(again)):
        assert open(x, "rb").read() == open(y, "rb").read(), (x, y)
