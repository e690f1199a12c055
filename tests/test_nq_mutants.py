"""data.nq behaviour that the mutation run of issue 17 found untested.

Expected values are derived from the rules of Google's ``nq_to_squad.py`` and
the NQ formats, not from our output: in the original format a text token is
followed by one space iff a white-space character (Python's ``\\s``: U+00A0
and U+3000 count) lies outside a tag between it and the next text token; the
simplified format is ``" ".join(tokens)`` (``simplify_nq_example``), so its
tokens are the fields between single U+0020 spaces, whatever other white
space they hold.  Files are UTF-8 whatever the locale says.
"""

from __future__ import annotations

import gzip
import json
import locale
from contextlib import contextmanager

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

import data.nq as nq
from data.errors import UserError
from data.nq import iter_nq_records, nq_files, nq_record_to_article, nq_squad, nq_to_squad
from tests.conftest import DATA
from tests.test_nq import H, RECORDS, SP_HTML, SP_TOKENS, W, ann, ann2, edge, hf_record, page2, record


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("QA_CACHE_DIR", str(tmp_path / "cache"))


@contextmanager
def ascii_locale():
    """LC_CTYPE=POSIX: Python's default text encoding becomes ASCII (as on a server with LANG=C, no UTF-8 mode)."""
    old = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "POSIX")
    try:
        assert locale.getpreferredencoding(False).lower() in ("ansi_x3.4-1968", "ascii", "us-ascii")
        yield
    finally:
        locale.setlocale(locale.LC_CTYPE, old)


SEPS = [" ", "\xa0", "\n", "\u3000", "\t "]


def thai_record():
    """A <P> of the first 12 words of XQuAD-th's first paragraph, words separated by assorted white space.

    By the spacing rule every separator becomes one space, so the paragraph is the
    words joined by " "; the short answer is words 3..5 at the offset of word 3.
    """
    article = json.loads((DATA / "xquad" / "xquad.th.json").read_text(encoding="utf-8"))["data"][0]
    para = article["paragraphs"][0]
    words = para["context"].split()[:12]
    items = [H("<P>")]
    for i, w in enumerate(words):
        items.append(W(w))
        if i < len(words) - 1:
            items.append(SEPS[i % len(SEPS)])
    items.append(H("</P>"))
    html, tokens = page2(*items)
    assert len(tokens) == len(words) + 2
    rec = record(401, para["qas"][0]["question"], html, tokens, article["title"], [ann((0, len(tokens)), [(4, 7)])])
    expected = {"title": article["title"], "paragraphs": [{
        "context": " ".join(words),
        "qas": [{"id": "401", "question": para["qas"][0]["question"],
                 "answers": [{"answer_start": len(" ".join(words[:3])) + 1, "text": " ".join(words[3:6])}]}],
    }]}
    return rec, expected


def test_files_and_the_cache_are_utf8_under_an_ascii_locale(tmp_path):
    rec, expected = thai_record()
    sp = edge(402, SP_HTML, SP_TOKENS, [ann2((0, 12), [(3, 7)])])  # "Born in São Paulo 1950.": São Paulo at 8
    d = tmp_path / "shards"
    d.mkdir()
    (d / "nq-dev-00.jsonl.gz").write_bytes(gzip.compress((json.dumps(rec, ensure_ascii=False) + "\n").encode("utf-8")))
    (d / "nq-dev-01.jsonl").write_bytes((json.dumps(sp, ensure_ascii=False) + "\n").encode("utf-8"))
    with ascii_locale():
        assert [r["example_id"] for r in iter_nq_records(nq_files(d))] == [401, 402]
        stats = {}
        squad, _ = nq_squad("dev", data_file=d, stats=stats)  # converts and writes the cache
        again = {}
        assert nq_squad("dev", data_file=d, stats=again)[0] == squad and again == stats  # reads it back
    [cached] = (tmp_path / "cache" / "nq").glob("*.json.gz")  # the cache was written, as UTF-8 JSON
    assert json.loads(gzip.decompress(cached.read_bytes()).decode("utf-8")) == {"squad": squad, "stats": stats}
    assert squad["data"][0] == expected
    sp_qa = squad["data"][1]["paragraphs"][0]
    assert sp_qa["context"] == "Born in São Paulo 1950." and sp_qa["qas"][0]["answers"] == [{"answer_start": 8, "text": "São Paulo"}]
    assert stats["kept"] == 2 and stats["records"] == 2


def _write_cache_entry(path, squad, stats):
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump({"squad": squad, "stats": stats}, f, ensure_ascii=False)


def test_a_cached_conversion_is_served_as_stored_and_keyed_by_the_converter_version(tmp_path, monkeypatch):
    f = tmp_path / "nq.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in RECORDS), encoding="utf-8")
    squad, sources = nq_squad("dev", data_file=f)  # no stats dict given
    assert squad == nq_to_squad(RECORDS) and list(sources) == [str(f)]
    [cached] = (tmp_path / "cache" / "nq").glob("*.json.gz")
    # a valid entry is returned as it is stored (the input is not converted again), also under an ASCII locale
    stored = {"version": "reqa_nq", "data": [{"title": "ตลาด 東京 Zürich", "paragraphs": []}]}
    _write_cache_entry(cached, stored, {"kept": 7, "records": 9})
    for ascii_only in (False, True):
        stats = {}
        if ascii_only:
            with ascii_locale():
                got = nq_squad("dev", data_file=f, stats=stats)[0]
        else:
            got = nq_squad("dev", data_file=f, stats=stats)[0]
        assert got == stored and stats == {"kept": 7, "records": 9}, ascii_only
    assert nq_squad("dev", data_file=f)[0] == stored  # a cache hit without a stats dict
    # another converter version does not read this entry
    monkeypatch.setattr(nq, "CONVERTER_VERSION", "2-test")
    stats = {}
    assert nq_squad("dev", data_file=f, stats=stats)[0] == squad and stats["kept"] == 6
    assert len(list((tmp_path / "cache" / "nq").glob("*.json.gz"))) == 2


def test_answer_text_mismatches_are_counted_across_records():
    # a short answer holding only the tags </A><B>: empty text, kept and counted (twice, in one stats dict)
    recs = [edge(i, SP_HTML, SP_TOKENS, [ann2((0, 12), [(6, 8)])]) for i in (1, 2)]
    stats = {}
    squad = nq_to_squad(recs + [edge(3, SP_HTML, SP_TOKENS, [ann2((0, 12), [(3, 7)])])], stats)
    assert len(squad["data"]) == 3 and stats["kept"] == 3 and stats["answer_text_mismatch"] == 2
    stats = {"answer_text_mismatch": 5}
    nq_record_to_article(recs[0], stats)
    assert stats == {"answer_text_mismatch": 6, "kept": 1}


def test_record_error_without_a_location_names_nq():
    with pytest.raises(UserError) as err:
        nq_record_to_article({"example_id": 1, "question_text": "q"})
    assert str(err.value).startswith("<nq>: not a Natural Questions record")


def test_simplified_tokens_are_the_fields_between_single_spaces():
    text = "<P> Bangkok is 10\xa0km from ปากน้ำ\u3000city , Zürich </P>"
    # fields: 0 <P>, 1 Bangkok, 2 is, 3 10\xa0km, 4 from, 5 ปากน้ำ\u3000city, 6 ",", 7 Zürich, 8 </P>
    rec = {"example_id": 5, "question_text": "q", "document_url": "", "document_text": text,
           "annotations": [ann((0, 9), [(4, 6)])]}
    art = nq_record_to_article(rec)
    p = art["paragraphs"][0]
    assert p["context"] == "Bangkok is 10\xa0km from ปากน้ำ\u3000city , Zürich"
    assert p["qas"][0]["answers"] == [{"answer_start": len("Bangkok is 10\xa0km "), "text": "from ปากน้ำ\u3000city"}]


FIELD = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters=" <>"), max_size=4)


@settings(max_examples=40, deadline=None)
@given(st.lists(FIELD, min_size=1, max_size=8), st.data())
def test_simplified_records_round_trip_any_tokens(words, data):
    a = data.draw(st.integers(0, len(words) - 1))
    b = data.draw(st.integers(a, len(words) - 1))
    rec = {"example_id": 6, "question_text": "q", "document_url": "",
           "document_text": " ".join(["<P>"] + words + ["</P>"]),
           "annotations": [ann((0, len(words) + 2), [(a + 1, b + 2)])]}
    if not " ".join(words).strip():
        stats = {}
        assert nq_record_to_article(rec, stats) is None and stats == {"empty_paragraph": 1}
        return
    p = nq_record_to_article(rec)["paragraphs"][0]
    assert p["context"] == " ".join(words)
    assert p["qas"][0]["answers"] == [{"answer_start": len(" ".join(words[:a] + [""])) if a else 0,
                                       "text": " ".join(words[a:b + 1])}]


def test_one_token_pages_and_long_answers_without_an_end():
    # a Hugging Face record whose page is one <P> token (byte offsets given): an empty paragraph, skipped
    html, tokens = page2(H("<P>"))
    rec = hf_record(record(7, "q", html, tokens, "T", [ann((0, 1), [(0, 1)])]), with_bytes=True)
    stats = {}
    assert nq_to_squad([rec], stats)["data"] == [] and stats["empty_paragraph"] == 1
    # a long answer without end_token holds no token, even where token 0 is a text token spelled <P>
    html, tokens = page2(("t", "<P>", "&lt;P&gt;"), " ", W("x"))
    a = {"long_answer": {"start_token": 0}, "short_answers": [{"start_token": 1, "end_token": 2}]}
    stats = {}
    assert nq_to_squad([record(8, "q", html, tokens, "T", [a])], stats)["data"] == [] and stats["empty_paragraph"] == 1


def test_a_record_the_cache_cannot_encode_is_still_converted(tmp_path):
    # JSON may escape a lone surrogate (json.loads accepts it, UTF-8 cannot encode it): the conversion is
    # returned and only the cache is skipped, leaving no temporary file behind
    f = tmp_path / "nq.jsonl"
    f.write_text(json.dumps(dict(RECORDS[0], question_text="where is \ud800 it")) + "\n", encoding="utf-8")
    for _ in range(2):
        stats = {}
        squad, _ = nq_squad("dev", data_file=f, stats=stats)
        assert squad["data"][0]["paragraphs"][0]["qas"][0]["question"] == "where is \ud800 it" and stats["kept"] == 1
    assert not list((tmp_path / "cache" / "nq").glob("*.tmp"))
