"""Per-query routing between member retrievers.

A router answers each query with the ranking of *one* member retriever.  Two
routers are implemented:

- :class:`StatisticalRouterRetriever` (no training): choose the member whose
  score distribution is most peaked for this query — by default the z-score
  of its top-1 score within its own top-``depth`` scores (how far the best
  candidate stands out).  This is the training-free "statistical routing"
  baseline that MrRank (Khamnuansin et al., 2024, arXiv:2406.05733) compares
  against; peakedness of the score distribution is a classic
  query-performance predictor (Shtok et al., 2012, "Predicting query
  performance by query-drift estimation", TOIS — normalized query
  commitment).
- :class:`RouterRetriever` (learned): a scikit-learn classifier fitted on a
  training split predicts which member ranks the gold candidate highest, from
  features of the query (length, wh-word) and of every member's score
  distribution (top-1, top-1 gap, mean/std of the top-k, top-1 z-score,
  entropy of the softmax over z-scored scores) and of the members' agreement
  (top-k overlap, top-1 agreement).  Training queries are weighted by how much
  the choice matters (difference between the best and second-best member's
  reciprocal rank of the gold); queries where the members tie are skipped.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Sequence

import numpy as np
from data.progress import tqdm  # a line every 30 s when stderr is not a terminal

from data.errors import UserError
from data.io import write_json
from data.types import Corpus, Dataset
from retrievers.base import Retriever, RetrieverBase
from retrievers.pooling import (
    check_members,
    check_positive_int,
    check_training_split,
    fuse_name,
    member_config,
    reciprocal_rank_of_gold,
    search_fused,
    search_members,
    training_gold,
    training_subset,
)
from retrievers.types import Ranking

WH_WORDS = ("what", "who", "whom", "whose", "when", "where", "why", "how", "which")
ROUTING_STATISTICS = ("top1_z", "margin", "gap")
ESTIMATORS = ("logreg", "gbdt")
_TOKEN = re.compile(r"\w+", re.UNICODE)


def score_distribution_stats(ranking: Ranking, depth: int | None = None) -> dict[str, np.ndarray]:
    """Per-query statistics of one ranking's top-``depth`` scores (each float [Q]).

    ``top1``, ``gap`` (top1 - top2), ``mean``, ``std``, ``top1_z``
    ((top1 - mean) / std), ``margin`` ((top1 - top2) / (top1 - last)),
    ``entropy`` (of softmax over the z-scored list, divided by log n so it lies
    in [0, 1]), ``n`` (number of results).  Empty or constant lists give 0.
    """
    r = ranking if depth is None else ranking.top(depth)
    valid = r.ids >= 0
    s = np.where(valid, r.scores.astype(np.float64), 0.0)
    n = valid.sum(axis=1)
    nn = np.maximum(n, 1)
    top1 = np.where(n > 0, s[:, 0], 0.0)
    top2 = np.where(n > 1, s[:, 1] if s.shape[1] > 1 else 0.0, top1)
    last = np.where(n > 0, s[np.arange(len(s)), np.maximum(n - 1, 0)], 0.0)
    mean = s.sum(axis=1) / nn
    std = np.sqrt((np.where(valid, s - mean[:, None], 0.0) ** 2).sum(axis=1) / nn)
    safe_std = np.where(std > 0, std, 1.0)
    z = np.where(valid, (s - mean[:, None]) / safe_std[:, None], -np.inf)
    z = np.where(std[:, None] > 0, z, np.where(valid, 0.0, -np.inf))
    zmax = np.where(n > 0, z.max(axis=1, initial=-np.inf), 0.0)
    e = np.where(valid, np.exp(z - zmax[:, None]), 0.0)
    p = e / np.maximum(e.sum(axis=1, keepdims=True), 1e-300)
    ent = -(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0)).sum(axis=1)
    ent = np.where(n > 1, ent / np.log(np.maximum(n, 2)), 0.0)
    span = top1 - last
    return {
        "top1": top1,
        "gap": top1 - top2,
        "mean": mean,
        "std": std,
        "top1_z": np.where(std > 0, (top1 - mean) / safe_std, 0.0),
        "margin": np.where(span > 0, (top1 - top2) / np.where(span > 0, span, 1.0), 0.0),
        "entropy": ent,
        "n": n.astype(np.float64),
    }


def query_features(query_texts: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """Features of the query text alone: log #tokens, log #chars, wh-word one-hot."""
    rows = []
    for text in query_texts:
        toks = _TOKEN.findall(text.lower())
        first_wh = next((t for t in toks if t in WH_WORDS), "")
        rows.append([np.log1p(len(toks)), np.log1p(len(text))] + [float(first_wh == w) for w in WH_WORDS])
    names = ["q_log_tokens", "q_log_chars"] + [f"q_wh_{w}" for w in WH_WORDS]
    return np.asarray(rows, dtype=np.float64).reshape(len(query_texts), len(names)), names


def routing_features(
    query_texts: Sequence[str], rankings: Sequence[Ranking], depth: int, overlap_depth: int = 10
) -> tuple[np.ndarray, list[str]]:
    """Feature matrix [Q, F] for routing (query, per-member distribution, agreement)."""
    qf, names = query_features(query_texts)
    cols = [qf]
    for m, r in enumerate(rankings):
        stats = score_distribution_stats(r, depth)
        for key, val in stats.items():
            cols.append(val[:, None])
            names.append(f"m{m}_{key}")
    for a in range(len(rankings)):
        for b in range(a + 1, len(rankings)):
            ia, ib = rankings[a].ids[:, :overlap_depth], rankings[b].ids[:, :overlap_depth]
            inter = np.array(
                [len(np.intersect1d(x[x >= 0], y[y >= 0])) for x, y in zip(ia, ib)], dtype=np.float64
            )
            cols.append((inter / overlap_depth)[:, None])
            names.append(f"m{a}_m{b}_overlap@{overlap_depth}")
            agree = (ia[:, 0] == ib[:, 0]) & (ia[:, 0] >= 0)
            cols.append(agree.astype(np.float64)[:, None])
            names.append(f"m{a}_m{b}_top1_agree")
    return np.concatenate(cols, axis=1), names


def route_by_statistic(rankings: Sequence[Ranking], statistic: str = "top1_z", depth: int | None = None) -> np.ndarray:
    """int [Q]: per query, the member with the largest ``statistic`` (ties → the first member)."""
    if statistic not in ROUTING_STATISTICS:
        raise UserError(f"route-stat: unknown statistic {statistic!r} (choose from {', '.join(ROUTING_STATISTICS)})")
    values = np.stack([score_distribution_stats(r, depth)[statistic] for r in rankings], axis=0)
    return np.argmax(values, axis=0)


def select_rankings(rankings: Sequence[Ranking], choice: np.ndarray, k: int) -> Ranking:
    """Per query q, the top-``k`` of ``rankings[choice[q]]`` (padded with -1 / -inf)."""
    depth = max(r.depth for r in rankings)
    ids = np.full((len(choice), depth), -1, dtype=np.int64)
    scores = np.full((len(choice), depth), -np.inf, dtype=np.float32)
    for m, r in enumerate(rankings):
        rows = np.nonzero(choice == m)[0]
        ids[rows, : r.depth] = r.ids[rows]
        scores[rows, : r.depth] = r.scores[rows]
    scores[ids < 0] = -np.inf
    if depth < k:
        ids = np.pad(ids, ((0, 0), (0, k - depth)), constant_values=-1)
        scores = np.pad(scores, ((0, 0), (0, k - depth)), constant_values=-np.inf)
    return Ranking(ids[:, :k], scores[:, :k])


class StatisticalRouterRetriever(RetrieverBase):
    """Training-free router: per query, the member with the most peaked scores.

    ``statistic``: ``"top1_z"`` (default; z-score of the top-1 score within the
    member's top-``depth``), ``"margin"`` ((top1 - top2) / (top1 - last)) or
    ``"gap"`` (raw top1 - top2; only meaningful for members on one scale).
    """

    method = "route-stat"

    def __init__(self, members: Sequence[Retriever], statistic: str = "top1_z", depth: int = 100):
        self.members = check_members(members, "route-stat", minimum=1)
        if statistic not in ROUTING_STATISTICS:
            raise UserError(f"route-stat: unknown statistic {statistic!r} (choose from {', '.join(ROUTING_STATISTICS)})")
        self.statistic = statistic
        self.depth = check_positive_int(depth, "route-stat depth")
        self.name = fuse_name("route-stat", self.members)

    def index(self, corpus: Corpus) -> "StatisticalRouterRetriever":
        for m in self.members:
            m.index(corpus)
        return self

    def search(self, query_texts: Sequence[str], k: int) -> Ranking:
        k = check_positive_int(k, "route-stat search k")
        return search_fused(self.members, query_texts, max(self.depth, k), k, self.fuse)

    def fuse(self, query_texts: Sequence[str], rankings: Sequence[Ranking], k: int) -> Ranking:
        choice = route_by_statistic(rankings, self.statistic, self.depth)
        return select_rankings(rankings, choice, k)

    def to_dict(self) -> dict:
        return {
            "method": self.method,
            "name": self.name,
            "statistic": self.statistic,
            "depth": self.depth,
            "members": [member_config(m) for m in self.members],
        }


class RouterRetriever(RetrieverBase):
    """Learned per-query router (see module docstring).

    Parameters
    ----------
    members: already-constructed retrievers (at least two).
    estimator: ``"logreg"`` (standardized features + logistic regression) or
        ``"gbdt"`` (histogram gradient boosting).
    depth: members are searched to this depth for features and fusion.
    max_train_queries / train_corpus_size: sampling of the training split, see
        :func:`retrievers.pooling.training_subset` (default corpus size: the
        ReQA SQuAD dev index, 10,250 sentences; ``None``: all of it).
    train_sample_seed: seeds the sampling of the training split (default: ``seed``).
    seed: seeds the sampling (unless ``train_sample_seed``) and the estimator.

    ``fit(train_dataset)`` indexes the *training* corpus with the members and
    searches the training queries; ``index(corpus)`` then re-indexes the
    members on the evaluation corpus.
    """

    method = "route"
    learned = True

    def __init__(
        self,
        members: Sequence[Retriever],
        estimator: str = "logreg",
        depth: int = 100,
        max_train_queries: int | None = 20000,
        train_corpus_size: int | None = 10250,
        train_sample_seed: int | None = None,
        seed: int = 0,
    ):
        self.members = check_members(members, "route", minimum=2)
        if estimator not in ESTIMATORS:
            raise UserError(f"route: unknown estimator {estimator!r} (choose from {', '.join(ESTIMATORS)})")
        self.estimator = estimator
        self.depth = check_positive_int(depth, "route depth")
        self.max_train_queries = None if max_train_queries is None else check_positive_int(max_train_queries, "route max_train_queries")
        self.train_corpus_size = None if train_corpus_size is None else check_positive_int(train_corpus_size, "route train_corpus_size")
        self.seed = int(seed)
        self.train_sample_seed = None if train_sample_seed is None else int(train_sample_seed)
        self.name = fuse_name("route", self.members)

    # -- estimator API -------------------------------------------------
    def fit(self, dataset: Dataset) -> "RouterRetriever":
        check_training_split(dataset, "route")
        corpus, queries = training_subset(
            dataset,
            self.max_train_queries,
            self.train_corpus_size,
            self.seed if self.train_sample_seed is None else self.train_sample_seed,
        )
        for m in tqdm(self.members, desc="route: index train corpus", unit="retriever"):
            m.index(corpus)
        rankings = search_members(self.members, queries.texts, self.depth)
        return self.fit_rankings(queries.texts, rankings, training_gold(queries, corpus, rankings))

    def fit_rankings(
        self, query_texts: Sequence[str], rankings: Sequence[Ranking], gold: Sequence[np.ndarray]
    ) -> "RouterRetriever":
        """Fit from precomputed member rankings of training queries and their gold rows."""
        if len(rankings) != len(self.members):
            raise ValueError(f"route: {len(rankings)} rankings for {len(self.members)} members")
        x, names = routing_features(query_texts, [r.top(self.depth) for r in rankings], self.depth)
        rr = np.stack([reciprocal_rank_of_gold(r.top(self.depth), gold) for r in rankings], axis=1)  # [Q, M]
        srt = np.sort(rr, axis=1)
        weight = srt[:, -1] - srt[:, -2]
        keep = weight > 0
        labels = np.argmax(rr, axis=1)
        self.feature_names_ = names
        self.n_train_queries_ = int(len(query_texts))
        self.n_routed_queries_ = int(keep.sum())
        # majority member by total reciprocal rank: the answer when training carries no signal
        self.default_member_ = int(np.argmax(rr.sum(axis=0)))
        classes = np.unique(labels[keep])
        if len(classes) < 2:
            self.model_ = None
            self.classes_ = classes.astype(int).tolist() or [self.default_member_]
            return self
        self.classes_ = classes.astype(int).tolist()
        self.model_ = self._make_estimator()
        xs, ys, ws = x[keep], labels[keep], weight[keep]
        if self.estimator == "logreg":
            self.model_.fit(xs, ys, logisticregression__sample_weight=ws / ws.mean())
        else:
            self.model_.fit(xs, ys, sample_weight=ws / ws.mean())
        return self

    def _make_estimator(self):
        if self.estimator == "logreg":
            from sklearn.linear_model import LogisticRegression
            from sklearn.pipeline import make_pipeline
            from sklearn.preprocessing import StandardScaler

            return make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=2000, random_state=self.seed))
        from sklearn.ensemble import HistGradientBoostingClassifier

        return HistGradientBoostingClassifier(max_iter=200, learning_rate=0.05, random_state=self.seed)

    def predict_members(self, query_texts: Sequence[str], rankings: Sequence[Ranking]) -> np.ndarray:
        """int [Q]: the member chosen for each query."""
        if not hasattr(self, "classes_"):
            raise UserError(f"{self.name}: call fit(train_dataset) before search")
        if self.model_ is None:
            return np.full(len(query_texts), self.classes_[0], dtype=np.int64)
        x, _ = routing_features(query_texts, [r.top(self.depth) for r in rankings], self.depth)
        return np.asarray(self.model_.predict(x), dtype=np.int64)

    # -- retriever API -------------------------------------------------
    def index(self, corpus: Corpus) -> "RouterRetriever":
        for m in self.members:
            m.index(corpus)
        return self

    def search(self, query_texts: Sequence[str], k: int) -> Ranking:
        k = check_positive_int(k, "route search k")
        return search_fused(self.members, query_texts, max(self.depth, k), k, self.fuse)

    def fuse(self, query_texts: Sequence[str], rankings: Sequence[Ranking], k: int) -> Ranking:
        return select_rankings(rankings, self.predict_members(query_texts, rankings), k)

    # -- saving --------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "method": self.method,
            "name": self.name,
            "estimator": self.estimator,
            "depth": self.depth,
            "max_train_queries": self.max_train_queries,
            "train_corpus_size": self.train_corpus_size,
            "train_sample_seed": self.train_sample_seed,
            "seed": self.seed,
            "members": [member_config(m) for m in self.members],
        }

    def save(self, directory: str | Path) -> None:
        """Write ``config.json`` (params, feature names, fitted state) and, for gbdt, ``model.joblib``."""
        if not hasattr(self, "classes_"):
            raise UserError(f"{self.name}: nothing to save, call fit first")
        directory = Path(directory)
        state = {
            "config": self.to_dict(),
            "feature_names": self.feature_names_,
            "classes": self.classes_,
            "default_member": self.default_member_,
            "n_train_queries": self.n_train_queries_,
            "n_routed_queries": self.n_routed_queries_,
            "has_model": self.model_ is not None,
        }
        if self.model_ is not None and self.estimator == "logreg":
            scaler, lr = self.model_[0], self.model_[-1]
            state["logreg"] = {
                "mean": scaler.mean_.tolist(),
                "scale": scaler.scale_.tolist(),
                "coef": lr.coef_.tolist(),
                "intercept": lr.intercept_.tolist(),
                "classes": lr.classes_.tolist(),
            }
        elif self.model_ is not None:
            import joblib

            from data.io import atomic_path

            with atomic_path(directory / "model.joblib") as tmp:
                joblib.dump(self.model_, tmp)
        write_json(directory / "config.json", state)

    @classmethod
    def load(cls, directory: str | Path, members: Sequence[Retriever]) -> "RouterRetriever":
        directory = Path(directory)
        try:
            state = json.loads((directory / "config.json").read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise UserError(f"{directory / 'config.json'}: cannot read router state ({e})") from None
        cfg = state["config"]
        obj = cls(
            members,
            estimator=cfg["estimator"],
            depth=cfg["depth"],
            max_train_queries=cfg["max_train_queries"],
            train_corpus_size=cfg["train_corpus_size"],
            train_sample_seed=cfg.get("train_sample_seed"),
            seed=cfg["seed"],
        )
        obj.feature_names_ = state["feature_names"]
        obj.classes_ = state["classes"]
        obj.default_member_ = state["default_member"]
        obj.n_train_queries_ = state["n_train_queries"]
        obj.n_routed_queries_ = state["n_routed_queries"]
        obj.model_ = None
        if state["has_model"] and cfg["estimator"] == "logreg":
            from sklearn.linear_model import LogisticRegression
            from sklearn.pipeline import make_pipeline
            from sklearn.preprocessing import StandardScaler

            lr_state = state["logreg"]
            scaler = StandardScaler()
            scaler.mean_ = np.asarray(lr_state["mean"])
            scaler.scale_ = np.asarray(lr_state["scale"])
            scaler.var_ = scaler.scale_**2
            scaler.n_features_in_ = len(scaler.mean_)
            lr = LogisticRegression()
            lr.coef_ = np.asarray(lr_state["coef"])
            lr.intercept_ = np.asarray(lr_state["intercept"])
            lr.classes_ = np.asarray(lr_state["classes"])
            lr.n_features_in_ = lr.coef_.shape[1]
            obj.model_ = make_pipeline(scaler, lr)
        elif state["has_model"]:
            import joblib

            obj.model_ = joblib.load(directory / "model.joblib")
        return obj
