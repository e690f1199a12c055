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
