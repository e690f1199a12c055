"""Read SQuAD v1.1-format files (plain JSON, .gz or .zip) and validate them.

Every problem is reported as one line naming the file and the field, e.g.
``dev.json: data[3].paragraphs[0].qas[2].answers[0].answer_start: 912 is
outside the context (length 640)``.
"""

from __future__ import annotations

import gzip
import io
import json
import zipfile
from pathlib import Path
from typing import Any

from data.errors import UserError


def read_json_file(path: str | Path) -> Any:
    """Parse a JSON file that may be plain, gzipped or the single JSON member of a zip."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        elif raw[:4] == b"PK\x03\x04":
            with zipfile.ZipFile(io.BytesIO(raw)) as zf:
                members = [n for n in zf.namelist() if n.endswith(".json") and not n.startswith("__MACOSX")]
                if len(members) != 1:
                    raise UserError(f"{path}: expected one .json member in the zip, found {len(members)}")
                raw = zf.read(members[0])
        text = raw.decode("utf-8-sig")
    except UserError:
        raise
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not UTF-8 text (byte {e.start})") from None
    except (OSError, EOFError, zipfile.BadZipFile, gzip.BadGzipFile) as e:
        raise UserError(f"{path}: cannot read ({e})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: malformed JSON at line {e.lineno} column {e.colno} ({e.msg})") from None


def load_squad_json(path: str | Path, *, skip_bad_records: bool = False, stats: dict | None = None) -> dict:
    """Load and validate a SQuAD v1.1-format file; returns the parsed dict.

    With ``skip_bad_records`` a question whose answers are invalid is dropped
    and counted in ``stats["skipped_records"]`` instead of failing the load.
    """
    path = Path(path)
    squad = read_json_file(path)
    return validate_squad(squad, name=path.name, skip_bad_records=skip_bad_records, stats=stats)


def validate_squad(squad: Any, *, name: str = "<squad>", skip_bad_records: bool = False, stats: dict | None = None) -> dict:
    """Check the SQuAD structure; raise UserError naming the first bad field."""

    def need(obj, key, typ, where):
        if not isinstance(obj, dict) or key not in obj:
            raise UserError(f"{name}: {where}: missing field '{key}'")
        val = obj[key]
        if not isinstance(val, typ):
            raise UserError(f"{name}: {where}.{key}: expected {_tname(typ)}, got {type(val).__name__}")
        return val

    if not isinstance(squad, dict):
        raise UserError(f"{name}: top level must be an object with a 'data' list")
    articles = need(squad, "data", list, "top level")
    skipped = 0
    seen_ids: dict[str, str] = {}
    for a, article in enumerate(articles):
        paragraphs = need(article, "paragraphs", list, f"data[{a}]")
        for p, para in enumerate(paragraphs):
            where_p = f"data[{a}].paragraphs[{p}]"
            context = need(para, "context", str, where_p)
            qas = need(para, "qas", list, where_p)
            if not context.strip() and qas:
                raise UserError(f"{name}: {where_p}.context: empty context")
            keep = []
            for q, qa in enumerate(qas):
                where_q = f"{where_p}.qas[{q}]"
                try:
                    qid = need(qa, "id", (str, int), where_q)
                    question = need(qa, "question", str, where_q)
                    if not question.strip():
                        raise UserError(f"{name}: {where_q}.question: empty question")
                    if str(qid) in seen_ids:
                        raise UserError(f"{name}: {where_q}.id: duplicate id {qid!r} (also at {seen_ids[str(qid)]})")
                    answers = need(qa, "answers", list, where_q)
                    if not answers and not qa.get("is_impossible", False):
                        raise UserError(f"{name}: {where_q}.answers: no answers")
                    for k, ans in enumerate(answers):
                        where_a = f"{where_q}.answers[{k}]"
                        text = need(ans, "text", str, where_a)
                        start = need(ans, "answer_start", int, where_a)
                        if isinstance(start, bool) or not 0 <= start < max(len(context), 1):
                            raise UserError(
                                f"{name}: {where_a}.answer_start: {start} is outside the context (length {len(context)})"
                            )
                        if context[start : start + len(text)] != text:
                            raise UserError(
                                f"{name}: {where_a}.answer_start: {start} does not point at the answer text {text[:40]!r}"
                            )
                except UserError:
                    if not skip_bad_records:
                        raise
                    skipped += 1
                    continue
                seen_ids[str(qid)] = where_q
                keep.append(qa)
            if skip_bad_records:
                para["qas"] = keep
    if stats is not None:
        stats["skipped_records"] = stats.get("skipped_records", 0) + skipped
    return squad


def _tname(typ) -> str:
    if isinstance(typ, tuple):
        return " or ".join(t.__name__ for t in typ)
    return typ.__name__
