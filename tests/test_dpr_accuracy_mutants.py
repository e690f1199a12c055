"""eval.dpr_accuracy against Pyserini's evaluate_dpr_retrieval (has_answers and evaluate_retrieval).

Pyserini is the reference: has_answer / has_answer_matrix must give
``has_answers(text, answers, SimpleTokenizer(), regex)`` on generated
multilingual text, and top-k accuracy must equal what ``evaluate_retrieval``
prints for the DPR retrieval JSON we write.  The top-k functions are also
checked on matrices whose answers were counted by hand.
"""

from __future__ import annotations

import io
import json
import re
from contextlib import redirect_stdout

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from eval.dpr_accuracy import (AnswerMatcher, _folded, dpr_metrics, first_hit, has_answer, has_answer_matrix, simple_tokens,
                               top_k_accuracy, write_dpr_retrieval_json)


@pytest.fixture(scope="module")
def ref():
    from retrievers.java import pyserini_import_env

    with pyserini_import_env():
        from pyserini.eval import evaluate_dpr_retrieval as m
    tok = m.SimpleTokenizer()
    return m, (lambda text, answers, regex=False: m.has_answers(text, answers, tok, regex))


# words in several scripts, with case pairs, combining marks, final sigma, Turkish dotted I, ligatures
WORDS = ["Café", "cafe\u0301", "CAFÉ", "ΣΟΦΟΣ", "σοφος", "σοφοσ", "İstanbul", "i̇stanbul", "ﬁne", "FINE", "東京", "東",
         "กรุงเทพ", "มหานคร", "Zürich", "zu\u0308rich", "U.S.", "u.s", "24–10", "24-10", "½", "Ⅻ", "x²", "ǅ", "ß", "SS",
         "a", "A", "the", "The", "(", ")", "—", "'s", "\u00a0", "\u200b", "\t", "\n", "\x00", "🙂", "ÅNGSTRÖM", "Å"]
SEPS = [" ", "", "  ", "\u00a0", "\u3000", "\n", "-", "\x01"]
TEXT = st.lists(st.tuples(st.sampled_from(WORDS), st.sampled_from(SEPS)), max_size=10).map(
    lambda ws: "".join(w + s for w, s in ws))


@st.composite
def text_and_answers(draw):
    text = draw(TEXT)
    answers = draw(st.lists(TEXT, max_size=3))
    if text and draw(st.booleans()):  # an answer cut from the text itself (often matching, at odd boundaries)
        i = draw(st.integers(0, len(text) - 1))
        j = draw(st.integers(i, len(text)))
        answers.append(text[i:j].swapcase() if draw(st.booleans()) else text[i:j])
    return text, answers


@settings(max_examples=150, deadline=None)
@given(text_and_answers())
def test_has_answer_equals_pyserini_on_generated_text(ref, ta):
    _, has_answers = ref
    text, answers = ta
    assert has_answer(text, answers) == has_answers(text, answers), (text, answers)


def test_has_answer_by_hand_and_pyserini(ref):
    _, has_answers = ref
    cases = [
        ("The ΣΟΦΟΣ said", ["σοφος"], True),  # final sigma: both lower-case to ...ς
        ("The ΣΟΦΟΣ said", ["σοφοσ"], False),
        ("Café au lait", ["cafe"], False),  # NFD: Café -> Cafe + U+0301, one token; "cafe" is not it
        ("Café au lait", ["CAFE\u0301"], True),
        ("Zürich (ZH)", ["zu\u0308rich"], True),
        ("tokyo 東京都", ["東京"], False),  # 東京都 is one token
        ("U.S. army", ["u.s"], True), ("U.S. army", ["s. army"], True), ("U.S. army", ["S army"], False),
        ("a b c", ["b c"], True), ("a b c", ["c b"], False), ("a b c", ["a c"], False), ("a b c", ["a b c d"], False),
        ("ab c", ["b c"], False),  # whole tokens only
        ("x y", [""], True), ("", [""], True), ("", ["x"], False), ("x", []), ("x", ["   "], True),
        ("won 24–10", ["24-10"], False), ("won 24–10", ["24 – 10"], True),
        ("line one\nhere", ["one here"], True), ("a\x00b", ["a b"], True),
    ]
    for case in cases:
        text, answers = case[:2]
        want = case[2] if len(case) > 2 else False
        assert has_answer(text, answers) is want, case
        assert has_answers(text, answers) is want, case
        m = AnswerMatcher(answers)
        assert m(text) is want and (m.may_match(_folded(text)) or not want)
    assert simple_tokens("Don't STOP—now") == ["don", "'", "t", "stop", "—", "now"]
    assert simple_tokens("Ca\u0301fe\u0301 ½x") == ["ca\u0301fe\u0301", "½x"]


def test_regex_matching_equals_pyserini(ref):
    _, has_answers = ref
    cases = [("The Denver Broncos", [r"denver\s+broncos?"]), ("line one\nhere it is", [r"^here"]),
             ("no match here", [r"^here"]), ("anything", ["(unbalanced", "any"]), ("anything", ["(unbalanced"]),
             ("Café", ["cafe"]), ("Café", ["caf.."]), ("Café", ["café$"]), ("ΣΟΦΟΣ", ["σοφος"]), ("x", []),
             ("a\nb", ["a.b"]), ("A", ["a"]), ("b", ["a", "B"])]
    for text, pats in cases:
        assert has_answer(text, pats, "regex") == has_answers(text, pats, True), (text, pats)
    assert has_answer("Café", ["caf.."], "regex") and not has_answer("Café", ["caf.$"], "regex")
    assert has_answer("line one\nhere", [r"^here"], "regex") and not has_answer("a\nb", ["a.b"], "regex")
    with pytest.raises(ValueError, match="answer match"):
        AnswerMatcher(["x"], "fuzzy")
    with pytest.raises(ValueError, match="answer match"):
        has_answer("x", ["x"], "exact")


@settings(max_examples=25, deadline=None)
@given(st.lists(TEXT, min_size=1, max_size=6), st.data())
def test_has_answer_matrix_equals_pyserini_per_cell(ref, texts, data):
    _, has_answers = ref
    n = len(texts)
    q = data.draw(st.integers(1, 5))
    k = data.draw(st.integers(1, 4))
    rows = np.array(data.draw(st.lists(st.lists(st.integers(-1, n - 1), min_size=k, max_size=k), min_size=q, max_size=q)))
    answers = [data.draw(st.lists(st.one_of(TEXT, st.sampled_from(texts)), max_size=3)) for _ in range(q)]
    match = data.draw(st.sampled_from(["string", "regex"]))
    block = data.draw(st.integers(1, 3))
    asked = []

    def fetch(r):
        asked.append(np.asarray(r).tolist())
        return [texts[i] for i in r]

    got = has_answer_matrix(rows, fetch, answers, match=match, block=block)
    want = np.array([[r >= 0 and has_answers(texts[r], answers[i], match == "regex") for r in rows[i]]
                     for i in range(q)], dtype=bool)
    assert got.dtype == bool and got.shape == rows.shape
    assert (got == want).all(), (rows, answers, match)
    blocks = [rows[lo:lo + block] for lo in range(0, q, block)]  # one fetch per block with rows: its sorted unique rows
    assert asked == [sorted(set(b[b >= 0].tolist())) for b in blocks if (b >= 0).any()]


def test_has_answer_matrix_shapes_and_empty_rows():
    texts = ["Paris is in France", "Berlin", "", "PARIS"]
    rows = np.array([[0, -1, 3], [-1, -1, -1], [2, 1, 0]])
    answers = [["paris"], ["berlin"], [""]]
    got = has_answer_matrix(rows, lambda r: [texts[i] for i in r], answers, block=2)
    assert got.tolist() == [[True, False, True], [False, False, False], [True, True, True]]
    got = has_answer_matrix(rows, lambda r: [texts[i] for i in r], [["^par"], ["x"], ["in"]], match="regex", block=1)
    assert got.tolist() == [[True, False, True], [False, False, False], [False, True, True]]  # "Berl-in"
    asked = []
    got = has_answer_matrix(rows, lambda r: asked.append(r.tolist()) or [texts[i] for i in r], answers, block=1)
    assert asked == [[0, 3], [0, 1, 2]]  # a block without rows fetches nothing
    with pytest.raises(ValueError, match=r"\[Q, K\]"):
        has_answer_matrix(rows, lambda r: [], answers[:2])
    with pytest.raises(ValueError, match=r"\[Q, K\]"):
        has_answer_matrix(rows[0], lambda r: [], answers[:1])


def test_has_answer_matrix_fetches_a_bounded_number_of_passages_at_any_depth(monkeypatch):
    """The default block holds about BLOCK_PASSAGES passages whatever the depth: deep rankings fetch fewer
    questions at a time (the memory of a block does not grow with k), and the matrix is the same as with
    one question per block."""
    import eval.dpr_accuracy as dpr

    monkeypatch.setattr(dpr, "BLOCK_PASSAGES", 64)
    rng = np.random.default_rng(3)
    texts = [f"passage {i} about {'paris' if i % 7 == 0 else 'rome'}" for i in range(5000)]
    answers = [["paris"], ["rome"], ["nowhere"]] * 20
    for depth in (4, 16, 1000):
        rows = rng.integers(-1, len(texts), size=(len(answers), depth))
        sizes = []
        got = has_answer_matrix(rows, lambda r: sizes.append(len(r)) or [texts[i] for i in r], answers)
        assert max(sizes) <= max(64, depth) and len(sizes) >= len(answers) * depth // max(64, depth)
        assert got.tolist() == has_answer_matrix(rows, lambda r: [texts[i] for i in r], answers, block=1).tolist()


def test_top_k_by_hand():
    mask = np.array([[0, 0, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 1], [0, 1, 0, 0]], dtype=bool)
    assert first_hit(mask).tolist() == [2, 0, 4, 3, 1]
    assert first_hit(mask, 2).tolist() == [2, 0, 2, 2, 1]
    assert first_hit(mask, 3).tolist() == [2, 0, 3, 3, 1]
    assert first_hit(mask.astype(int)).dtype == np.int64
    assert first_hit(np.zeros((2, 0), bool), 3).tolist() == [3, 3] and first_hit(np.zeros((2, 0), bool)).tolist() == [0, 0]
    assert first_hit(np.zeros((2, 0), bool), 3).dtype == np.int64
    assert top_k_accuracy(mask, [1, 2, 3, 4]) == {"Top1": 0.2, "Top2": 0.4, "Top3": 0.6, "Top4": 0.8}
    assert top_k_accuracy(mask, (3, 1, 3)) == {"Top1": 0.2, "Top3": 0.6}  # sorted, de-duplicated
    assert top_k_accuracy(mask, [10]) == {"Top10": 0.8}  # k above the depth counts all K positions
    assert list(top_k_accuracy(mask)) == ["Top1", "Top5", "Top20", "Top100"]
    assert top_k_accuracy(np.zeros((0, 3), bool), [1, 2]) == {"Top1": 0.0, "Top2": 0.0}
    for ks in ([], [0, 1], [-1]):
        with pytest.raises(ValueError, match="^top-k accuracy needs ks >= 1$"):
            top_k_accuracy(mask, ks)
    m = dpr_metrics(mask, ks=(1, 2, 20))
    assert m == {"accuracy": {"Top1": 0.2, "Top2": 0.4, "Top4": 0.8}, "questions": 5, "depth": 4,
                 "no_answer_within_depth": 1}
    m = dpr_metrics(mask, depth=2, ks=(1, 5))
    assert m == {"accuracy": {"Top1": 0.2, "Top2": 0.4}, "questions": 5, "depth": 2, "no_answer_within_depth": 3}
    m = dpr_metrics(mask.astype(int), depth=3)
    assert m["accuracy"] == {"Top1": 0.2, "Top3": 0.6} and m["no_answer_within_depth"] == 2
    assert list(dpr_metrics(mask)["accuracy"]) == ["Top1", "Top4"]  # default ks (1, 5, 20, 100) cut at the depth 4
    empty = dpr_metrics(np.zeros((2, 0), bool), depth=1, ks=(1,))
    assert empty == {"accuracy": {"Top1": 0.0}, "questions": 2, "depth": 1, "no_answer_within_depth": 2}
    with pytest.raises(ValueError, match="ks >= 1"):
        dpr_metrics(np.zeros((2, 0), bool))


@settings(max_examples=20, deadline=None)
@given(st.lists(st.lists(st.booleans(), min_size=6, max_size=6), min_size=1, max_size=8),
       st.lists(st.integers(1, 8), min_size=1, max_size=4))
def test_top_k_equals_pyserini_evaluate_retrieval(ref, tmp_path_factory, mask, ks):
    m, _ = ref
    mask = np.array(mask, dtype=bool)
    q, k = mask.shape
    path = tmp_path_factory.mktemp("dpr") / "run.json"
    texts = [f"t{i}\nline two" for i in range(k)]
    rows = np.tile(np.arange(k), (q, 1))
    write_dpr_retrieval_json(path, [f"q{i}" for i in range(q)], [f"question {i}" for i in range(q)],
                             [["a"]] * q, rows, -np.arange(k, dtype=float)[None].repeat(q, 0),
                             lambda r: [f"d{i}" for i in r], lambda r: [f"T{i}" for i in r],
                             lambda r: [texts[i] for i in r], mask=mask)
    out = io.StringIO()
    with redirect_stdout(out):
        m.evaluate_retrieval(str(path), sorted(set(ks)), False)
    printed = {f"Top{a}": float(b) for a, b in re.findall(r"Top(\d+)\s+accuracy: ([0-9.]+)", out.getvalue())}
    ours = top_k_accuracy(mask, ks)
    assert list(ours) == list(printed)
    assert all(abs(ours[key] - printed[key]) < 5e-5 for key in ours)
    run = json.loads(path.read_text(encoding="utf-8"))
    assert list(run) == [f"q{i}" for i in range(q)]
    ctx = run["q0"]["contexts"]
    assert [c["has_answer"] for c in ctx] == mask[0].tolist()
    assert ctx[1] == {"docid": "d1", "score": -1.0, "text": "T1\nt1 line two", "has_answer": bool(mask[0, 1])}


def test_retrieval_json_without_mask_is_scored_by_pyserini_text(ref, tmp_path):
    m, has_answers = ref
    texts = ["Paris\nis the capital", "Berlin is in Germany", "Café Zürich"]
    titles = ["Paris\nFrance", "Berlin", "Cafés"]
    rows = np.array([[1, 0, -1], [2, 1, 0]])
    answers = [["capital"], ["zu\u0308rich"]]
    path = tmp_path / "run.json"
    write_dpr_retrieval_json(path, ["a", "b"], ["q a", "q b"], answers, rows, np.array([[3.0, 2.0, 0], [1.5, 1, 0.5]]),
                             lambda r: [str(i) for i in r], lambda r: [titles[i] for i in r], lambda r: [texts[i] for i in r])
    run = json.loads(path.read_text(encoding="utf-8"))
    assert run["a"] == {"question": "q a", "answers": ["capital"], "contexts": [
        {"docid": "1", "score": 3.0, "text": "Berlin\nBerlin is in Germany"},
        {"docid": "0", "score": 2.0, "text": "Paris France\nParis is the capital"}]}
    assert [c["text"] for c in run["b"]["contexts"]][0] == "Cafés\nCafé Zürich"
    out = io.StringIO()
    with redirect_stdout(out):
        m.evaluate_retrieval(str(path), [1, 2], False)
    mask = has_answer_matrix(rows, lambda r: [texts[i] for i in r], answers)
    assert mask.tolist() == [[False, True, False], [True, False, False]]
    assert top_k_accuracy(mask, [1, 2]) == {"Top1": 0.5, "Top2": 1.0}
    assert "Top1\taccuracy: 0.5000" in out.getvalue() and "Top2\taccuracy: 1.0000" in out.getvalue()


def test_tokenizer_compiled_on_first_use(ref, monkeypatch):
    import eval.dpr_accuracy as dpr
    _, has_answers = ref
    monkeypatch.setattr(dpr, "_tokenizer", None)  # as in a fresh process
    assert dpr.simple_tokens("Ｈｅｌｌｏ, 世界! x\u0301y") == ["ｈｅｌｌｏ", ",", "世界", "!", "x\u0301y"]
    assert dpr._tokenizer is not None and dpr._token_regex() is dpr._tokenizer
    monkeypatch.setattr(dpr, "_tokenizer", None)
    assert has_answer("Le Café de Flore", ["CAFE\u0301 de"]) and has_answers("Le Café de Flore", ["CAFE\u0301 de"])


def test_matrix_empty_answers_inside_a_block_and_truthy_masks():
    texts = ["alpha beta", "gamma", "beta"]
    rows = np.array([[0, 1], [1, -1], [2, 0], [1, 2]])
    answers = [["beta"], [""], [" "], ["beta"]]  # questions 1 and 2 have an answer of no tokens: every passage
    got = has_answer_matrix(rows, lambda r: [texts[i] for i in r], answers, block=4)
    assert got.tolist() == [[True, False], [True, False], [True, True], [False, True]]
    with pytest.raises(ValueError, match="use one of string, regex"):
        AnswerMatcher(["x"], "exact")
    counts = np.array([[0, 1, 2], [0, 0, 3], [0, 0, 0]])  # answer counts per position are read as booleans
    assert first_hit(counts).tolist() == [1, 2, 3]
    assert top_k_accuracy(counts, [1, 2, 3]) == {"Top1": 0.0, "Top2": 1 / 3, "Top3": 2 / 3}
