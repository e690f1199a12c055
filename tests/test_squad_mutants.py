"""data/squad.py: reading SQuAD v1.1 files and validating their structure, called directly.

The official SQuAD v1.1 format: ``{"data": [{"paragraphs": [{"context": str, "qas":
[{"id", "question", "answers": [{"text", "answer_start"}]}]}]}]}`` with
``answer_start`` a character (code point) offset into ``context`` where the answer
text begins.  The real slices come from SQuAD v1.1 dev and XQuAD Thai; every bad
input must be one ``UserError`` naming the file and the field (module docstring).
"""

from __future__ import annotations

import copy
import gzip
import io
import json
import zipfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data.errors import UserError
from data.squad import load_squad_json, read_json_file, validate_squad
from tests.conftest import DATA


@pytest.fixture(scope="module")
def dev_bytes() -> bytes:
    with zipfile.ZipFile(DATA / "squad" / "dev-v1.1.json.zip") as zf:
        return zf.read("dev-v1.1.json")


@pytest.fixture(scope="module")
def base(dev_bytes) -> dict:
    """Two real dev paragraphs and a real Thai one (XQuAD), as one SQuAD v1.1 dict."""
    dev = json.loads(dev_bytes)
    th = json.loads((DATA / "xquad" / "xquad.th.json").read_text(encoding="utf-8"))
    return {"version": "1.1", "data": [
        {"title": dev["data"][0]["title"], "paragraphs": dev["data"][0]["paragraphs"][:2]},
        {"title": th["data"][0]["title"], "paragraphs": th["data"][0]["paragraphs"][:1]},
    ]}


def fresh(base):
    return copy.deepcopy(base)


# ------------------------------------------------------------------ file reading
def test_plain_gzip_zip_and_bom_files_read_the_same(tmp_path, dev_bytes, base):
    want = json.loads(dev_bytes)
    (tmp_path / "d.json").write_bytes(dev_bytes)
    (tmp_path / "d.json.gz").write_bytes(gzip.compress(dev_bytes))
    (tmp_path / "bom.json").write_bytes(b"\xef\xbb\xbf" + json.dumps(base, ensure_ascii=False).encode("utf-8"))
    with zipfile.ZipFile(tmp_path / "mac.zip", "w") as zf:  # macOS archives carry a resource-fork twin
        zf.writestr("__MACOSX/._dev.json", b"\x00\x05\x16\x07 not json")
        zf.writestr("README.txt", "not the data")
        zf.writestr("dev/dev.json", dev_bytes)
    assert read_json_file(tmp_path / "d.json") == want
    assert read_json_file(str(tmp_path / "d.json.gz")) == want
    assert read_json_file(tmp_path / "mac.zip") == want
    assert read_json_file(DATA / "squad" / "dev-v1.1.json.zip") == want  # the official archive
    assert read_json_file(tmp_path / "bom.json") == base
    # load_squad_json validates what it read and returns it
    assert load_squad_json(tmp_path / "mac.zip") == want
    assert load_squad_json(tmp_path / "bom.json") == base


def one_line_error(fn, *args, **kw) -> str:
    with pytest.raises(UserError) as e:
        fn(*args, **kw)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_unreadable_files_are_one_line_errors(tmp_path):
    missing = tmp_path / "nope.json"
    assert one_line_error(read_json_file, missing) == f"{missing}: no such file"
    assert one_line_error(read_json_file, tmp_path) == f"{tmp_path}: no such file"  # a directory

    two = tmp_path / "two.zip"
    with zipfile.ZipFile(two, "w") as zf:
        zf.writestr("a.json", "{}")
        zf.writestr("b.json", "{}")
    assert one_line_error(read_json_file, two) == f"{two}: expected one .json member in the zip, found 2"
    none = tmp_path / "none.zip"
    with zipfile.ZipFile(none, "w") as zf:
        zf.writestr("a.txt", "{}")
        zf.writestr("__MACOSX/._a.json", "{}")
    assert one_line_error(read_json_file, none) == f"{none}: expected one .json member in the zip, found 0"

    latin = tmp_path / "latin.json"
    raw = '{"data": [], "title": "Café Zürich"}'.encode("latin-1")
    latin.write_bytes(raw)
    at = raw.index("é".encode("latin-1"))
    assert one_line_error(read_json_file, latin) == f"{latin}: not UTF-8 text (byte {at})"

    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(gzip.compress(b'{"data": []}' * 50)[:30])
    assert one_line_error(read_json_file, cut).startswith(f"{cut}: cannot read (")
    badzip = tmp_path / "bad.zip"
    badzip.write_bytes(b"PK\x03\x04" + b"\x00" * 60)
    assert one_line_error(read_json_file, badzip).startswith(f"{badzip}: cannot read (")

    broken = tmp_path / "broken.json"
    broken.write_text('{\n  "data": [\n    1,,\n  ]\n}\n', encoding="utf-8")
    # line 3 is '    1,,': the second comma is its 7th character
    assert one_line_error(read_json_file, broken) == f"{broken}: malformed JSON at line 3 column 7 (Expecting value)"


def test_load_names_the_file_and_passes_skip_and_stats(tmp_path, base):
    bad = fresh(base)
    bad["data"][0]["paragraphs"][0]["qas"][1]["answers"][0]["answer_start"] += 1
    path = tmp_path / "sub" / "bad.json"
    path.parent.mkdir()
    path.write_text(json.dumps(bad, ensure_ascii=False), encoding="utf-8")
    assert one_line_error(load_squad_json, path).startswith("bad.json: data[0].paragraphs[0].qas[1].answers[0].answer_start: ")
    stats = {}
    got = load_squad_json(path, skip_bad_records=True, stats=stats)
    assert stats == {"skipped_records": 1}
    want = fresh(base)
    del want["data"][0]["paragraphs"][0]["qas"][1]
    assert got == want


# --------------------------------------------------------------- validation
def para(d, a=0, p=0):
    return d["data"][a]["paragraphs"][p]


def qa_(d, q=0, a=0, p=0):
    return para(d, a, p)["qas"][q]


def answer(d, k=0, q=0):
    return qa_(d, q)["answers"][k]


def _set(obj, key, value):
    obj[key] = value


def _del(obj, key):
    del obj[key]


P = "data[0].paragraphs[0]"
Q = f"{P}.qas[1]"
BAD = {  # case -> (change to the base, the message after "case.json: ")
    "top level is a list": (lambda d: [d], "top level must be an object with a 'data' list"),
    "no data": (lambda d: {"version": "1.1"}, "top level: missing field 'data'"),
    "data is an object": (lambda d: {"data": {"x": 1}}, "top level.data: expected list, got dict"),
    "article is a number": (lambda d: d["data"].append(7), "data[2]: missing field 'paragraphs'"),
    "article is a list": (lambda d: d["data"].append(["paragraphs"]), "data[2]: missing field 'paragraphs'"),
    "paragraphs is text": (lambda d: _set(d["data"][1], "paragraphs", "x"), "data[1].paragraphs: expected list, got str"),
    "no context": (lambda d: _del(para(d, 0, 1), "context"), "data[0].paragraphs[1]: missing field 'context'"),
    "context is a number": (lambda d: _set(para(d, 1), "context", 3), "data[1].paragraphs[0].context: expected str, got int"),
    "no qas": (lambda d: _del(para(d), "qas"), f"{P}: missing field 'qas'"),
    "blank context": (lambda d: _set(para(d, 0, 1), "context", "\u00a0 \u3000\n"), "data[0].paragraphs[1].context: empty context"),
    "id is a float": (lambda d: _set(qa_(d, 1), "id", 1.5), f"{Q}.id: expected str or int, got float"),
    "no id": (lambda d: _del(qa_(d, 1), "id"), f"{Q}: missing field 'id'"),
    "no question": (lambda d: _del(qa_(d, 1), "question"), f"{Q}: missing field 'question'"),
    "question is a list": (lambda d: _set(qa_(d, 1), "question", ["q"]), f"{Q}.question: expected str, got list"),
    "blank question": (lambda d: _set(qa_(d, 1), "question", " \u3000\t"), f"{Q}.question: empty question"),
    "duplicate id": (lambda d: _set(qa_(d, 1), "id", qa_(d, 0)["id"]),
                     f"{Q}.id: duplicate id '56be4db0acb8001400a502ec' (also at {P}.qas[0])"),
    "duplicate int id": (lambda d: (_set(qa_(d, 0), "id", 7), _set(qa_(d, 1), "id", "7")), f"{Q}.id: duplicate id '7' (also at {P}.qas[0])"),
    "no answers field": (lambda d: _del(qa_(d, 1), "answers"), f"{Q}: missing field 'answers'"),
    "answers is text": (lambda d: _set(qa_(d, 1), "answers", "Denver"), f"{Q}.answers: expected list, got str"),
    "no answers": (lambda d: _set(qa_(d, 1), "answers", []), f"{Q}.answers: no answers"),
    "no answers, not impossible": (lambda d: (_set(qa_(d, 1), "answers", []), _set(qa_(d, 1), "is_impossible", False)),
                                   f"{Q}.answers: no answers"),
    "answer is text": (lambda d: qa_(d, 1)["answers"].append("x"), f"{Q}.answers[3]: missing field 'text'"),
    "answer text is a number": (lambda d: _set(qa_(d, 1)["answers"][2], "text", 5), f"{Q}.answers[2].text: expected str, got int"),
    "no answer_start": (lambda d: _del(qa_(d, 1)["answers"][0], "answer_start"), f"{Q}.answers[0]: missing field 'answer_start'"),
    "answer_start is text": (lambda d: _set(qa_(d, 1)["answers"][0], "answer_start", "177"),
                             f"{Q}.answers[0].answer_start: expected int, got str"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_structure_is_one_line_naming_the_field(case, base):
    change, tail = BAD[case]
    d = fresh(base)
    out = change(d)
    if isinstance(out, (dict, list)):  # the change built a new top level
        d = out
    assert one_line_error(validate_squad, d, name="case.json") == f"case.json: {tail}"
    if case.startswith(("top level is", "no data")):
        assert one_line_error(validate_squad, d) == f"<squad>: {tail}"  # the default name


def test_answer_offsets_are_code_points_inside_the_context(base):
    d = fresh(base)
    th = para(d, 1)
    ctx = th["context"]
    assert any(ord(ch) > 0xE00 for ch in ctx)  # Thai
    assert validate_squad(d) is d
    where = "data[1].paragraphs[0].qas[0].answers[0].answer_start"
    a = th["qas"][0]["answers"][0]
    for start in (-1, len(ctx), len(ctx) + 5):
        a["answer_start"] = start
        assert one_line_error(validate_squad, d, name="th.json") == (
            f"th.json: {where}: {start} is outside the context (length {len(ctx)})")
    # a bool is not an offset, even where the text would match
    a.update(text=ctx[1:6], answer_start=True)
    assert one_line_error(validate_squad, d, name="th.json") == f"th.json: {where}: expected int, got bool"
    # first and last characters are valid offsets; an empty answer just past the end is not
    a.update(text=ctx[0], answer_start=0)
    validate_squad(d)
    a.update(text=ctx[-1], answer_start=len(ctx) - 1)
    validate_squad(d)
    a.update(text="", answer_start=len(ctx))
    assert one_line_error(validate_squad, d).endswith("answers[0].text: empty answer")
    a.update(text=ctx[-1], answer_start=len(ctx))
    assert "is outside the context" in one_line_error(validate_squad, d)
    # one code point off: the message quotes the first 40 characters of the answer
    a.update(text=ctx[10:70], answer_start=11)
    assert one_line_error(validate_squad, d, name="th.json") == (
        f"th.json: {where}: 11 does not point at the answer text {ctx[10:50]!r}")
    # a one-character context
    tiny = {"data": [{"paragraphs": [{"context": "é", "qas": [qa1("t", "é", 0)]}]}]}
    validate_squad(tiny)
    tiny["data"][0]["paragraphs"][0]["qas"][0]["answers"] = [{"text": "é", "answer_start": 1}]
    assert one_line_error(validate_squad, tiny) == "<squad>: data[0].paragraphs[0].qas[0].answers[0].answer_start: 1 is outside the context (length 1)"


def qa1(qid, text, start, question="Was?"):
    return {"id": qid, "question": question, "answers": [{"text": text, "answer_start": start}]}


def test_valid_variants_pass(base, dev_bytes):
    d = fresh(base)
    para(d)["qas"].append({"id": 12, "question": "Unmöglich?", "answers": [], "is_impossible": True})
    d["data"][0]["paragraphs"].append({"context": " \u00a0", "qas": []})  # a blank paragraph without questions
    assert validate_squad(d, name="v.json") is d
    stats = {}
    dev = json.loads(dev_bytes)
    assert validate_squad(dev, stats=stats) is dev
    assert stats == {"skipped_records": 0}
    th = json.loads((DATA / "xquad" / "xquad.th.json").read_text(encoding="utf-8"))
    assert validate_squad(th) is th  # includes contexts that begin with U+FEFF


def test_skip_bad_records_drops_exactly_the_bad_questions(base):
    d = fresh(base)
    qas = para(d)["qas"]
    good = copy.deepcopy(qas)
    qas[0]["answers"][1]["answer_start"] += 1  # bad
    qas[2]["question"] = ""  # bad
    bad_id = qas[0]["id"]
    qas.append({"id": bad_id, "question": "Dieselbe ID wie eine verworfene Frage?", "answers": qas[1]["answers"]})  # good
    qas.append({"id": "x", "question": "Keine Antworten?", "answers": []})  # bad
    stats = {"skipped_records": 3}
    out = validate_squad(d, skip_bad_records=True, stats=stats)
    assert stats == {"skipped_records": 6}
    assert [q["id"] for q in para(out)["qas"]] == [good[1]["id"]] + [g["id"] for g in good[3:]] + [bad_id]
    assert para(out, 0, 1) == para(base, 0, 1)
    validate_squad(d, skip_bad_records=True)  # no stats: nothing to count into
    # strict: the first bad question fails the load
    d = fresh(base)
    para(d)["qas"][3]["question"] = "\u3000"
    para(d)["qas"][4]["question"] = ""
    assert one_line_error(validate_squad, d, name="s.json") == "s.json: data[0].paragraphs[0].qas[3].question: empty question"


CTX = "Zürich 東京 กรุงเทพ\u00a0é"


@settings(max_examples=80, deadline=None)
@given(start=st.integers(-3, len(CTX) + 3), length=st.integers(0, 6))
def test_any_offset_is_valid_exactly_when_it_points_at_the_text(start, length):
    text = CTX[max(start, 0): max(start, 0) + length] or "Z"
    d = {"data": [{"paragraphs": [{"context": CTX, "qas": [qa1("h", text, start)]}]}]}
    # SQuAD v1.1: answer_start is a code-point offset into the context where the answer text begins
    # and a blank answer text (a lone space here) is refused wherever it points
    valid = 0 <= start < len(CTX) and CTX[start:].startswith(text) and bool(text.strip())
    if valid:
        assert validate_squad(d) is d
    else:
        with pytest.raises(UserError):
            validate_squad(d)
