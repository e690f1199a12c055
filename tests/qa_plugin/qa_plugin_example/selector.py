"""An example third-party selector, registered by the entry point (``entry_points.txt``)::

    [qa_retrieval_eval.selectors]
    relative = qa_plugin_example.selector:RelativeScore

Nothing else is needed: ``--selector relative:0.8,10`` is parsed by
``selection.parse_selector`` from the constructor's typed parameters
(``ratio: float``, ``tau: int``), and ``spec`` / ``to_dict`` come from
``selection.base.Selector``.
"""

from __future__ import annotations

import numpy as np

from data.errors import UserError
from selection.base import Selector, check_scores, valid_counts


class RelativeScore(Selector):
    """Read every top result that scores within a fraction of the best one (unlearned).

    With ``s_1`` the row's top score, the cut-off is
    ``c = s_1 - (1 - ratio) * |s_1|`` and n is the length of the leading run
    of results among the first τ whose score is ``>= c``:
    ``ratio = 1`` reads only results tied with the best, ``ratio = 0``
    everything down to ``s_1 - |s_1|`` (0 for positive scores).  n is at
    least 1 and never goes past τ, K or the row's real (finite) results.
    """

    method = "relative"  # the registered name: the first word of the spec

    def __init__(self, ratio: float = 0.9, tau: int = 25):
        self.ratio = ratio
        self.tau = tau

    def _check(self) -> tuple[float, int]:
        ratio, tau = self.ratio, self.tau
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float, np.integer, np.floating)) or not 0 <= ratio <= 1:
            raise UserError(f"selector {self.spec}: ratio must be a number in [0, 1]")
        if isinstance(tau, bool) or not isinstance(tau, (int, np.integer)) or tau < 1:
            raise UserError(f"selector {self.spec}: tau must be an integer >= 1")
        return float(ratio), int(tau)

    @property
    def max_depth(self) -> int:
        return self._check()[1]

    def predict(self, scores, first_relevant_rank=None) -> np.ndarray:
        ratio, tau = self._check()
        scores = check_scores(scores)[:, :tau]
        cap = valid_counts(scores)  # real results among the first min(τ, K), at least 1
        top = scores[:, :1]
        with np.errstate(invalid="ignore"):
            keep = scores >= top - (1.0 - ratio) * np.abs(top)
        keep &= np.arange(scores.shape[1])[None, :] < cap[:, None]
        run = np.where(keep.all(axis=1), scores.shape[1], np.argmin(keep, axis=1))  # leading run of kept results
        return np.clip(run, 1, cap).astype(np.int64)
