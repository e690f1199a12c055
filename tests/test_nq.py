"""ReQA NQ conversion (data.nq) on Natural Questions records written by hand.

The full NQ files cannot be downloaded here, so the records below are built
in the original NQ format (a page's HTML, its tokens with ``html_token`` flags
and byte offsets, annotations on token indices) and every expected paragraph,
offset and ReQA candidate was worked out by hand from the ReQA rules: skip
records without exactly one short answer / without a long answer / whose long
answer is not a ``<P>``; drop HTML tokens; one space between two text tokens
iff the page has white space between them outside a tag.
"""

from __future__ import annotations

import gzip
import json

import pytest

from data.errors import UserError
from data.nq import load_reqa_nq, nq_to_squad
from data.reqa import build_reqa


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("QA_CACHE_DIR", str(tmp_path / "cache"))


def page(*items):
    """HTML + NQ tokens from items: a str is raw page text (white space, untokenized
    markup); a 1-tuple ``(text,)`` is a text token; ``("<A>", raw)`` an HTML token
    whose page bytes are ``raw``."""
    html, tokens = b"", []
    for it in items:
        if isinstance(it, str):
            html += it.encode("utf-8")
            continue
        token, raw = (it[0], it[0]) if len(it) == 1 else it
        b = raw.encode("utf-8")
        tokens.append({"token": token, "html_token": len(it) == 2, "start_byte": len(html), "end_byte": len(html) + len(b)})
        html += b
    return html.decode("utf-8"), tokens


def H(tag, raw=None):
    return (tag, raw or tag)


def W(text):
    return (text,)


# Eiffel page: <H1>..</H1> <P>..</P> <Table>..</Table>
EIFFEL_HTML, EIFFEL_TOKENS = page(
    H("<H1>"), W("Eiffel"), " ", W("Tower"), H("</H1>"), " ",
    H("<P>"), W("The"), " ", H("<B>"), W("Eiffel"), " ", W("Tower"), H("</B>"), " ", W("is"), " ", W("in"), " ",
    H("<A>", '<A href="/wiki/Paris" title="Paris">'), W("Paris"), H("</A>"), W(","), " ", W("France"), W("."), " ",
    W("It"), " ", W("was"), " ", W("built"), " ", W("in"), " ", W("1889"), H("</P>"), " ",
    H("<Table>"), " ", H("<Tr>"), " ", H("<Td>"), " ", W("Height"), " ", H("</Td>"), " ", H("<Td>"), " ", W("300"),
    " ", W("m"), " ", H("</Td>"), " ", H("</Tr>"), " ", H("</Table>"),
)
# token indices: 4 <P>, 5 The, 13 Paris, 22 1889, 23 </P>, 24 <Table>, 30 300, 32 </Td>, 35 = len
TESLA_HTML, TESLA_TOKENS = page(
    H("<H1>"), W("Nikola"), " ", W("Tesla"), H("</H1>"), " ",
    H("<P>"), W("Nikola"), " ", W("Tesla"), " ", W("was"), " ", W("an"), " ", W("inventor"), W("."), H("</P>"), " ",
    H("<P>"), W("Tesla"), " ", W("was"), " ", W("born"), " ", W("in"), " ",
    H("<A>", '<A href="/wiki/Smiljan" title="Smiljan, Croatia">'), W("Smiljan"), H("</A>"), H("<Sup>"), W("1"),
    H("</Sup>"), " ", W("in"), " ", W("1856"), '<span class="ref a"></span>', W("."), " ", W("He"), " ", W("moved"), " ",
    W("to"), " ", H("<I>"), W("New"), " ", W("York"), H("</I>"), " ", W("in"), " ", W("1884"), W("."), H("</P>"),
)
# token indices: 4 <P>, 8 an, 10 ., 11 </P>, 12 <P>, 18 Smiljan, 34 1884, 36 </P>


def ann(long, shorts):
    return {
        "long_answer": {"start_token": long[0], "end_token": long[1], "candidate_index": 0},
        "short_answers": [{"start_token": s, "end_token": e} for s, e in shorts],
        "yes_no_answer": "NONE",
    }


def record(eid, question, html, tokens, title, annotations):
    return {
        "example_id": eid,
        "question_text": question,
        "document_title": title,
        "document_url": f"https://en.wikipedia.org//w/index.php?title={title.replace(' ', '_')}&amp;oldid=1",
        "document_html": html,
        "document_tokens": tokens,
        "annotations": annotations,
    }


def eiffel(eid, q, anns):
    return record(eid, q, EIFFEL_HTML, EIFFEL_TOKENS, "Eiffel Tower", anns)


def tesla(eid, q, anns):
    return record(eid, q, TESLA_HTML, TESLA_TOKENS, "Nikola Tesla", anns)


RECORDS = [
    eiffel(101, "where is the eiffel tower", [ann((4, 24), [(13, 14)])]),
    eiffel(102, "when was the eiffel tower built", [ann((4, 24), [(22, 23)])]),  # answer at paragraph end
    eiffel(103, "what is the iron tower in paris called", [ann((4, 24), [(5, 9)])]),  # answer at paragraph start
    eiffel(104, "how tall is the eiffel tower", [ann((24, 35), [(30, 32)])]),  # long answer is a table
    eiffel(105, "is the eiffel tower in paris", [ann((4, 24), [])]),  # yes/no: no short answer
    eiffel(106, "what are the eiffel tower's city and country", [ann((4, 24), [(13, 14), (16, 17)])]),
    eiffel(107, "where is the eiffel", [ann((-1, -1), [])] + [ann((4, 24), [(13, 14)])] * 4),  # dev: 1st annotation only
    eiffel(108, "eiffel tower place", [ann((-1, -1), [(13, 14)])]),  # no long answer
    tesla(201, "where was tesla born", [ann((12, 37), [(18, 19)])]),
    tesla(202, "when did tesla move to new york", [ann((12, 37), [(34, 35)])]),
    tesla(203, "what was nikola tesla", [ann((4, 12), [(8, 10)])]),
]

EIFFEL_P = "The Eiffel Tower is in Paris, France. It was built in 1889"
TESLA_P2 = "Tesla was born in Smiljan1 in 1856. He moved to New York in 1884."
TESLA_P1 = "Nikola Tesla was an inventor."


def qas(squad):
    return [(a["paragraphs"][0]["context"], qa) for a in squad["data"] for qa in a["paragraphs"][0]["qas"]]


def test_original_format_paragraph_text_offsets_and_skips():
    stats = {}
    squad = nq_to_squad(RECORDS, stats)
    got = [(ctx, qa["id"], qa["answers"][0]["answer_start"], qa["answers"][0]["text"]) for ctx, qa in qas(squad)]
    assert got == [
        (EIFFEL_P, "101", 23, "Paris"),
        (EIFFEL_P, "102", 54, "1889"),
        (EIFFEL_P, "103", 0, "The Eiffel Tower"),
        (TESLA_P2, "201", 18, "Smiljan"),
        (TESLA_P2, "202", 60, "1884"),
        (TESLA_P1, "203", 17, "an inventor"),
    ]
    for ctx, start, text in [(c, s, t) for c, _, s, t in got]:
        assert ctx[start : start + len(text)] == text
    assert [a["title"] for a in squad["data"]] == ["Eiffel Tower"] * 3 + ["Nikola Tesla"] * 3
    assert stats["records"] == 11 and stats["kept"] == 6
    assert stats["not_one_short_answer"] == 3  # 105 (yes/no), 106 (two spans), 107 (first annotation empty)
    assert stats["long_answer_not_paragraph"] == 1 and stats["no_long_answer"] == 1
    assert stats["answer_text_mismatch"] == 0


def test_reqa_candidates_and_query_inputs_from_nq():
    ds = build_reqa(nq_to_squad(RECORDS), name="reqa_nq", split="dev")
    assert ds.corpus.texts == [
        "The Eiffel Tower is in Paris, France.",
        "It was built in 1889",
        "Tesla was born in Smiljan1 in 1856.",
        "He moved to New York in 1884.",
        "Nikola Tesla was an inventor.",
    ]
    assert ds.corpus.contexts == [EIFFEL_P] * 2 + [TESLA_P2] * 2 + [TESLA_P1]
    assert ds.queries.question_ids == ["101", "102", "103", "201", "202", "203"]
    assert [g.tolist() for g in ds.queries.gold] == [[0], [1], [0], [2], [3], [4]]
    assert ds.queries.answers[4] == ["1884"]


def simplified(rec):
    """The simplified NQ form of an original record (Google's simplify_nq_example)."""
    return {
        "example_id": rec["example_id"],
        "question_text": rec["question_text"],
        "document_url": rec["document_url"],
        "document_text": " ".join(t["token"] for t in rec["document_tokens"]),
        "annotations": rec["annotations"],
    }


def test_simplified_format_joins_text_tokens_with_single_spaces():
    stats = {}
    squad = nq_to_squad([simplified(r) for r in RECORDS], stats)
    got = [(ctx, qa["answers"][0]["answer_start"], qa["answers"][0]["text"]) for ctx, qa in qas(squad)]
    spaced = "The Eiffel Tower is in Paris , France . It was built in 1889"
    assert got[:3] == [(spaced, 23, "Paris"), (spaced, 56, "1889"), (spaced, 0, "The Eiffel Tower")]
    assert got[5] == ("Nikola Tesla was an inventor .", 17, "an inventor")
    assert squad["data"][0]["title"] == "Eiffel Tower"  # from document_url
    assert stats["kept"] == 6 and stats["answer_text_mismatch"] == 0


def hf_record(rec, with_bytes):
    """A Hugging Face natural_questions record (sequences as dicts of lists)."""
    toks = rec["document_tokens"]
    tokens = {"token": [t["token"] for t in toks], "is_html": [t["html_token"] for t in toks]}
    if with_bytes:
        tokens["start_byte"] = [t["start_byte"] for t in toks]
        tokens["end_byte"] = [t["end_byte"] for t in toks]
    anns = rec["annotations"]
    return {
        "id": str(rec["example_id"]),
        "document": {"title": rec["document_title"], "url": rec["document_url"], "html": rec["document_html"],
                     "tokens": tokens},
        "question": {"text": rec["question_text"], "tokens": rec["question_text"].split()},
        "annotations": {
            "id": [str(i) for i in range(len(anns))],
            "long_answer": [a["long_answer"] for a in anns],
            "short_answers": [
                {"start_token": [s["start_token"] for s in a["short_answers"]],
                 "end_token": [s["end_token"] for s in a["short_answers"]],
                 "text": ["" for _ in a["short_answers"]]}
                for a in anns
            ],
            "yes_no_answer": [-1 for _ in anns],
        },
    }


def test_hugging_face_records_match_the_file_formats():
    exact = nq_to_squad(RECORDS)
    assert nq_to_squad([hf_record(r, with_bytes=True) for r in RECORDS]) == exact
    approx = nq_to_squad([hf_record(r, with_bytes=False) for r in RECORDS])
    simple = nq_to_squad([simplified(r) for r in RECORDS])
    assert [qa for _, qa in qas(approx)] == [qa for _, qa in qas(simple)]
    assert [c for c, _ in qas(approx)] == [c for c, _ in qas(simple)]


def write_jsonl(path, rows, gz):
    data = "".join(json.dumps(r) + "\n" for r in rows).encode("utf-8")
    path.write_bytes(gzip.compress(data) if gz else data)


def test_loader_reads_a_directory_of_shards_and_caches(tmp_path, monkeypatch):
    shards = tmp_path / "data" / "nq" / "dev"
    shards.mkdir(parents=True)
    write_jsonl(shards / "nq-dev-00.jsonl.gz", RECORDS[:5], gz=True)
    write_jsonl(shards / "nq-dev-01.jsonl", RECORDS[5:], gz=False)
    ds = load_reqa_nq("dev", data_dir=tmp_path / "data", data_file=None, arg=None)
    assert ds.name == "reqa_nq" and ds.level == "sentence"
    assert (len(ds.corpus), len(ds.queries)) == (5, 6)
    assert ds.sources["nq_kept"] == 6 and ds.sources["nq_records"] == 11
    assert str(shards / "nq-dev-00.jsonl.gz") in ds.sources
    assert len(list((tmp_path / "cache" / "nq").glob("*.json.gz"))) == 1
    again = load_reqa_nq("dev", data_dir=tmp_path / "data", data_file=None, arg=None)
    assert again.corpus.texts == ds.corpus.texts
    assert [g.tolist() for g in again.queries.gold] == [g.tolist() for g in ds.queries.gold]
    # one explicit file works too
    one = load_reqa_nq("dev", data_dir=None, data_file=shards / "nq-dev-01.jsonl", arg=None)
    assert one.queries.question_ids == ["201", "202", "203"]


def test_offline_error_names_the_file_to_download(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserError) as err:
        load_reqa_nq("dev", data_dir=tmp_path, data_file=None, arg=None)
    msg = str(err.value)
    assert "\n" not in msg
    assert "nq-dev-00..04.jsonl.gz" in msg and str(tmp_path / "nq" / "dev") in msg
    with pytest.raises(UserError, match="no split"):
        load_reqa_nq("test", data_dir=tmp_path, data_file=None, arg=None)


def test_malformed_record_is_one_line_user_error(tmp_path):
    bad = dict(RECORDS[0])
    del bad["question_text"]
    with pytest.raises(UserError, match="example_id 101"):
        nq_to_squad([bad])
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps(RECORDS[0]) + "\n{not json\n")
    with pytest.raises(UserError, match="line 2"):
        load_reqa_nq("dev", data_dir=None, data_file=path, arg=None)


# ------------------------------------------------ issue 17: edge cases of nq_to_squad.py
# Every expected value below was derived by hand from the rules of Google's
# retrieval-qa-eval nq_to_squad.py (clean_text: a text token is followed by one
# space iff a white-space character -- Python's ``\s``, so U+00A0 and U+3000
# count and U+200B does not -- lies outside ``<``/``>`` between it and the next
# text token, looking no further than the span's last token (one token further
# for the text before the answer); offsets are in characters, not bytes).
import hypothesis.strategies as st
from hypothesis import given, settings

from data.nq import SKIP_REASONS, clean_text, nq_record_to_article, _normalize


def page2(*items):
    """Like :func:`page`, but ``("t", token, raw)`` is a text token whose page bytes differ (entities)."""
    html, tokens = b"", []
    for it in items:
        if isinstance(it, str):
            html += it.encode("utf-8")
            continue
        if len(it) == 3:  # ("t", token, raw)
            token, raw, is_html = it[1], it[2], False
        else:
            token, raw = (it[0], it[0]) if len(it) == 1 else it
            is_html = len(it) == 2
        b = raw.encode("utf-8")
        tokens.append({"token": token, "html_token": is_html, "start_byte": len(html), "end_byte": len(html) + len(b)})
        html += b
    return html.decode("utf-8"), tokens


# 0 <P>, 1 Zürich, 2 is, 3 in, 4 Schweiz, 5 —, 6 東京, 7 𠮷野家, 8 ไทย, 9 &, 10 e\u0301t\u00e9, 11 </P>
UNI_HTML, UNI_TOKENS = page2(
    H("<P>"), W("Zürich"), "\xa0", W("is"), " ", W("in"), "\u200b", W("Schweiz"), W("—"), W("東京"), "\u3000",
    W("𠮷野家"), "\n\t", W("ไทย"), " ", ("t", "&", "&amp;"), "\u2009", W("e\u0301t\u00e9"), " ", H("</P>"),
)
UNI_P = "Zürich is inSchweiz—東京 𠮷野家 ไทย & e\u0301t\u00e9 "  # space before </P> is inside the long answer


# 0 <P>, 1 Born, 2 in, 3 <A>, 4 São, 5 Paulo, 6 </A>, 7 <B>, 8 1950, 9 </B>, 10 ., 11 </P>
SP_HTML, SP_TOKENS = page2(
    H("<P>"), W("Born"), " ", W("in"), " ", H("<A>", '<A href="/wiki/S%C3%A3o_Paulo" title="São Paulo">'), W("São"),
    "\xa0", W("Paulo"), H("</A>"), " ", H("<B>"), W("1950"), H("</B>"), W("."), H("</P>"),
)
SP_P = "Born in São Paulo 1950."

# 0 <H2>, 1 Capital, 2 </H2>, 3 <P>, 4 <Br>, 5 </P>, 6 <P>, 7 Capital, 8 :, 9 <I>, 10 東京, 11 </I>, 12 city, 13 </P>
CAP_HTML, CAP_TOKENS = page2(
    H("<H2>"), W("Capital"), H("</H2>"), H("<P>"), H("<Br>"), H("</P>"), " ",
    H("<P>"), W("Capital"), W(":"), H("<I>"), " ", W("東京"), H("</I>"), '<span title="a b"> </span>', W("city"),
    '<span class="x">', W("!"), "</span>", H("</P>"),
)
CAP_P = "Capital: 東京 city!"


def ann2(long, shorts, yes_no="NONE"):
    a = ann(long, shorts)
    a["yes_no_answer"] = yes_no
    return a


def edge(eid, html, tokens, anns, title="Edge"):
    return record(eid, f"question {eid}", html, tokens, title, anns)


EDGE_RECORDS = [
    edge(301, UNI_HTML, UNI_TOKENS, [ann2((0, 12), [(6, 8)])]),  # 東京 𠮷野家: 4-byte character before
    edge(302, UNI_HTML, UNI_TOKENS, [ann2((0, 12), [(9, 11)])]),  # & (page bytes &amp;) + combining accent
    edge(303, UNI_HTML, UNI_TOKENS, [ann2((0, 12), [(1, 2)]), ann2((0, 12), [(8, 9)])]),  # first annotation wins
    edge(304, SP_HTML, SP_TOKENS, [ann2((0, 12), [(3, 7)])]),  # <A> at both edges
    edge(305, SP_HTML, SP_TOKENS, [ann2((0, 12), [(3, 8)])]),  # ends on <B>: the space before it is kept
    edge(306, SP_HTML, SP_TOKENS, [ann2((0, 12), [(8, 11)], yes_no="YES")]),  # yes/no with one short answer
    edge(307, SP_HTML, SP_TOKENS, [ann2((0, 12), [], yes_no="NO")]),  # yes/no only: skipped
    edge(308, CAP_HTML, CAP_TOKENS, [ann2((6, 14), [(9, 11)])]),  # whitespace after <I>: offset off by one
    edge(309, CAP_HTML, CAP_TOKENS, [ann2((6, 14), [(12, 13)]), ann2((-1, -1), [])]),
    edge(310, CAP_HTML, CAP_TOKENS, [ann2((3, 6), [(4, 5)])]),  # <P> with no text in it
    edge(311, CAP_HTML, CAP_TOKENS, [ann2((0, 3), [(1, 2)])]),  # <H2> is not a paragraph
    edge(312, CAP_HTML, CAP_TOKENS, []),  # no annotation
]


def test_original_format_edge_cases_by_hand():
    stats = {}
    squad = nq_to_squad(EDGE_RECORDS, stats)
    got = {qa["id"]: (ctx, qa["answers"][0]["answer_start"], qa["answers"][0]["text"], qa["question"])
           for ctx, qa in qas(squad)}
    assert list(got) == ["301", "302", "303", "304", "305", "306", "308", "309"]
    assert got["301"][:3] == (UNI_P, 20, "東京 𠮷野家")
    assert got["302"][:3] == (UNI_P, 31, "& e\u0301t\u00e9")
    assert got["303"][:3] == (UNI_P, 0, "Zürich")
    assert got["304"][:3] == (SP_P, 8, "São Paulo")
    assert got["305"][:3] == (SP_P, 8, "São Paulo ")  # trailing space: </A> then white space then <B>
    assert got["306"][:3] == (SP_P, 18, "1950.")
    assert got["308"][:3] == (CAP_P, 8, "東京")  # the text before ends at <I>, the paragraph has the space
    assert got["309"][:3] == (CAP_P, 12, "city")
    assert got["301"][3] == "question 301"
    assert [a["title"] for a in squad["data"]] == ["Edge"] * 8
    assert stats == {"records": 12, "kept": 8, "no_annotation": 1, "not_one_short_answer": 1, "no_long_answer": 0,
                     "long_answer_not_paragraph": 1, "empty_paragraph": 1, "answer_text_mismatch": 1}
    # 308 is the mismatch: Google's converter keeps it with the offset it computes
    assert CAP_P[8:10] == " 東"
    # the same records in the simplified format: text tokens joined by single spaces
    simple = {qa["id"]: (ctx, qa["answers"][0]["answer_start"], qa["answers"][0]["text"])
              for ctx, qa in qas(nq_to_squad([simplified(r) for r in EDGE_RECORDS]))}
    sp = "Born in São Paulo 1950 ."
    assert simple["304"] == (sp, 8, "São Paulo") and simple["305"] == (sp, 8, "São Paulo")
    assert simple["306"] == (sp, 18, "1950 .")
    assert simple["308"] == ("Capital : 東京 city !", 10, "東京")
    assert simple["303"][1:] == (0, "Zürich")


def test_stray_brackets_and_spans_reaching_outside_the_long_answer():
    # brackets are counted per gap: a space counts only where the count is 0 (not -1, not 1)
    html, tokens = page2(H("<P>"), W("a"), "> ", W("b"), "< ", W("c"), "<> ", W("d"), ">< ", W("e"), H("</P>"))
    ex = _normalize(record(1, "q", html, tokens, "T", []), "t")
    assert clean_text(ex, 0, 7) == "abc d e"
    # a span's last text token looks at the gap up to the last token of the span only
    html, tokens = page2(H("<P>"), W("x"), H("<B>"), " ", H("</B>"), " ", W("y"), H("</P>"))
    ex = _normalize(record(1, "q", html, tokens, "T", []), "t")
    assert clean_text(ex, 0, 3) == "x"  # gap x..<B> is empty
    assert clean_text(ex, 0, 4) == "x "  # gap x..</B> holds a space
    assert clean_text(ex, 0, 3, ignore_final_whitespace=False) == "x "  # one token further
    assert clean_text(ex, 0, 2, ignore_final_whitespace=False) == "x"
    assert clean_text(ex, 0, 6) == "x y"
    assert clean_text(ex, 1, 1) == "" and clean_text(ex, 2, 4) == "" and clean_text(ex, 4, 5) == "y"


# ------------------------------------------ property: pages generated with known spacing
TEXT = st.text(st.characters(blacklist_categories=("Cs", "Zs", "Zl", "Zp", "Cc"), blacklist_characters="<>\u200b\x85"),
               min_size=1, max_size=4)
SPACE = st.sampled_from([" ", "\xa0", "\u3000", "\n", "\t", "\u2009", "  "])
NO_SPACE = st.sampled_from(["", "\u200b", '<span class="a b"></span>', "<!-- x -->"])
GAP = st.lists(st.tuples(st.booleans(), st.booleans()), max_size=3)  # (html token?, space after?)


@st.composite
def nq_page(draw):
    """A <P> of text tokens with HTML tokens and gaps between them, and the paragraph Google's converter gives."""
    n = draw(st.integers(1, 7))
    items, expected = [H("<P>")], ""
    for i in range(n):
        tok = draw(TEXT)
        items.append(W(tok))
        expected += tok
        spaced = False
        for is_tag, space in draw(GAP) if i < n - 1 else []:
            if space:
                items.append(draw(SPACE))
                spaced = True
            items.append(H("<B>", '<B class="x y">') if is_tag else draw(NO_SPACE))
        if i < n - 1:
            if draw(st.booleans()):
                items.append(draw(SPACE))
                spaced = True
            items.append(draw(NO_SPACE))
            expected += " " if spaced else ""
    items.append(H("</P>"))
    html, tokens = page2(*items)
    return html, tokens, expected


@settings(max_examples=60, deadline=None)
@given(nq_page(), st.data())
def test_generated_pages_paragraph_and_offsets(pg, data):
    html, tokens, expected = pg
    text_idx = [i for i, t in enumerate(tokens) if not t["html_token"]]
    a = data.draw(st.integers(0, len(text_idx) - 1))
    b = data.draw(st.integers(a, len(text_idx) - 1))
    s, e = text_idx[a], text_idx[b] + 1  # a short answer from text token a to text token b
    rec = record(7, "q", html, tokens, "Gen", [ann((0, len(tokens)), [(s, e)])])
    stats = {}
    art = nq_record_to_article(rec, stats)
    para = art["paragraphs"][0]
    ans = para["qas"][0]["answers"][0]
    assert para["context"] == expected
    assert para["context"][ans["answer_start"]:ans["answer_start"] + len(ans["text"])] == ans["text"]
    assert ans["text"] and not ans["text"].endswith(" ") and not ans["text"].startswith(" ")
    assert stats == {"kept": 1}
    words = [t["token"] for t in tokens if not t["html_token"]]
    assert ans["text"].replace(" ", "") == "".join(words[a:b + 1]).replace(" ", "")
    simple = nq_record_to_article(simplified(rec))["paragraphs"][0]
    assert simple["context"] == " ".join(words)
    sa = simple["qas"][0]["answers"][0]
    assert sa["text"] == " ".join(words[a:b + 1]) and sa["answer_start"] == len(" ".join(words[:a] + [""])) * (a > 0)


def test_skip_reasons_are_counted_once_each():
    stats = {}
    nq_to_squad([], stats)
    assert stats == {r: 0 for r in SKIP_REASONS + ("kept", "records", "answer_text_mismatch")}
    assert nq_to_squad([], version="v")["version"] == "v" and nq_to_squad([])["version"] == "reqa_nq"


# ---------------------------------------------------------- input files, titles, the hub
def test_titles_from_simplified_urls():
    base = simplified(RECORDS[0])
    cases = [("https://en.wikipedia.org//w/index.php?title=S%C3%A3o_Paulo_(city)&amp;oldid=8", "São Paulo (city)"),
             ("https://en.wikipedia.org//w/index.php?oldid=8", ""), ("https://[bad/?title=X", ""), ("", "")]
    for url, title in cases:
        rec = dict(base, document_url=url)
        assert nq_to_squad([rec])["data"][0]["title"] == title, url
    assert nq_to_squad([dict(base, document_title="Given")])["data"][0]["title"] == "Given"
    del base["document_url"]
    assert nq_to_squad([base])["data"][0]["title"] == ""


def test_annotations_as_hugging_face_columns_and_missing_fields():
    rec = hf_record(RECORDS[0], with_bytes=True)
    assert nq_to_squad([dict(rec, annotations={})])["data"] == []  # an empty dict of columns: no annotation
    stats = {}
    nq_to_squad([dict(rec, annotations=None), dict(RECORDS[0], annotations=None)], stats)
    assert stats["no_annotation"] == 2
    a = {"short_answers": [{"start_token": 13, "end_token": 14}]}  # no long_answer field: no long answer
    stats = {}
    assert nq_to_squad([dict(RECORDS[0], annotations=[a])], stats)["data"] == [] and stats["no_long_answer"] == 1
    a = {"long_answer": {"end_token": 24}, "short_answers": [{"start_token": 13, "end_token": 14}]}
    stats = {}
    assert nq_to_squad([dict(RECORDS[0], annotations=[a])], stats)["data"] == [] and stats["no_long_answer"] == 1
    a = {"long_answer": {"start_token": 4, "end_token": 24}, "short_answers": None}
    stats = {}
    nq_to_squad([dict(RECORDS[0], annotations=[a])], stats)
    assert stats["not_one_short_answer"] == 1
    # out-of-range long answers are not paragraphs (the page has 35 tokens)
    for start in (35, 99, -2):
        stats = {}
        nq_to_squad([eiffel(1, "q", [ann((start, start + 1), [(13, 14)])])], stats)
        assert stats["long_answer_not_paragraph"] == 1, start
    # HF records without byte offsets, or without html, are joined like the simplified format
    rec = hf_record(RECORDS[0], with_bytes=True)
    no_html = dict(rec, document=dict(rec["document"], html=""))
    assert nq_to_squad([no_html])["data"][0]["paragraphs"][0]["context"].startswith("The Eiffel Tower is in Paris ,")
    q_str = dict(rec, question="plain question")
    assert nq_to_squad([q_str])["data"][0]["paragraphs"][0]["qas"][0]["question"] == "plain question"
    assert nq_to_squad([dict(rec, id=None) | {"id": 5}])["data"][0]["paragraphs"][0]["qas"][0]["id"] == "5"
    with pytest.raises(UserError, match=r"record 1: not a Natural Questions record"):
        nq_to_squad([RECORDS[0], {"example_id": 1, "document": "text"}])
    with pytest.raises(UserError, match="record 0: expected a JSON object"):
        nq_to_squad([[1, 2]])
    bad = dict(RECORDS[0], annotations=[{"long_answer": {"start_token": "x"}}])
    with pytest.raises(UserError, match=r"example_id 101\): malformed \(ValueError"):
        nq_to_squad([bad])
    with pytest.raises(UserError, match=r"example_id 9\): malformed \(KeyError"):
        nq_to_squad([{"id": 9, "document": {"tokens": {"token": ["<P>"]}}, "question": "q"}])


def test_file_input_blank_lines_bad_bytes_and_directories(tmp_path):
    d = tmp_path / "shards"
    d.mkdir()
    (d / "b.jsonl").write_text("\n" + json.dumps(RECORDS[8]) + "\n\n  \n" + json.dumps(RECORDS[9]) + "\n", encoding="utf-8")
    write_jsonl(d / "a.jsonl.gz", RECORDS[:1], gz=True)
    (d / "c.jsonl.tmp").write_text("{not read", encoding="utf-8")
    (d / "README.txt").write_text("{not read", encoding="utf-8")
    (d / "sub.jsonl").mkdir()
    from data.nq import iter_nq_records, nq_files
    assert [p.name for p in nq_files(d)] == ["a.jsonl.gz", "b.jsonl"]
    assert [r["example_id"] for r in iter_nq_records(nq_files(d))] == [101, 201, 202]
    assert nq_files(d / "b.jsonl") == [d / "b.jsonl"]
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "x.json").write_text("{}")
    with pytest.raises(UserError, match=r"no \*\.jsonl or \*\.jsonl\.gz files"):
        nq_files(empty)
    with pytest.raises(UserError, match="no such file or directory"):
        nq_files(tmp_path / "missing")
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"a": "\xff\xfe"}\n')
    with pytest.raises(UserError, match="bad.jsonl: cannot read"):
        list(iter_nq_records([bad]))
    trunc = tmp_path / "trunc.jsonl.gz"
    trunc.write_bytes(gzip.compress((json.dumps(RECORDS[0]) + "\n").encode())[:40])
    with pytest.raises(UserError, match="trunc.jsonl.gz: cannot read"):
        list(iter_nq_records([trunc]))
    plain_gz_name = tmp_path / "plain.jsonl.gz"  # gzip is told by its magic bytes, not by the name
    write_jsonl(plain_gz_name, RECORDS[:2], gz=False)
    assert len(list(iter_nq_records([plain_gz_name]))) == 2


def test_local_lookup_order_and_train_split(tmp_path, monkeypatch):
    from data.nq import _local_nq
    root = tmp_path / "data"
    (root / "nq" / "dev").mkdir(parents=True)  # an empty shard directory does not count
    (root / "nq" / "dev" / "notes.txt").write_text("x")
    write_jsonl(root / "nq" / "nq-dev-all.jsonl.gz", RECORDS[:2], gz=True)
    write_jsonl(root / "nq" / "simplified-nq-train.jsonl.gz", [simplified(r) for r in RECORDS[8:]], gz=True)
    assert _local_nq("dev", root) == root / "nq" / "nq-dev-all.jsonl.gz"
    assert _local_nq("train", root) == root / "nq" / "simplified-nq-train.jsonl.gz"
    (root / "nq" / "v1.0" / "dev").mkdir(parents=True)
    write_jsonl(root / "nq" / "v1.0" / "dev" / "nq-dev-00.jsonl", RECORDS[8:], gz=False)
    assert _local_nq("dev", root) == root / "nq" / "v1.0" / "dev"
    write_jsonl(root / "nq" / "dev" / "nq-dev-00.jsonl.gz", RECORDS[:1], gz=True)
    assert _local_nq("dev", root) == root / "nq" / "dev"
    assert _local_nq("dev", tmp_path / "nowhere") is None
    monkeypatch.delenv("QA_DATA_DIR", raising=False)
    assert _local_nq("dev", None) is None
    monkeypatch.setenv("QA_DATA_DIR", str(root))
    assert _local_nq("train", None) == root / "nq" / "simplified-nq-train.jsonl.gz"
    ds = load_reqa_nq("train", data_dir=None, data_file=None, arg=None)  # found through QA_DATA_DIR
    assert ds.split == "train" and ds.queries.question_ids == ["201", "202", "203"]
    assert ds.sources["nq_records"] == 3 and ds.sources["nq_not_one_short_answer"] == 0
    assert ds.corpus.texts[0] == "Tesla was born in Smiljan 1 in 1856 ."  # simplified: single spaces


def test_conversion_cache_survives_corruption(tmp_path):
    from data.nq import nq_squad
    f = tmp_path / "nq.jsonl"
    write_jsonl(f, RECORDS, gz=False)
    stats = {}
    squad, sources = nq_squad("dev", data_file=f, stats=stats)
    assert stats["kept"] == 6 and list(sources) == [str(f)] and len(sources[str(f)]) == 64
    assert squad == nq_to_squad(RECORDS)
    [cached] = (tmp_path / "cache" / "nq").glob("*.json.gz")
    stats2 = {}
    assert nq_squad("dev", data_file=f, stats=stats2)[0] == squad and stats2 == stats  # from the cache
    cached.write_bytes(b"\x1f\x8b garbage")
    stats3 = {}
    assert nq_squad("dev", data_file=f, stats=stats3)[0] == squad and stats3 == stats
    [again] = (tmp_path / "cache" / "nq").glob("*.json.gz")
    with gzip.open(again, "rt", encoding="utf-8") as fh:
        assert json.load(fh)["stats"] == stats
    with pytest.raises(UserError, match="no split"):
        nq_squad("test", data_file=f)


class _FakeDatasets:
    """Stands in for the ``datasets`` package (third party) so the hub path runs offline: its rows are given, or
    streamed from a local file of Hugging Face ``natural_questions`` records."""

    def __init__(self, rows=None, error=None, path=None):
        self.rows, self.error, self.path, self.calls = rows, error, path, []

    def load_dataset(self, name, split=None, streaming=False, revision=None):
        self.calls.append((name, split, streaming) + ((revision,) if revision else ()))
        if self.error:
            raise self.error
        if self.path is not None:
            return (json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines())
        return iter(self.rows)


@pytest.fixture
def hub_online(monkeypatch):
    """The hub taken as reachable (no probe) and the hub's NQ at a revision the test sets (``revision["sha"]``)."""
    from data import hub, nq

    for name in hub.OFFLINE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    hub.assume(reachable=True)
    revision = {"sha": "rev1"}
    monkeypatch.setattr(nq, "hub_revision", lambda: revision["sha"], raising=False)
    yield revision
    hub.forget()


def test_hub_fallback(tmp_path, monkeypatch, hub_online):
    import sys

    from data import hub, locations

    fake = _FakeDatasets(rows=[hf_record(r, with_bytes=True) for r in RECORDS])
    monkeypatch.setitem(sys.modules, "datasets", fake)
    ds = load_reqa_nq("dev", data_dir=tmp_path, data_file=None, arg=None)
    assert fake.calls == [("google-research-datasets/natural_questions", "validation", True, "rev1")]
    assert ds.queries.question_ids == ["101", "102", "103", "201", "202", "203"]
    assert ds.sources["hf:google-research-datasets/natural_questions"] == "dev" and ds.sources["nq_kept"] == 6
    assert ds.sources["hf_revision"] == "rev1"
    load_reqa_nq("train", data_dir=tmp_path, data_file=None, arg=None)
    assert fake.calls[-1] == ("google-research-datasets/natural_questions", "train", True, "rev1")
    hub_online["sha"] = "rev2"  # (a build from the hub is cached per revision: a new one is streamed)
    monkeypatch.setitem(sys.modules, "datasets", _FakeDatasets(error=ConnectionError("down")))
    with pytest.raises(UserError) as err:
        load_reqa_nq("dev", data_dir=tmp_path, data_file=None, arg=None)
    assert str(err.value) == (f"reqa_nq dev: Natural Questions not found: put the original-format shards "
                              f"nq-dev-00..04.jsonl.gz (NQ v1.0 release, v1.0/dev/) in {tmp_path / 'nq' / 'dev'}/, "
                              f"or pass --data-file FILE_OR_DIR; the hub was not reachable (ConnectionError)")
    hub_online["sha"] = "rev3"
    monkeypatch.setitem(sys.modules, "datasets", _FakeDatasets(rows=[{"example_id": 1, "document": "x"}]))
    with pytest.raises(UserError, match="not a Natural Questions record"):  # a UserError passes through as it is
        load_reqa_nq("dev", data_dir=tmp_path, data_file=None, arg=None)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    hub.forget()
    monkeypatch.delenv("QA_DATA_DIR", raising=False)
    monkeypatch.setattr(locations, "default_dirs", lambda: [tmp_path / "no-such-dir"])
    from data.nq import nq_squad
    with pytest.raises(UserError) as err:
        nq_squad("train", data_dir=None)
    assert str(err.value) == ("reqa_nq train: Natural Questions not found: put the original-format shards "
                              "nq-train-00..49.jsonl.gz (NQ v1.0 release, v1.0/train/) in $QA_DATA_DIR/nq/train/, "
                              "or pass --data-file FILE_OR_DIR; hub access is switched off (HF_DATASETS_OFFLINE)")


def test_reqa_nq_from_the_hub_is_built_once_and_cached(tmp_path, monkeypatch, hub_online):
    """reqa_nq with no local NQ streams the hub's NQ once: a second load, in this process or another, reads the
    built dataset from the cache; a new revision of the hub's dataset is streamed again.  The stand-in for the hub
    streams a small local file of Hugging Face natural_questions records."""
    import sys

    from data.registry import load_dataset

    records = tmp_path / "nq-hf.jsonl"
    write_jsonl(records, [hf_record(r, with_bytes=True) for r in RECORDS], gz=False)
    fake = _FakeDatasets(path=records)
    monkeypatch.setitem(sys.modules, "datasets", fake)
    first = load_dataset("reqa_nq", "dev", data_dir=tmp_path / "empty")
    assert len(fake.calls) == 1 and first.queries.question_ids == ["101", "102", "103", "201", "202", "203"]
    again = load_dataset("reqa_nq", "dev", data_dir=tmp_path / "empty")
    assert len(fake.calls) == 1, "reqa_nq streamed NQ from the hub again"
    assert again.corpus.texts == first.corpus.texts and again.queries.texts == first.queries.texts
    assert [g.tolist() for g in again.queries.gold] == [g.tolist() for g in first.queries.gold]
    assert again.sources == first.sources and again.sources["hf_revision"] == "rev1"
    assert len(list((tmp_path / "cache" / "datasets").glob("*.pkl"))) == 1
    load_dataset("reqa_nq", "train", data_dir=tmp_path / "empty")  # another split is another build
    assert len(fake.calls) == 2
    hub_online["sha"] = "rev2"
    load_dataset("reqa_nq", "dev", data_dir=tmp_path / "empty")
    assert len(fake.calls) == 3 and fake.calls[-1][-1] == "rev2"


def test_built_datasets_are_cached_for_files_and_data_dirs(tmp_path):
    f = tmp_path / "one.jsonl"
    write_jsonl(f, RECORDS, gz=False)
    built = tmp_path / "cache" / "datasets"
    load_reqa_nq("dev", data_dir=None, data_file=f, arg=None)
    assert len(list(built.glob("*.pkl"))) == 1
    root = tmp_path / "data"
    (root / "nq").mkdir(parents=True)
    write_jsonl(root / "nq" / "nq-dev-all.jsonl.gz", RECORDS[:3], gz=True)
    ds = load_reqa_nq("dev", data_dir=root, data_file=None, arg=None)
    assert len(list(built.glob("*.pkl"))) == 2 and ds.queries.question_ids == ["101", "102", "103"]


def test_clean_text_directly_on_both_formats():
    simple = _normalize(simplified(record(1, "q", *page2(W("a"), " ", H("<B>"), W("b"), H("</B>"), " ", W("c")), "T", [])), "t")
    assert simple.tokens == ["a", "<B>", "b", "</B>", "c"] and simple.is_html == [False, True, False, True, False]
    assert clean_text(simple, 0, 5) == "a b c" and clean_text(simple, -3, 1) == "a" and clean_text(simple, 3, 99) == "c"
    assert clean_text(simple, 0, 1, ignore_final_whitespace=False) == "a "  # a text token follows (past the tag)
    assert clean_text(simple, 2, 3, ignore_final_whitespace=False) == "b "
    assert clean_text(simple, 4, 5, ignore_final_whitespace=False) == "c"  # nothing follows
    assert clean_text(simple, 2, 4, ignore_final_whitespace=False) == "b "
    assert clean_text(simple, 0, 0, ignore_final_whitespace=False) == "" and clean_text(simple, 1, 2) == ""
    tail = _normalize(simplified(record(1, "q", *page2(W("a"), " ", H("<B>"), " ", H("</B>")), "T", [])), "t")
    assert clean_text(tail, 0, 1, ignore_final_whitespace=False) == "a"  # only tags follow
    # the original format, up to the page's last token, and nested or unbalanced brackets per gap
    html, tokens = page2(W("a"), "<<>> ", W("b"), '<a title="x y">', W("c"), " ")
    ex = _normalize(record(1, "q", html, tokens, "T", []), "t")
    n = len(tokens)
    assert clean_text(ex, 0, n) == "a bc" and clean_text(ex, 0, n, ignore_final_whitespace=False) == "a bc"
    assert clean_text(ex, -5, 1, ignore_final_whitespace=False) == "a " and clean_text(ex, 2, 9) == "c"
    # byte offsets that cut a character are decoded with replacement, not an error
    html, tokens = page2(W("a"), "\u00e9 ", W("b"))
    tokens[0]["end_byte"] += 1  # now inside the two bytes of é
    ex = _normalize(record(1, "q", html, tokens, "T", []), "t")
    assert clean_text(ex, 0, 2) == "a b"


def test_empty_answers_missing_ids_and_titles():
    stats = {}
    # a short answer holding only tags: an empty answer, kept (as Google's converter does) and counted
    squad = nq_to_squad([edge(1, SP_HTML, SP_TOKENS, [ann2((0, 12), [(6, 8)])])], stats)
    assert qas(squad)[0][1]["answers"] == [{"answer_start": 17, "text": ""}]
    assert stats["kept"] == 1 and stats["answer_text_mismatch"] == 1
    rec = dict(RECORDS[0])
    del rec["document_title"]
    assert nq_to_squad([rec])["data"][0]["title"] == ""
    with pytest.raises(UserError, match=r"NQ record 0 \(example_id \?\): malformed \(KeyError"):
        nq_to_squad([{"document_tokens": []}])
    hf = hf_record(RECORDS[0], with_bytes=True)
    del hf["id"]
    hf["document"] = dict(hf["document"], title=None)
    art = nq_to_squad([hf])["data"][0]
    assert art["title"] == "" and art["paragraphs"][0]["qas"][0]["id"] == ""
    stats = {}
    no_tokens = dict(hf, document=dict(hf["document"], tokens={}))
    assert nq_to_squad([no_tokens], stats)["data"] == [] and stats["long_answer_not_paragraph"] == 1
    # the simplified text of a <P> holding only empty tokens (double spaces) has no text
    stats = {}
    blank = {"example_id": 2, "question_text": "q", "document_url": "", "document_text": "<P>   </P>",
             "annotations": [ann((0, 5), [(1, 2)])]}
    assert nq_to_squad([blank], stats)["data"] == [] and stats["empty_paragraph"] == 1
