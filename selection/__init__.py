"""How many retrieved passages to read per query: fixed, thresholded, learned, oracle."""

from selection.base import Selector
from selection.oracle import Oracle
from selection.ordinal import Ordinal
from selection.registry import SELECTORS, parse_selector, selector_from_dict, selector_names, selector_usage
from selection.threshold import Threshold
from selection.top import TopN

__all__ = [
    "Selector",
    "TopN",
    "Threshold",
    "Ordinal",
    "Oracle",
    "SELECTORS",
    "parse_selector",
    "selector_from_dict",
    "selector_names",
    "selector_usage",
]
