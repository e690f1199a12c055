"""data/reqa.py against ReQA's construction rules (Ahmad et al. 2019), independently of the cached loader.

* SQuAD v1.1 dev built directly gives ReQA's published sizes (10,250 candidates,
  11,426 query inputs) and the id / gold-set rules hold on every row;
* a hand-built SQuAD dict (accented Latin, CJK, Thai; a stand-in breaker that
  splits at ``|``) whose whole expected dataset is written out by hand: answers
  in the white space between sentences, answers at a sentence's first
  character, a question with answers in two sentences, repeated sentences,
  repeated paragraphs, paragraphs without answerable questions;
* XQuAD Thai with a white-space breaker, checked against a scan of the
  context around each ``answer_start`` (code-point offsets in Thai text, U+FEFF).
"""

from __future__ import annotations

import json
import re
import zipfile
from collections import Counter

import numpy as np
import pytest

from data.reqa import build_reqa
from data.sentences import reqa_sentence_breaks
from tests.conftest import DATA


@pytest.fixture(scope="module")
def dev() -> dict:
    with zipfile.ZipFile(DATA / "squad" / "dev-v1.1.json.zip") as zf:
        return json.loads(zf.read("dev-v1.1.json"))


# ----------------------------------------------------------------- SQuAD v1.1 dev
def test_dev_built_directly_has_reqa_sizes_and_id_rules(dev):
    ds = build_reqa(dev, name="reqa_squad", split="dev")  # the default breaker is ReQA's
    corpus, queries = ds.corpus, ds.queries
    # ReQA's squad_eval.py: "index size=10250 questions=11426"
    assert (len(corpus), len(queries)) == (10250, 11426)
    assert ds.sources == {"answers_between_sentences": 0}
    assert (ds.name, ds.split, ds.level) == ("reqa_squad", "dev", "sentence")
    assert corpus.language == queries.language == "en"

    contexts = [p["context"] for a in dev["data"] for p in a["paragraphs"]]
    assert list(corpus.paragraph_texts) == list(dict.fromkeys(contexts))  # first-seen order, each once
    assert corpus.paragraph_ids.dtype == np.int64 and corpus.paragraph_ids.shape == (len(corpus),)
    pid_of = {c: i for i, c in enumerate(corpus.paragraph_texts)}
    for i in range(0, len(corpus), 7):
        ctx = corpus.contexts[i]
        pid = pid_of[ctx]
        assert corpus.paragraph_ids[i] == pid
        m = re.fullmatch(r"p(\d+)s(\d+)", corpus.ids[i])
        assert int(m[1]) == pid
        s, e = reqa_sentence_breaks(ctx)[int(m[2])]
        assert corpus.texts[i] == ctx[s:e]

    # one input per (question, distinct answer sentence); "qid" alone, else "qid#0", "qid#1", ...
    per_question = Counter(queries.question_ids)
    assert len(per_question) == sum(len(p["qas"]) for a in dev["data"] for p in a["paragraphs"]) == 10570
    seen: Counter = Counter()
    for iid, qid in zip(queries.ids, queries.question_ids):
        expect = qid if per_question[qid] == 1 else f"{qid}#{seen[qid]}"
        seen[qid] += 1
        assert iid == expect
    assert queries.question_keys == queries.texts
    by_text: dict[str, list[int]] = {}
    for i, t in enumerate(corpus.texts):
        by_text.setdefault(t, []).append(i)
    for q in range(0, len(queries), 11):
        assert queries.gold[q].dtype == np.int64
        assert queries.gold[q].tolist() == by_text[queries.answer_sentences[q]]


# ------------------------------------------------------------ hand-built dataset
def bar_breaks(text: str) -> list[tuple[int, int]]:
    """Sentences are the runs between '|' separators, trimmed of white space."""
    spans = []
    for m in re.finditer(r"[^|]+", text):
        s, e = m.start(), m.end()
        while s < e and text[s].isspace():
            s += 1
        while e > s and text[e - 1].isspace():
            e -= 1
        if s < e:
            spans.append((s, e))
    return spans


A = "Ünïcode ist schön | 東京は首都です | Ça va très bien"
B = "東京は首都です | Ünïcode ist schön"
D = "Nur | Leerraum"
E = "Unbeantwortet | bleibt es"
F = "Ja | Nein | Ja | Vielleicht"
G = "สวัสดีครับ | ยินดีต้อนรับ"
H = "Keine Fragen hier"


def ans(ctx: str, text: str, nth: int = 0) -> dict:
    start = -1
    for _ in range(nth + 1):
        start = ctx.index(text, start + 1)
    return {"text": text, "answer_start": start}


def qa(qid, question, *answers, **extra) -> dict:
    return {"id": qid, "question": question, "answers": list(answers), **extra}


def hand_squad() -> dict:
    return {"version": "1.1", "data": [
        {"title": "Eins", "paragraphs": [
            {"context": A, "qas": [
                qa("q1", "Welche Stadt?", ans(A, "東京"), ans(A, "東京")),
                qa("q2", "Welche Wörter?", ans(A, "schön"), ans(A, "très"), ans(A, "Ünïcode")),
                # the first answer starts on the blank right after sentence 0 (its end offset), the second
                # on the first character of sentence 2
                qa("q3", "Wie?", {"text": " | ", "answer_start": A.index(" | ")}, ans(A, "Ça")),
            ]},
            {"context": B, "qas": [qa("q4", "Welches Wort?", ans(B, "Ünïcode"))]},
        ]},
        {"title": "Zwei", "paragraphs": [
            {"context": A, "qas": [qa("q5", "Welche Wörter?", ans(A, "très"))]},  # the same paragraph again
            {"context": D, "qas": [qa("q6", "Nichts?", ans(D, "|"), {"text": " ", "answer_start": 3})]},
            {"context": E, "qas": [qa("q7", "Unmöglich?", is_impossible=True)]},
            {"context": H, "qas": []},
            {"context": F, "qas": [qa(8, "Vielleicht?", ans(F, "Vielleicht"))]},
            {"context": G, "qas": [qa("q9", "ไม่มี?", ans(G, "|")), qa("q10", "ยินดี?", ans(G, "ยินดี"))]},
        ]},
    ]}


EXPECTED_CANDIDATES = [  # id, sentence, paragraph
    ("p0s0", "Ünïcode ist schön", A),
    ("p0s1", "東京は首都です", A),
    ("p0s2", "Ça va très bien", A),
    ("p1s0", "東京は首都です", B),
    ("p1s1", "Ünïcode ist schön", B),
    ("p2s0", "Ja", F),
    ("p2s1", "Nein", F),
    ("p2s3", "Vielleicht", F),  # the second "Ja" (s2) is the same pair as s0
    ("p3s0", "สวัสดีครับ", G),
    ("p3s1", "ยินดีต้อนรับ", G),
]

EXPECTED_QUERIES = [  # id, question id, question, answer sentence, gold rows, answers
    ("q1", "q1", "Welche Stadt?", "東京は首都です", [1, 3], ["東京", "東京"]),
    ("q2#0", "q2", "Welche Wörter?", "Ünïcode ist schön", [0, 4], ["schön", "très", "Ünïcode"]),
    ("q2#1", "q2", "Welche Wörter?", "Ça va très bien", [2], ["schön", "très", "Ünïcode"]),
    ("q3", "q3", "Wie?", "Ça va très bien", [2], [" | ", "Ça"]),
    ("q4", "q4", "Welches Wort?", "Ünïcode ist schön", [0, 4], ["Ünïcode"]),
    ("q5", "q5", "Welche Wörter?", "Ça va très bien", [2], ["très"]),
    ("8", "8", "Vielleicht?", "Vielleicht", [7], ["Vielleicht"]),
    ("q10", "q10", "ยินดี?", "ยินดีต้อนรับ", [9], ["ยินดี"]),
]


def test_hand_built_dataset_is_exactly_reqa():
    sources = {"file": "hand.json"}
    ds = build_reqa(hand_squad(), name="hand", split="test", sentence_breaks=bar_breaks, language="th", sources=sources)
    assert sources == {"file": "hand.json"}  # the caller's dict is not written to
    # answers between sentences: q3's first, both of q6's, q9's
    assert ds.sources == {"file": "hand.json", "answers_between_sentences": 4}
    assert (ds.name, ds.split, ds.level) == ("hand", "test", "sentence")
    c, q = ds.corpus, ds.queries
    assert list(zip(c.ids, c.texts, c.contexts)) == EXPECTED_CANDIDATES
    assert c.paragraph_ids.dtype == np.int64
    assert c.paragraph_ids.tolist() == [0, 0, 0, 1, 1, 2, 2, 2, 3, 3]
    assert list(c.paragraph_texts) == [A, B, F, G]
    assert c.language == q.language == "th"
    assert c.titles is None
    got = list(zip(q.ids, q.question_ids, q.texts, q.answer_sentences, [g.tolist() for g in q.gold], q.answers))
    assert got == EXPECTED_QUERIES
    assert all(g.dtype == np.int64 for g in q.gold)
    assert q.question_keys == [e[2] for e in EXPECTED_QUERIES]
    assert q.gold_grades is None


def test_defaults_and_empty_input():
    ds = build_reqa({"data": [{"paragraphs": [{"context": "Il pleut. Le match continue.", "qas": [
        qa("x", "Quoi?", {"text": "Le match", "answer_start": 10})]}]}]}, name="n", split="s")
    assert ds.sources == {"answers_between_sentences": 0}
    assert ds.corpus.language == ds.queries.language == "en"
    assert ds.corpus.texts == ["Il pleut.", "Le match continue."]  # ReQA's English breaker by default
    assert ds.queries.ids == ["x"] and ds.queries.gold[0].tolist() == [1]

    empty = build_reqa({"data": []}, name="e", split="s", sources={})
    assert len(empty.corpus) == 0 and len(empty.queries) == 0
    assert empty.corpus.paragraph_ids.dtype == np.int64 and empty.corpus.paragraph_ids.shape == (0,)
    assert empty.sources == {"answers_between_sentences": 0}


# --------------------------------------------------------------- XQuAD Thai
def ws_breaks(text: str) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]


def test_xquad_thai_with_a_white_space_breaker():
    """Code-point offsets in Thai text: each answer's sentence is the run of non-space characters around it."""
    th = json.loads((DATA / "xquad" / "xquad.th.json").read_text(encoding="utf-8"))
    th = {"data": [{"paragraphs": a["paragraphs"][:3]} for a in th["data"][:16]]}
    ds = build_reqa(th, name="xq", split="th", sentence_breaks=ws_breaks, language="th")

    between = 0
    expected_inputs = []
    expected_pairs = []
    for article in th["data"]:
        for para in article["paragraphs"]:
            ctx = para["context"]
            answered = False
            for item in para["qas"]:
                sents = []
                for a in item["answers"]:
                    i = a["answer_start"]
                    if ctx[i].isspace():
                        between += 1
                        continue
                    lo = i
                    while lo > 0 and not ctx[lo - 1].isspace():
                        lo -= 1
                    hi = i
                    while hi < len(ctx) and not ctx[hi].isspace():
                        hi += 1
                    if ctx[lo:hi] not in sents:
                        sents.append(ctx[lo:hi])
                answered = answered or bool(sents)
                expected_inputs += [(item["id"], s) for s in sents]
            if answered:
                for w in ctx.split():
                    if (w, ctx) not in expected_pairs:
                        expected_pairs.append((w, ctx))
    assert any(c.startswith("\ufeff") for c in ds.corpus.paragraph_texts)  # the BOM contexts are in the slice
    assert ds.sources["answers_between_sentences"] == between
    assert list(zip(ds.queries.question_ids, ds.queries.answer_sentences)) == expected_inputs
    assert list(zip(ds.corpus.texts, ds.corpus.contexts)) == expected_pairs
    for q, s in enumerate(ds.queries.answer_sentences):
        assert [ds.corpus.texts[r] for r in ds.queries.gold[q]] == [s] * len(ds.queries.gold[q])
        assert len(ds.queries.gold[q]) == ds.corpus.texts.count(s)
