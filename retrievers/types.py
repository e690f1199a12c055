"""The ranking type every retriever returns (defined with the other plain types in :mod:`data.types`)."""

from data.types import Ranking

__all__ = ["Ranking"]
