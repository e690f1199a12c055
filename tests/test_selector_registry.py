"""selection.registry: selectors by name (built-ins and entry-point plugins), specs parsed from constructors.

The four built-in specs appear in metrics files, so they must round-trip
exactly; drivers read ``learned`` / ``needs_gold`` / ``max_depth`` instead of
guessing from attributes; the example plugin (tests/qa_plugin) is found
through its dist-info's entry point alone and parsed by the generic parser.
"""

from __future__ import annotations

import ast
import importlib
import json
from pathlib import Path

import numpy as np
import pytest

from data.errors import UserError
from selection import (
    SELECTORS,
    Oracle,
    Ordinal,
    Selector,
    Threshold,
    TopN,
    parse_selector,
    selector_from_dict,
    selector_names,
    selector_usage,
)

ROOT = Path(__file__).resolve().parent.parent
NEG_INF = float("-inf")


# ---------------------------------------------------------------- the registry
def test_registry_lists_the_built_ins_in_order():
    from selection import Confidence, Gap, Truncation

    assert SELECTORS.kind == "selectors" and SELECTORS.group == "qa_retrieval_eval.selectors"
    assert selector_names()[:7] == ["top", "threshold", "ordinal", "gap", "rlt", "confidence", "oracle"]
    for name, cls in [("top", TopN), ("threshold", Threshold), ("ordinal", Ordinal), ("gap", Gap), ("rlt", Truncation),
                      ("confidence", Confidence), ("oracle", Oracle)]:
        assert name in SELECTORS and SELECTORS.get(name) is cls and cls.method == name
    assert selector_usage().startswith("top:N, threshold:θ[,τ], ordinal[:τ], gap[:τ[,b]], rlt[:τ[,λ]], confidence[:τ], oracle")
    with pytest.raises(UserError, match=r"^unknown selector 'best' \(known: "):
        SELECTORS.get("best")


def test_base_module_imports_nothing_from_the_registry():
    tree = ast.parse((ROOT / "selection" / "base.py").read_text(encoding="utf-8"))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            imported.add(node.module or "")
        elif isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
    assert not {m for m in imported if m == "selection" or m.startswith("selection.")}


# ---------------------------------------------------------------- specs
@pytest.mark.parametrize(
    "spec, canonical",
    [
        ("top:5", "top:5"),
        ("threshold:0.8,25", "threshold:0.8,25"),
        ("threshold:0.8", "threshold:0.8,25"),  # τ is always written
        ("threshold:1,4", "threshold:1.0,4"),
        ("ordinal:25", "ordinal:25"),
        ("ordinal", "ordinal:25"),
        ("oracle", "oracle"),
        # options beyond the positional ones, by name; written only when not the default
        ("threshold:0.65,4,normalization=sum", "threshold:0.65,4,normalization=sum"),
        ("threshold:0.5,normalization=softmax", "threshold:0.5,25"),
        ("ordinal:6,offset=0,alpha=0.5,normalization=sum", "ordinal:6,offset=0,alpha=0.5,normalization=sum"),
        ("ordinal:tau=6,alpha=1", "ordinal:6"),
        ("top:n=3", "top:3"),
    ],
)
def test_specs_round_trip_exactly(spec, canonical):
    sel = parse_selector(spec)
    assert sel.spec == canonical
    again = parse_selector(sel.spec)
    assert type(again) is type(sel) and again.get_params() == sel.get_params() and again.spec == canonical
    saved = json.loads(json.dumps(sel.to_dict()))
    assert saved["spec"] == canonical and saved["method"] == sel.method
    back = selector_from_dict(saved)
    assert type(back) is type(sel) and back.to_dict() == saved and type(sel).from_dict(saved).to_dict() == saved


def test_constructed_built_ins_keep_their_metrics_file_specs():
    assert TopN(5).spec == "top:5" and TopN(np.int64(2)).spec == "top:2"
    assert Threshold(0.8, 25).spec == "threshold:0.8,25" and Threshold().spec == "threshold:0.8,25"
    assert Threshold(np.float64(0.75), np.int64(3)).spec == "threshold:0.75,3"
    assert Ordinal().spec == "ordinal:25" and Ordinal(250).spec == "ordinal:250"
    assert Oracle().spec == "oracle"


def test_fitted_ordinal_round_trips_through_its_dict():
    rng = np.random.default_rng(3)
    scores = -np.sort(-rng.gamma(2.0, 3.0, size=(50, 8)), axis=1)
    ranks = 1 + np.argmax(rng.random((50, 8)) < np.linspace(0.6, 0.1, 8), axis=1)
    sel = parse_selector("ordinal:8").fit(scores, ranks)
    saved = json.loads(json.dumps(sel.to_dict()))
    back = selector_from_dict(saved)
    assert back.to_dict() == saved and back.fitted_state() == sel.fitted_state()
    np.testing.assert_array_equal(back.predict(scores), sel.predict(scores))


# ---------------------------------------------------------------- declared properties
@pytest.mark.parametrize(
    "spec, learned, needs_gold, max_depth",
    [
        ("top:5", False, False, 5),
        ("threshold:0.8", False, False, 25),
        ("threshold:0.8,7", False, False, 7),
        ("ordinal", True, False, 25),
        ("ordinal:250", True, False, 250),
        ("oracle", False, True, None),
    ],
)
def test_declared_learned_needs_gold_and_max_depth(spec, learned, needs_gold, max_depth):
    sel = parse_selector(spec)
    assert sel.learned is learned and type(sel).learned is learned
    assert sel.needs_gold is needs_gold and type(sel).needs_gold is needs_gold
    assert sel.max_depth == max_depth
    if max_depth is not None:
        # it never selects more than max_depth, whatever K
        scores = np.tile(np.linspace(1.0, 0.0, 400), (3, 1))
        if learned:
            sel.fit(scores, np.array([1, 300, 400]))
        assert sel.predict(scores).max() <= max_depth


def test_oracle_is_the_one_built_in_that_needs_the_gold():
    scores = np.zeros((2, 4))
    with pytest.raises(UserError, match="needs first_relevant_rank"):
        Oracle().predict(scores)
    for spec in ("top:2", "threshold:0.5,3"):
        parse_selector(spec).predict(scores)  # no gold needed


# ---------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "spec, message",
    [
        ("", r"^selector '': expected one of top:N, threshold:θ\[,τ\], ordinal\[:τ\], gap\[:τ\[,b\]\], rlt\[:τ\[,λ\]\], confidence\[:τ\], oracle"),
        ("best:3", r"^selector 'best:3': unknown method 'best' \(expected one of top:N, "),
        ("relative:0.8,10", r"^selector 'relative:0.8,10': unknown method 'relative'"),  # plugin not on the path
        ("top", r"^selector 'top': expected top:N$"),
        ("top:1,2", r"^selector 'top:1,2': expected top:N$"),
        ("top:2.5", r"^selector 'top:2.5' option n: expected an integer, got '2.5'$"),
        ("top:m=3", r"^selector 'top:m=3': unknown option 'm' \(allowed: n\)$"),
        ("threshold:tau=4", r"^selector 'threshold:tau=4': expected threshold:θ or threshold:θ,τ$"),
        ("threshold:0.5,normalization=l2", r"^selector 'threshold:0.5,normalization=l2': normalization must be one of softmax, sum$"),
        ("ordinal:tau=x", r"^selector 'ordinal:tau=x' option tau: expected an integer, got 'x'$"),
        ("ordinal:0", r"^selector 'ordinal:0': τ must be an integer >= 1$"),
        ("oracle:1", r"^selector 'oracle:1': oracle takes no parameters$"),
    ],
)
def test_bad_specs_are_one_line_user_errors(spec, message):
    with pytest.raises(UserError, match=message) as err:
        parse_selector(spec)
    assert "\n" not in str(err.value)


def test_dict_errors_and_base_from_dict():
    with pytest.raises(UserError, match=r"^selector dict: unknown method 'nope' \(expected one of top, threshold, ordinal, gap, rlt, confidence, oracle"):
        selector_from_dict({"method": "nope"})
    with pytest.raises(UserError, match=r"^selector dict has method 'top', expected 'oracle'$"):
        Oracle.from_dict(TopN(2).to_dict())
    with pytest.raises(UserError, match="selector_from_dict"):
        Selector.from_dict(TopN(2).to_dict())


# ---------------------------------------------------------------- the plugin selector
@pytest.fixture
def plugin(plugin_package):
    """tests/qa_plugin on sys.path (its dist-info declares the entry point); the registry forgets it afterwards."""
    plugin_package(SELECTORS)
    return importlib.import_module("qa_plugin_example.selector")


def test_plugin_selector_found_by_entry_point_and_parsed_generically(plugin):
    RelativeScore = plugin.RelativeScore
    assert "relative" in SELECTORS.plugins() and "relative" in selector_names()
    assert SELECTORS.get("relative") is RelativeScore
    assert selector_usage().endswith("oracle, relative[:ratio[,tau]]")
    sel = parse_selector("relative:0.8,10")
    assert type(sel) is RelativeScore and sel.get_params() == {"ratio": 0.8, "tau": 10}
    assert sel.spec == "relative:0.8,10" and parse_selector(sel.spec).get_params() == sel.get_params()
    assert sel.learned is False and sel.needs_gold is False and sel.max_depth == 10
    assert parse_selector("relative").spec == "relative:0.9,25"
    assert parse_selector("relative:tau=3").get_params() == {"ratio": 0.9, "tau": 3}
    saved = json.loads(json.dumps(sel.to_dict()))
    assert saved == {"method": "relative", "spec": "relative:0.8,10", "params": {"ratio": 0.8, "tau": 10}, "fitted": {}}
    assert selector_from_dict(saved).to_dict() == saved
    with pytest.raises(UserError, match=r"^selector 'relative:1,2,3': expected relative or relative:ratio or relative:ratio,tau$"):
        parse_selector("relative:1,2,3")
    with pytest.raises(UserError, match=r"^selector 'relative:2': ratio must be a number in \[0, 1\]$"):
        parse_selector("relative:2")
    with pytest.raises(UserError, match=r"^selector 'relative:0.5,x' option tau: expected an integer, got 'x'$"):
        parse_selector("relative:0.5,x")


def test_plugin_selector_predicts_the_leading_run_within_the_ratio(plugin):
    scores = np.array([
        [10.0, 9.0, 8.5, 7.0, 1.0],  # cut-off 10 - 0.2*10 = 8: 10, 9, 8.5
        [10.0, 2.0, 1.0, 0.0, -1.0],  # only the best
        [5.0, 5.0, NEG_INF, NEG_INF, NEG_INF],  # never past the real results
        [-1.0, -1.1, -1.3, -5.0, -6.0],  # negative scores: cut-off -1 - 0.2*1 = -1.2
        [NEG_INF] * 5,  # no results: still 1
        [float("nan")] * 5,
    ])
    sel = parse_selector("relative:0.8,10")
    assert sel.fit(scores, np.full(len(scores), 5)) is sel  # unlearned: fit only checks
    out = sel.predict(scores)
    assert out.dtype == np.int64 and out.tolist() == [3, 1, 2, 2, 1, 1]
    assert parse_selector("relative:0,2").predict(scores).tolist() == [2, 2, 2, 2, 1, 1]  # capped at τ
    assert parse_selector("relative:1").predict(scores).tolist() == [1, 1, 2, 1, 1, 1]  # ties with the best only
    assert parse_selector("relative:0,99").predict(scores).tolist() == [5, 4, 2, 3, 1, 1]  # K; row 4: cut-off -2
