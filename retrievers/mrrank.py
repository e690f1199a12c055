"""MrRank: a learned re-ranker over the pooled results of several retrievers.

Khamnuansin, Chalothorn & Chuangsuwanich (2024), "MrRank: Improving Question
Answering Retrieval System through Multi-Result Ranking Model",
arXiv:2406.05733.  Off-the-shelf retrievers (a neural one and BM25, or more)
produce candidate lists; a small network scores every pooled candidate from
the ranking information of *all* retrievers and is trained pairwise with the
RankNet loss (Burges et al., 2005, "Learning to rank using gradient
descent"), with training pairs restricted to (gold, non-gold) — the paper's
objective that favours the answer-containing sentence and drops the
unnecessary non-gold/non-gold pairs.

This implementation (features are ours; the paper's network sees the
retrievers' ranking information):

- pool: the union of each member's top-``depth`` candidates;
- features per (query, candidate), for every member m: presence flag,
  min-max and z-score normalized score, raw score, reciprocal rank, log rank
  (missing candidates get the member's normalized minimum / last raw score /
  rank ``depth``), the best min-max score of *other* pooled candidates from
  the same paragraph, and the member's top-1 z-score and margin for the query;
  plus the fraction of members that retrieved the candidate, the number of
  pooled candidates from its paragraph, and cheap lexical features: query
  token overlap with the sentence and with its paragraph (plain and
  idf-weighted, idf from the indexed corpus), query-bigram overlap, sentence
  length, whether the sentence has a digit, and the query's length and
  wh-word.  Words come from the corpus language's tokenizer
  (:func:`word_tokenizer`: PyThaiNLP ``newmm`` for Thai, which writes no
  spaces between words; ``\\w+`` runs otherwise), with that language's stop
  words (PyThaiNLP's Thai list) and question words (Thai ones mapped to the
  English wh-word features: อะไร -> what, ใคร -> who, ...);
- scorer: an MLP (features standardized with training statistics), trained
  with Adam on RankNet loss ``log(1 + exp(-(s_gold - s_neg)))`` over pairs of
  the gold candidate with *hard* negatives (candidates some member ranked
  above the gold) plus ``n_random_negatives`` other pooled candidates;
  each query's pairs share weight 1 (every query counts once, as in MRR;
  measured +0.015 dev MRR over weighting every pair alike, which lets queries
  with many hard negatives dominate); training queries whose gold is not in
  the pool are skipped; the epoch with
  the best MRR on a held-out ``validation_fraction`` of training queries is
  kept.

``fit(train_dataset)`` indexes the *training* corpus with the members and
searches training queries (evaluation splits are refused); ``index(corpus)``
then indexes the members on the evaluation corpus and ``search`` re-ranks.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Sequence

import numpy as np
from data.progress import tqdm  # a line every 30 s when stderr is not a terminal

from data.errors import UserError
from data.io import atomic_path, write_json
from data.types import Corpus, Dataset
from retrievers.base import Retriever, RetrieverBase
from retrievers.pooling import (
    Pool,
    check_members,
    check_positive_int,
    check_training_split,
    fuse_name,
    gold_mask,
    member_config,
    pool_rankings,
    search_fused,
    search_members,
    training_gold,
    training_subset,
)
from retrievers.routing import WH_WORDS, score_distribution_stats
from retrievers.score_fusion import normalize_scores
from retrievers.types import Ranking

_TOKEN = re.compile(r"\w+", re.UNICODE)
_DIGIT = re.compile(r"\d")
STOPWORDS = frozenset(
    """a an the of in on at to for from by with and or but is are was were be been being do does did
    what which who whom whose when where why how that this these those it its as into than then there
    their they he she his her him we you i not no yes can could would should will shall may might
    has have had about after before over under also such other one""".split()
)


# Thai question words -> the English wh-word feature they stand for (Thai puts them anywhere in the question)
THAI_WH_WORDS = {
    "อะไร": "what", "ใคร": "who", "ของใคร": "whose", "เมื่อไร": "when", "เมื่อไหร่": "when", "เมื่อใด": "when",
    "ที่ไหน": "where", "ที่ใด": "where", "แห่งใด": "where", "ทำไม": "why", "เพราะอะไร": "why", "อย่างไร": "how",
    "ยังไง": "how", "เท่าไร": "how", "เท่าไหร่": "how", "กี่": "how", "ไหน": "which", "ใด": "which",
}


def tokenize(text: str) -> list[str]:
    """Lower-cased ``\\w+`` runs (languages that separate words with spaces)."""
    return _TOKEN.findall(text.lower())


def thai_tokenize(text: str) -> list[str]:
    """Lower-cased PyThaiNLP ``newmm`` words (:func:`data.thai.thai_word_tokens`), punctuation-only tokens dropped."""
    from data.thai import thai_word_tokens

    return [t.lower() for t in thai_word_tokens(text) if _TOKEN.search(t)]


def word_tokenizer(language: str):
    """The word tokenizer of the lexical features for a corpus language (ISO 639-1)."""
    return thai_tokenize if language == "th" else tokenize


def stopwords_for(language: str) -> frozenset:
    """Stop words for the content-word overlap: English, plus PyThaiNLP's Thai list for Thai."""
    if language == "th":
        from pythainlp.corpus import thai_stopwords

        return STOPWORDS | frozenset(thai_stopwords())
    return STOPWORDS


def question_word(tokens: Sequence[str], language: str) -> str:
    """The query's wh-word feature: the first English wh-word, or for Thai the first Thai question word's."""
    if language == "th":
        return next((THAI_WH_WORDS[t] for t in tokens if t in THAI_WH_WORDS), next((t for t in tokens if t in WH_WORDS), ""))
    return next((t for t in tokens if t in WH_WORDS), "")


class Lexicon:
    """Token sets and idf of one corpus, for the lexical features (words from the corpus language's tokenizer)."""

    def __init__(self, corpus: Corpus):
        self.language = getattr(corpus, "language", "en") or "en"
        self.tokenize = word_tokenizer(self.language)
        self.stopwords = stopwords_for(self.language)
        tokenize = self.tokenize
        self.sentence_tokens = [tokenize(t) for t in tqdm(corpus.texts, desc="mrrank: tokenize", unit="text", mininterval=2)]
        self.sentence_sets = [frozenset(t) for t in self.sentence_tokens]
        self.sentence_bigrams = [frozenset(zip(t, t[1:])) for t in self.sentence_tokens]
        self.paragraph_ids = np.asarray(corpus.paragraph_ids, dtype=np.int64)
        self.has_digit = np.array([bool(_DIGIT.search(t)) for t in corpus.texts], dtype=np.float64)
        self.log_length = np.log1p(np.array([len(t) for t in self.sentence_tokens], dtype=np.float64))
        context_sets: dict[int, frozenset] = {}
        for row, pid in enumerate(self.paragraph_ids.tolist()):
            if pid not in context_sets:
                ctx = corpus.contexts[row] if corpus.contexts else ""
                context_sets[pid] = frozenset(tokenize(ctx)) | self.sentence_sets[row]
            elif not self.sentence_sets[row] <= context_sets[pid]:
                context_sets[pid] = context_sets[pid] | self.sentence_sets[row]
        self.context_sets = context_sets
        df: dict[str, int] = {}
        for s in self.sentence_sets:
            for t in s:
                df[t] = df.get(t, 0) + 1
        n = max(len(self.sentence_sets), 1)
        self.n = n
        self.idf = {t: math.log(1.0 + (n - d + 0.5) / (d + 0.5)) for t, d in df.items()}
        self.unseen_idf = math.log(1.0 + (n + 0.5) / 0.5)


LEXICAL_FEATURES = (
    "lex_overlap",
    "lex_idf_overlap",
    "lex_ctx_overlap",
    "lex_ctx_idf_overlap",
    "lex_bigram_overlap",
    "lex_log_length",
    "lex_has_digit",
    "q_log_tokens",
) + tuple(f"q_wh_{w}" for w in WH_WORDS)


def lexical_features(query_texts: Sequence[str], pool_ids: np.ndarray, lexicon: Lexicon) -> np.ndarray:
    """float [Q, P, len(LEXICAL_FEATURES)] (zeros at padding)."""
    n_q, width = pool_ids.shape
    out = np.zeros((n_q, width, len(LEXICAL_FEATURES)), dtype=np.float64)
    idf, unseen = lexicon.idf, lexicon.unseen_idf
    tokenize, stopwords, language = lexicon.tokenize, lexicon.stopwords, lexicon.language
    for q in tqdm(range(n_q), desc="mrrank: lexical features", unit="query", mininterval=2, disable=n_q < 2000):
        toks = tokenize(query_texts[q])
        content = [t for t in dict.fromkeys(toks) if t not in stopwords] or list(dict.fromkeys(toks))
        weights = [idf.get(t, unseen) for t in content]
        total_w = sum(weights) or 1.0
        n_content = max(len(content), 1)
        bigrams = set(zip(toks, toks[1:]))
        n_bi = max(len(bigrams), 1)
        first_wh = question_word(toks, language)
        q_part = [math.log1p(len(toks))] + [float(first_wh == w) for w in WH_WORDS]
        for p in range(width):
            row = int(pool_ids[q, p])
            if row < 0:
                continue
            sset = lexicon.sentence_sets[row]
            cset = lexicon.context_sets[int(lexicon.paragraph_ids[row])]
            hit_s = [t in sset for t in content]
            hit_c = [t in cset for t in content]
            out[q, p, :7] = (
                sum(hit_s) / n_content,
                sum(w for w, h in zip(weights, hit_s) if h) / total_w,
                sum(hit_c) / n_content,
                sum(w for w, h in zip(weights, hit_c) if h) / total_w,
                len(bigrams & lexicon.sentence_bigrams[row]) / n_bi if bigrams else 0.0,
                lexicon.log_length[row],
                lexicon.has_digit[row],
            )
            out[q, p, 7:] = q_part
    return out


def _sibling_max(group_keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """For each element, the max of ``values`` over the *other* elements with the same key (0 if none)."""
    n = len(values)
    if n == 0:
        return np.zeros(0)
    order = np.lexsort((-values, group_keys))
    k_sorted, v_sorted = group_keys[order], values[order]
    start = np.ones(n, dtype=bool)
    start[1:] = k_sorted[1:] != k_sorted[:-1]
    group_index = np.cumsum(start) - 1
    first_pos = np.nonzero(start)[0]
    best = v_sorted[first_pos][group_index]
    sizes = np.diff(np.append(first_pos, n))
    second_pos = first_pos + 1
    second = np.where(sizes > 1, v_sorted[np.minimum(second_pos, n - 1)], 0.0)[group_index]
    is_first = np.zeros(n, dtype=bool)
    is_first[first_pos] = True
    res_sorted = np.where(is_first, second, best)
    res_sorted = np.where(sizes[group_index] > 1, res_sorted, 0.0)
    out = np.empty(n)
    out[order] = res_sorted
    return out


def pool_features(
    pool: Pool, rankings: Sequence[Ranking], paragraph_ids: np.ndarray, depth: int
) -> tuple[np.ndarray, list[str]]:
    """float [Q, P, F] ranking features of every pooled candidate (see module docstring)."""
    n_members, n_q, width = pool.ranks.shape
    valid = pool.valid
    q_idx, p_idx = np.nonzero(valid)
    para = np.full((n_q, width), -1, dtype=np.int64)
    para[q_idx, p_idx] = paragraph_ids[pool.ids[q_idx, p_idx]]
    n_para = int(paragraph_ids.max()) + 2 if len(paragraph_ids) else 1
    group = q_idx.astype(np.int64) * n_para + para[q_idx, p_idx]
    cols, names = [], []
    log_depth = math.log1p(depth)
    for m, r in enumerate(rankings):
        present = pool.present[m]
        ranks = pool.ranks[m]
        mm_list, _ = normalize_scores(r.scores, r.ids >= 0, "minmax")
        z_list, z_floor = normalize_scores(r.scores, r.ids >= 0, "zscore")
        n_listed = (r.ids >= 0).sum(axis=1)
        last_raw = np.where(n_listed > 0, r.scores[np.arange(n_q), np.maximum(n_listed - 1, 0)].astype(np.float64), 0.0)
        mm = np.zeros((n_q, width))
        z = np.broadcast_to(z_floor[:, None], (n_q, width)).copy()
        raw = np.broadcast_to(last_raw[:, None], (n_q, width)).copy()
        qi, pi = np.nonzero(present)
        mm[qi, pi] = mm_list[qi, ranks[qi, pi]]
        z[qi, pi] = z_list[qi, ranks[qi, pi]]
        raw[qi, pi] = r.scores[qi, ranks[qi, pi]]
        safe_ranks = np.maximum(ranks, 0)
        rr = np.where(present, 1.0 / (1.0 + safe_ranks), 0.0)
        lr = np.where(present, np.log1p(safe_ranks) / log_depth, 1.0)
        sib = np.zeros((n_q, width))
        sib[q_idx, p_idx] = _sibling_max(group, mm[q_idx, p_idx])
        stats = score_distribution_stats(r, depth)
        cols += [present.astype(np.float64), mm, z, raw, rr, lr, sib,
                 np.broadcast_to(stats["top1_z"][:, None], (n_q, width)),
                 np.broadcast_to(stats["margin"][:, None], (n_q, width))]
        names += [f"m{m}_{x}" for x in ("present", "minmax", "zscore", "raw", "recip_rank", "log_rank",
                                        "paragraph_sibling_minmax", "top1_z", "margin")]
    frac = pool.present.mean(axis=0)
    para_count = np.zeros((n_q, width))
    if len(group):
        _, inv, counts = np.unique(group, return_inverse=True, return_counts=True)
        para_count[q_idx, p_idx] = np.log(counts[inv])
    cols += [frac, para_count]
    names += ["members_present_fraction", "paragraph_pool_log_count"]
    feats = np.stack(cols, axis=-1)
    feats[~valid] = 0.0
    return feats, names


class _torch_threads:
    """Run a block with ``n`` torch CPU threads (a tiny MLP is fastest on one; many threads
    on a busy machine spin against each other), restoring the previous setting."""

    def __init__(self, n: int):
        self.n = n

    def __enter__(self):
        import torch

        self.previous = torch.get_num_threads()
        torch.set_num_threads(self.n)

    def __exit__(self, *exc):
        import torch

        torch.set_num_threads(self.previous)
        return False


def _make_mlp(n_features: int, hidden: Sequence[int], dropout: float):
    import torch.nn as nn

    layers, width = [], n_features
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        if dropout > 0:
            layers.append(nn.Dropout(dropout))
        width = h
    layers.append(nn.Linear(width, 1))
    return nn.Sequential(*layers)


class MrRankRetriever(RetrieverBase):
    """Learned multi-retriever re-ranker (Khamnuansin et al., 2024); see module docstring.

    Parameters
    ----------
    members: already-constructed retrievers (the first is the main one; order
        only matters for feature names).
    depth: top-``depth`` of every member is pooled and re-ranked.
    hidden: MLP hidden layer sizes.
    epochs, batch_size, learning_rate, weight_decay, dropout: training.
    n_random_negatives: non-hard negatives sampled per training query.
    max_train_queries / train_corpus_size: sampling of the training split
        (:func:`retrievers.pooling.training_subset`); the default corpus size
        is that of the ReQA SQuAD dev index (10,250 sentences), so ranks and
        score distributions seen in training match evaluation (``None``: the
        whole training corpus).
    validation_fraction: training queries held out to pick the best epoch.
    lexical: include the lexical features.
    pair_weighting: ``"pair"`` (every training pair alike) or ``"query"``
        (each query's pairs share weight 1, so every query counts once).
    train_sample_seed: seeds the sampling of the training split (default:
        ``seed``; fix it to replicate training over one sample).
    seed: seeds sampling (unless ``train_sample_seed``), initialization, the
        validation split, negatives and batching.
    """

    method = "mrrank"
    learned = True

    def __init__(
        self,
        members: Sequence[Retriever],
        depth: int = 30,
        hidden: Sequence[int] | str = (64, 32),  # a spec string too: "64,32" or "64x32"
        epochs: int = 8,
        batch_size: int = 1024,
        learning_rate: float = 1e-3,
        weight_decay: float = 1e-5,
        dropout: float = 0.0,
        n_random_negatives: int = 5,
        max_train_queries: int | None = 20000,
        train_corpus_size: int | None = 10250,
        validation_fraction: float = 0.1,
        lexical: bool = True,
        pair_weighting: str = "query",
        train_sample_seed: int | None = None,
        seed: int = 0,
    ):
        self.members = check_members(members, "mrrank", minimum=1)
        self.depth = check_positive_int(depth, "mrrank depth")
        if isinstance(hidden, str):
            hidden = [h for h in hidden.replace(",", " ").replace("x", " ").split() if h]
        self.hidden = [check_positive_int(h, "mrrank hidden") for h in hidden]
        self.epochs = check_positive_int(epochs, "mrrank epochs")
        self.batch_size = check_positive_int(batch_size, "mrrank batch_size")
        self.learning_rate = float(learning_rate)
        self.weight_decay = float(weight_decay)
        self.dropout = float(dropout)
        if not (self.learning_rate > 0 and self.weight_decay >= 0 and 0 <= self.dropout < 1):
            raise UserError(f"mrrank: bad learning_rate/weight_decay/dropout {learning_rate!r}/{weight_decay!r}/{dropout!r}")
        self.n_random_negatives = int(n_random_negatives)
        if self.n_random_negatives < 0:
            raise UserError(f"mrrank n_random_negatives: expected >= 0, got {n_random_negatives!r}")
        self.max_train_queries = None if max_train_queries is None else check_positive_int(max_train_queries, "mrrank max_train_queries")
        self.train_corpus_size = None if train_corpus_size is None else check_positive_int(train_corpus_size, "mrrank train_corpus_size")
        self.validation_fraction = float(validation_fraction)
        if not 0 <= self.validation_fraction < 1:
            raise UserError(f"mrrank validation_fraction: expected in [0, 1), got {validation_fraction!r}")
        self.lexical = bool(lexical) if not isinstance(lexical, str) else lexical.lower() in ("1", "true", "yes")
        if pair_weighting not in ("pair", "query"):
            raise UserError(f"mrrank pair_weighting: expected 'pair' or 'query', got {pair_weighting!r}")
        self.pair_weighting = pair_weighting
        self.seed = int(seed)
        self.train_sample_seed = None if train_sample_seed is None else int(train_sample_seed)
        self.name = fuse_name("mrrank", self.members)

    # -- features ------------------------------------------------------
    def index_features(self, corpus: Corpus) -> "MrRankRetriever":
        """Prepare corpus-side features (paragraph ids, token sets, idf) without indexing the members."""
        self._paragraph_ids = np.asarray(corpus.paragraph_ids, dtype=np.int64)
        self._lexicon = Lexicon(corpus) if self.lexical else None
        return self

    def features(self, query_texts: Sequence[str], rankings: Sequence[Ranking]) -> tuple[Pool, np.ndarray, list[str]]:
        """Pool the members' top-``depth`` and compute features ``[Q, P, F]``."""
        if not hasattr(self, "_paragraph_ids"):
            raise UserError(f"{self.name}: call index(corpus) before search")
        if len(rankings) != len(self.members):
            raise ValueError(f"mrrank: {len(rankings)} rankings for {len(self.members)} members")
        rankings = [r.top(self.depth) for r in rankings]
        pool = pool_rankings(rankings)
        feats, names = pool_features(pool, rankings, self._paragraph_ids, self.depth)
        if self._lexicon is not None:
            lex = lexical_features(query_texts, pool.ids, self._lexicon)
            feats = np.concatenate([feats, lex], axis=-1)
            names = names + list(LEXICAL_FEATURES)
        return pool, feats.astype(np.float32), names

    # -- estimator API -------------------------------------------------
    def fit(self, dataset: Dataset) -> "MrRankRetriever":
        check_training_split(dataset, "mrrank")
        corpus, queries = training_subset(
            dataset,
            self.max_train_queries,
            self.train_corpus_size,
            self.seed if self.train_sample_seed is None else self.train_sample_seed,
        )
        for m in tqdm(self.members, desc="mrrank: index train corpus", unit="retriever"):
            m.index(corpus)
        rankings = search_members(self.members, queries.texts, self.depth)
        self.index_features(corpus)
        return self.fit_rankings(queries.texts, rankings, training_gold(queries, corpus, rankings))

    def fit_rankings(
        self, query_texts: Sequence[str], rankings: Sequence[Ranking], gold: Sequence[np.ndarray]
    ) -> "MrRankRetriever":
        """Train from precomputed member rankings of training queries (corpus set by ``index_features``)."""
        with _torch_threads(1):
            return self._fit_rankings(query_texts, rankings, gold)

    def _fit_rankings(self, query_texts, rankings, gold) -> "MrRankRetriever":
        import torch

        pool, feats, names = self.features(query_texts, rankings)
        is_gold = gold_mask(pool.ids, gold)
        has_gold = is_gold.any(axis=1)
        rng = np.random.default_rng(self.seed)
        trainable = np.nonzero(has_gold)[0]
        if len(trainable) == 0:
            raise UserError(f"{self.name}: no training query has its gold candidate in the pool (depth {self.depth})")
        rng.shuffle(trainable)
        n_val = int(round(self.validation_fraction * len(trainable)))
        val_q, train_q = np.sort(trainable[:n_val]), np.sort(trainable[n_val:])
        if len(train_q) == 0:
            train_q, val_q = val_q, train_q

        valid = pool.valid
        x_rows = feats[valid]  # [N, F] every valid pooled candidate, row-major by query
        row_of = np.full(pool.ids.shape, -1, dtype=np.int64)
        row_of[valid] = np.arange(len(x_rows))
        mean = x_rows[row_of[train_q][valid[train_q]]].mean(axis=0)
        std = x_rows[row_of[train_q][valid[train_q]]].std(axis=0)
        std = np.where(std > 1e-6, std, 1.0)
        self.feature_mean_, self.feature_std_ = mean.astype(np.float32), std.astype(np.float32)
        self.feature_names_ = names
        x_all = torch.from_numpy((x_rows - self.feature_mean_) / self.feature_std_)

        pos, neg, weight = self._training_pairs(pool, is_gold, train_q, row_of, rng)
        torch.manual_seed(self.seed)
        generator = torch.Generator().manual_seed(self.seed)
        model = _make_mlp(x_all.shape[1], self.hidden, self.dropout)
        opt = torch.optim.Adam(model.parameters(), lr=self.learning_rate, weight_decay=self.weight_decay)
        pos_t, neg_t, w_t = torch.from_numpy(pos), torch.from_numpy(neg), torch.from_numpy(weight)
        best_state, best_mrr, history = None, -1.0, []
        for epoch in tqdm(range(self.epochs), desc="mrrank: train", unit="epoch"):
            model.train()
            perm = torch.randperm(len(pos_t), generator=generator)
            total = 0.0
            for start in range(0, len(perm), self.batch_size):
                b = perm[start : start + self.batch_size]
                diff = model(x_all[pos_t[b]]).squeeze(-1) - model(x_all[neg_t[b]]).squeeze(-1)
                w = w_t[b]
                loss = (torch.nn.functional.softplus(-diff) * w).sum() / w.sum()
                opt.zero_grad()
                loss.backward()
                opt.step()
                total += float(loss.detach()) * len(b)
            record = {"epoch": epoch + 1, "loss": total / max(len(pos_t), 1)}
            if len(val_q):
                record["val_mrr"] = self._pool_mrr(model, x_all, row_of, valid, is_gold, val_q)
                score = record["val_mrr"]
            else:
                score = -record["loss"]
            history.append(record)
            if score > best_mrr:
                best_mrr = score
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        model.load_state_dict(best_state)
        model.eval()
        self.model_ = model
        self.history_ = history
        self.n_train_queries_ = int(len(query_texts))
        self.n_trainable_queries_ = int(len(trainable))
        self.n_pairs_ = int(len(pos))
        return self

    def _training_pairs(self, pool: Pool, is_gold, train_q, row_of, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(gold row, negative row, weight) pairs: hard negatives + ``n_random_negatives`` random others per query.

        ``pair_weighting="query"`` weights each pair by 1 / (pairs of its query), so every
        training query counts once, as in MRR; ``"pair"`` weights all pairs alike.
        """
        big = np.iinfo(np.int64).max
        ranks = np.where(pool.present, pool.ranks, big)  # [M, Q, P]
        pos, neg, weight = [], [], []
        for q in train_q:
            g = np.nonzero(is_gold[q])[0]
            n = np.nonzero(pool.valid[q] & ~is_gold[q])[0]
            if len(n) == 0:
                continue
            best_gold = ranks[:, q, g].min(axis=1)  # [M]
            hard = (ranks[:, q, n] < best_gold[:, None]).any(axis=0)
            chosen = n[hard]
            rest = n[~hard]
            if self.n_random_negatives and len(rest):
                chosen = np.concatenate([chosen, rng.choice(rest, size=min(self.n_random_negatives, len(rest)), replace=False)])
            n_pairs = len(g) * len(chosen)
            for gi in g:
                pos.append(np.full(len(chosen), row_of[q, gi]))
                neg.append(row_of[q, chosen])
                weight.append(np.full(len(chosen), 1.0 / n_pairs if self.pair_weighting == "query" else 1.0))
        if not pos:
            raise UserError(f"{self.name}: no training pairs (every pool holds only gold candidates)")
        return (
            np.concatenate(pos).astype(np.int64),
            np.concatenate(neg).astype(np.int64),
            np.concatenate(weight).astype(np.float32),
        )

    @staticmethod
    def _pool_mrr(model, x_all, row_of, valid, is_gold, queries) -> float:
        import torch

        model.eval()
        with torch.no_grad():
            s = model(x_all).squeeze(-1).numpy()
        model.train()
        scores = np.full(row_of.shape, -np.inf)
        scores[valid] = s
        sub, gold = scores[queries], is_gold[queries]
        best_gold = np.where(gold, sub, -np.inf).max(axis=1)
        rank = (sub > best_gold[:, None]).sum(axis=1)
        return float(np.mean(1.0 / (1.0 + rank)))

    def score_pool(self, query_texts: Sequence[str], rankings: Sequence[Ranking]) -> tuple[Pool, np.ndarray]:
        """MLP scores ``[Q, P]`` of the pooled candidates (-inf at padding)."""
        import torch

        if not hasattr(self, "model_"):
            raise UserError(f"{self.name}: call fit(train_dataset) before search")
        pool, feats, _ = self.features(query_texts, rankings)
        x = (feats[pool.valid] - self.feature_mean_) / self.feature_std_
        scores = np.full(pool.ids.shape, -np.inf, dtype=np.float64)
        with torch.no_grad(), _torch_threads(1):
            scores[pool.valid] = self.model_(torch.from_numpy(x.astype(np.float32))).squeeze(-1).numpy()
        return pool, scores

    # -- retriever API -------------------------------------------------
    def index(self, corpus: Corpus) -> "MrRankRetriever":
        for m in self.members:
            m.index(corpus)
        return self.index_features(corpus)

    def search(self, query_texts: Sequence[str], k: int) -> Ranking:
        k = check_positive_int(k, "mrrank search k")
        return search_fused(self.members, query_texts, max(self.depth, k), k, self.fuse)

    def fuse(self, query_texts: Sequence[str], rankings: Sequence[Ranking], k: int) -> Ranking:
        """Re-rank precomputed member rankings of the indexed corpus; top ``k``.

        Candidates beyond the members' top-``depth`` (only when ``k > depth``
        and the rankings are deeper) follow the re-ranked pool in RRF order.
        """
        from retrievers.pooling import rank_pool

        pool, scores = self.score_pool(query_texts, rankings)
        if max(r.depth for r in rankings) <= self.depth:  # per query, never on the batch's widest pool
            return rank_pool(pool.ids, scores, k)
        full = pool_rankings(rankings)
        rrf = np.where(full.present, 1.0 / (61.0 + np.maximum(full.ranks, 0)), 0.0).sum(axis=0)
        floor = np.where(np.isfinite(scores), scores, np.inf).min(axis=1, initial=np.inf)
        floor = np.where(np.isfinite(floor), floor, 0.0)
        fused = floor[:, None] - 2.0 + rrf  # rrf < 1 for fewer than 61 members
        for q in range(len(pool.ids)):
            row = pool.ids[q][pool.valid[q]]
            at = np.searchsorted(full.ids[q][full.valid[q]], row)
            fused[q, at] = scores[q][pool.valid[q]]
        return rank_pool(full.ids, fused, k)

    # -- saving --------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "method": self.method,
            "name": self.name,
            "depth": self.depth,
            "hidden": self.hidden,
            "epochs": self.epochs,
            "batch_size": self.batch_size,
            "learning_rate": self.learning_rate,
            "weight_decay": self.weight_decay,
            "dropout": self.dropout,
            "n_random_negatives": self.n_random_negatives,
            "max_train_queries": self.max_train_queries,
            "train_corpus_size": self.train_corpus_size,
            "validation_fraction": self.validation_fraction,
            "lexical": self.lexical,
            "pair_weighting": self.pair_weighting,
            "train_sample_seed": self.train_sample_seed,
            "seed": self.seed,
            "members": [member_config(m) for m in self.members],
        }

    def save(self, directory: str | Path) -> None:
        """Write ``config.json`` (params, feature names and standardization, training log) and ``model.pt``."""
        import torch

        if not hasattr(self, "model_"):
            raise UserError(f"{self.name}: nothing to save, call fit first")
        directory = Path(directory)
        with atomic_path(directory / "model.pt") as tmp:
            torch.save(self.model_.state_dict(), tmp)
        write_json(
            directory / "config.json",
            {
                "config": self.to_dict(),
                "feature_names": self.feature_names_,
                "feature_mean": self.feature_mean_.tolist(),
                "feature_std": self.feature_std_.tolist(),
                "history": self.history_,
                "n_train_queries": self.n_train_queries_,
                "n_trainable_queries": self.n_trainable_queries_,
                "n_pairs": self.n_pairs_,
            },
        )

    @classmethod
    def load(cls, directory: str | Path, members: Sequence[Retriever]) -> "MrRankRetriever":
        """Rebuild a fitted re-ranker saved by :meth:`save` (members must match the saved ones)."""
        import torch

        directory = Path(directory)
        try:
            state = json.loads((directory / "config.json").read_text(encoding="utf-8"))
            weights = torch.load(directory / "model.pt", map_location="cpu", weights_only=True)
        except (OSError, json.JSONDecodeError, RuntimeError) as e:
            raise UserError(f"{directory}: cannot read mrrank state ({e})") from None
        cfg = {k: v for k, v in state["config"].items() if k not in ("method", "name", "members")}
        if len(members) != len(state["config"]["members"]):
            raise UserError(f"{directory}: saved with {len(state['config']['members'])} members, got {len(members)}")
        obj = cls(members, **cfg)
        obj.feature_names_ = state["feature_names"]
        obj.feature_mean_ = np.asarray(state["feature_mean"], dtype=np.float32)
        obj.feature_std_ = np.asarray(state["feature_std"], dtype=np.float32)
        obj.history_ = state["history"]
        obj.n_train_queries_ = state["n_train_queries"]
        obj.n_trainable_queries_ = state["n_trainable_queries"]
        obj.n_pairs_ = state["n_pairs"]
        model = _make_mlp(len(obj.feature_names_), obj.hidden, obj.dropout)
        model.load_state_dict(weights)
        model.eval()
        obj.model_ = model
        return obj
