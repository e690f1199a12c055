"""squad_open (paragraph-level open-domain SQuAD) and the corpus-size sampler of the sweep."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data.errors import UserError
from data.open_domain import (
    build_squad_open,
    corpus_levels,
    gold_rows,
    parse_corpus_sizes,
    restrict_corpus,
    sample_training_questions,
)
from tests.conftest import DATA


@pytest.fixture(scope="module")
def open_dev():
    from data.registry import load_dataset

    return load_dataset("squad_open", "dev")


@pytest.fixture(scope="module")
def dev_json():
    with zipfile.ZipFile(DATA / "squad" / "dev-v1.1.json.zip") as z:
        return json.loads(z.read("dev-v1.1.json"))


def test_squad_open_dev_counts_and_layout(open_dev):
    corpus, queries = open_dev.corpus, open_dev.queries
    # data README: dev 2,067 paragraphs / 10,570 questions, train 18,896 paragraphs
    assert len(corpus) == 2067 + 18896 == 20963
    assert len(queries) == 10570 and len(set(queries.question_ids)) == 10570
    assert open_dev.level == "paragraph"
    assert corpus.texts == corpus.contexts == corpus.paragraph_texts
    assert np.array_equal(corpus.paragraph_ids, np.arange(20963))
    assert corpus.ids[0] == "dev-p0" and corpus.ids[2067] == "train-p0"
    assert any(k.endswith("train-v1.1.reconstructed.json.gz") for k in open_dev.sources)


def test_gold_is_the_question_paragraph(open_dev, dev_json):
    """Each question's gold row holds its own paragraph text (read straight from the official file)."""
    queries, corpus = open_dev.queries, open_dev.corpus
    expected = {}
    for article in dev_json["data"]:
        for para in article["paragraphs"]:
            for qa in para["qas"]:
                expected[qa["id"]] = para["context"]
    for q in range(0, len(queries), 97):
        texts = {corpus.texts[r] for r in queries.gold[q]}
        assert texts == {expected[queries.question_ids[q]]}
        assert all(r < 2067 for r in queries.gold[q])  # dev questions have dev paragraphs
    first = dev_json["data"][0]["paragraphs"][0]
    assert queries.question_ids[0] == first["qas"][0]["id"] and list(queries.gold[0]) == [0]


def test_identical_paragraphs_are_all_gold():
    para = {"context": "Paris is the capital of France.", "qas": [{"id": "q1", "question": "Capital of France?", "answers": [{"text": "Paris", "answer_start": 0}]}]}
    other = {"context": "Berlin is in Germany.", "qas": []}
    squads = {
        "dev": {"data": [{"title": "A", "paragraphs": [para, other]}]},
        "train": {"data": [{"title": "B", "paragraphs": [other, dict(para, qas=[])]}]},
    }
    ds = build_squad_open(squads, split="dev")
    assert ds.corpus.ids == ["dev-p0", "dev-p1", "train-p0", "train-p1"]
    assert list(ds.queries.gold[0]) == [0, 3]
    assert ds.corpus.titles == ["A", "A", "B", "B"]


def test_own_pool_and_train_split(open_dev):
    from data.open_domain import load_squad_open
    from data.registry import load_dataset

    own = load_squad_open("dev", data_dir=DATA, data_file=None, arg="own")
    assert len(own.corpus) == 2067 and own.corpus.texts == open_dev.corpus.texts[:2067]
    assert load_dataset("squad_open:own", "dev").corpus.texts == own.corpus.texts  # the name the docs give
    with pytest.raises(UserError, match="unknown argument"):
        load_squad_open("dev", data_dir=DATA, data_file=None, arg="bogus")
    with pytest.raises(UserError, match="no split"):
        load_dataset("squad_open", "test")
    train = load_dataset("squad_open", "train")
    assert len(train.queries) == 87599 and train.corpus.texts == open_dev.corpus.texts


def test_parse_corpus_sizes():
    assert parse_corpus_sizes("2067,5000,10000,all", 2067, 20963) == [2067, 5000, 10000, 20963]
    assert parse_corpus_sizes("x1,x2,x5,x10", 2067, 20963) == [2067, 4134, 10335, 20670]
    assert parse_corpus_sizes("x20,all,x1", 2067, 20963) == [2067, 20963]  # capped and deduplicated
    for bad, msg in (("100", "below"), ("30000", "above"), ("x0.5", "ratio"), ("lots", "expected"), ("", "no sizes")):
        with pytest.raises(UserError, match=msg):
            parse_corpus_sizes(bad, 2067, 20963)
    # open corpora: counts with k/M suffixes, fractions of the pool, no gold rows needed
    assert parse_corpus_sizes("10k,100k,1M,all", 0, 21_015_324) == [10_000, 100_000, 1_000_000, 21_015_324]
    assert parse_corpus_sizes("0.5,25%,0.9k", 0, 1000) == [250, 500, 900]
    for bad, msg in (("x2", "needs gold rows"), ("1.5", "fraction"), ("0", "below"), ("2M", "above")):
        with pytest.raises(UserError, match=msg):
            parse_corpus_sizes(bad, 0, 1_000_000)


@settings(max_examples=60, deadline=None)
@given(
    n_pool=st.integers(1, 300),
    data=st.data(),
    seed=st.integers(0, 2**31 - 1),
)
def test_corpus_levels_keep_gold_are_deterministic_and_nested(n_pool, data, seed):
    gold = data.draw(st.lists(st.integers(0, n_pool - 1), max_size=n_pool, unique=True))
    n_gold = len(gold)
    sizes = sorted(data.draw(st.lists(st.integers(n_gold, n_pool), min_size=1, max_size=5, unique=True)))
    levels = corpus_levels(n_pool, gold, sizes, seed)
    again = corpus_levels(n_pool, gold, sizes, seed)
    for size, rows, rows2 in zip(sizes, levels, again):
        assert len(rows) == size and np.array_equal(rows, rows2)
        assert np.all(np.diff(rows) > 0) and rows.min(initial=0) >= 0 and rows.max(initial=0) < n_pool
        assert set(gold) <= set(rows.tolist())
    for small, large in zip(levels, levels[1:]):
        assert set(small.tolist()) <= set(large.tolist())
    # asking for one size alone gives the same rows as asking for it among others
    alone = corpus_levels(n_pool, gold, [sizes[-1]], seed)[0]
    assert np.array_equal(alone, levels[-1])


def test_corpus_levels_seed_changes_the_noise_and_bad_sizes_fail():
    a = corpus_levels(1000, range(10), [100], seed=1)[0]
    b = corpus_levels(1000, range(10), [100], seed=2)[0]
    assert not np.array_equal(a, b)
    with pytest.raises(UserError):
        corpus_levels(1000, range(10), [5], seed=1)
    with pytest.raises(UserError):
        corpus_levels(1000, range(10), [1001], seed=1)


def test_restrict_corpus_keeps_gold_texts(open_dev):
    from data.types import limit_queries

    ds = limit_queries(build_copy(open_dev), 40)
    rows = corpus_levels(len(ds.corpus), gold_rows(ds.queries), [500], seed=3)[0]
    small = restrict_corpus(ds, rows)
    assert len(small.corpus) == 500
    for q in range(len(ds.queries)):
        assert [small.corpus.texts[r] for r in small.queries.gold[q]] == [ds.corpus.texts[r] for r in ds.queries.gold[q]]
        assert all(small.corpus.paragraph_ids[r] == ds.queries.gold[q][i] for i, r in enumerate(small.queries.gold[q]))


def test_training_sample_takes_whole_articles(open_dev):
    sample = sample_training_questions(open_dev, 300, seed=5)
    assert len(sample.queries) == 300
    again = sample_training_questions(open_dev, 300, seed=5)
    assert sample.queries.ids == again.queries.ids
    titles = {open_dev.corpus.titles[int(g[0])] for g in sample.queries.gold}
    # all but possibly the last article taken are complete
    complete = [t for t in titles if all(
        qid in set(sample.queries.ids)
        for qid, g in zip(open_dev.queries.ids, open_dev.queries.gold) if open_dev.corpus.titles[int(g[0])] == t
    )]
    assert len(complete) >= len(titles) - 1 and len(titles) <= 6


def build_copy(ds):
    from data.types import Dataset

    return Dataset(ds.name, ds.split, ds.corpus, ds.queries.subset(range(len(ds.queries))), dict(ds.sources), ds.level)


def test_question_subsets_share_their_noise():
    """The noise order does not depend on the gold set: a subset's level shares its noise rows."""
    small_gold, large_gold = list(range(10)), list(range(40))
    small = corpus_levels(5000, small_gold, [1000], seed=4)[0]
    large = corpus_levels(5000, large_gold, [1000], seed=4)[0]
    noise_small = set(small.tolist()) - set(large_gold)
    noise_large = set(large.tolist()) - set(large_gold)
    # the larger gold set displaces at most 30 noise rows (+ the gold rows it now holds)
    assert len(noise_small - noise_large) <= 60
