"""How many retrieved passages to read per query: fixed, thresholded, gap-cut, learned, reader-in-the-loop, oracle."""

from selection.base import Selector
from selection.confidence import Confidence
from selection.gap import Gap
from selection.oracle import Oracle
from selection.ordinal import Ordinal
from selection.registry import SELECTORS, parse_selector, selector_from_dict, selector_names, selector_usage
from selection.threshold import Threshold
from selection.top import TopN
from selection.truncation import Truncation

__all__ = [
    "Selector",
    "TopN",
    "Threshold",
    "Ordinal",
    "Gap",
    "Truncation",
    "Confidence",
    "Oracle",
    "SELECTORS",
    "parse_selector",
    "selector_from_dict",
    "selector_names",
    "selector_usage",
]
