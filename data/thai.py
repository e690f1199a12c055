"""Thai: sentence and word segmentation, and ReQA-style iapp-wiki-qa-squad.

``iapp_wiki_qa_squad`` (iApp Technology 2021; Thai Wikipedia paragraphs with
extractive questions, SQuAD-style) becomes a ReQA answer-retrieval set (Ahmad
et al. 2019) with :func:`data.reqa.build_reqa`, Thai sentences standing in for
ReQA's English ones.

Sentences: PyThaiNLP's ``crfcut`` (a CRF sentence segmenter trained on TED
transcripts, Lowphansirikul et al. 2020, "Sentence segmentation for Thai";
its model ships inside the pythainlp wheel and needs the ``python-crfsuite``
package; it works offline).  Thai marks sentence ends with a space, not a full
stop, and two rules of crfcut cut too much on Wikipedia text, so
:func:`thai_sentence_breaks` undoes two kinds of break:

* after a Thai abbreviation (a Thai letter followed by ``.``: ``พ.ศ.``,
  ``ค.ศ.``, ``น.``, ``ม.ค.``), which crfcut always cuts after (any token that
  ends with ``.``) -- ``1 พฤศจิกายน พ.ศ. 2476`` is a date, not two sentences;
* where no white space separates the two pieces (``ใคร ใคร...ก็บินได้``).

Line breaks are always sentence breaks.  Spans are exact character offsets in
the original text, without leading/trailing white space.

Answers that still straddle a break are handled by merging, for that
paragraph, the sentences the answer spans into one candidate (so the gold
candidate always contains the whole answer; ReQA instead keeps the sentence
holding ``answer_start``).  Answers padded with white space are trimmed first
(offsets shifted).  Counts are in ``dataset.sources``: ``iapp_answers_trimmed``,
``iapp_straddling_crfcut`` (answers crossing a raw crfcut break),
``iapp_straddling`` (crossing a break after the two rules: the ones merged) and
``iapp_breaks_merged``.

Words: PyThaiNLP's ``newmm`` dictionary segmenter (maximal matching over Thai
character clusters; offline), white space dropped -- :func:`thai_word_tokens`,
for Thai BM25 (pre-tokenized text) and Thai EM/F1.
"""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path
from typing import Iterable

from data import locations
from data.errors import UserError
from data.types import Dataset

IAPP_NAME = "iapp_wiki_qa_squad"
IAPP_HUB = "iapp/iapp_wiki_qa_squad"
IAPP_MEMBERS = {"train": "data/train.jsonl", "dev": "data/valid.jsonl", "test": "data/test.jsonl"}
IAPP_SPLIT_ALIASES = {"validation": "dev", "valid": "dev", "val": "dev"}
THAI_VERSION = "1"

_THAI_ABBREVIATION_END = re.compile(r"[\u0E01-\u0E2E]\.$")


# ------------------------------------------------------------- segmentation
def _crfcut(text: str) -> list[str]:
    try:
        from pythainlp.tokenize import sent_tokenize
    except ImportError:
        raise UserError("Thai sentence splitting needs pythainlp: pip install pythainlp python-crfsuite") from None
    try:
        return sent_tokenize(text, engine="crfcut")
    except ModuleNotFoundError as e:
        raise UserError(f"Thai sentence splitting (pythainlp crfcut) needs {e.name}: pip install python-crfsuite") from None


def crfcut_spans(text: str) -> list[tuple[int, int]]:
    """Raw crfcut sentence spans of ``text`` (line breaks are breaks), white space trimmed."""
    spans: list[tuple[int, int]] = []
    line_start = 0
    for line in text.split("\n"):
        if line.strip():
            pos = line_start
            for piece in _crfcut(line):
                found = text.find(piece, pos)
                if found < 0:  # crfcut is lossless on its input; stay safe if that ever changes
                    found = text.find(piece.strip(), pos)
                    piece = piece.strip()
                if found < 0:
                    continue
                start, end = found, found + len(piece)
                pos = end
                while start < end and text[start].isspace():
                    start += 1
                while end > start and text[end - 1].isspace():
                    end -= 1
                if end > start:
                    spans.append((start, end))
        line_start += len(line) + 1
    return spans


def rejoin_spans(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Undo breaks after a Thai abbreviation and breaks with no white space between the pieces."""
    out: list[tuple[int, int]] = []
    for start, end in spans:
        if out:
            prev_start, prev_end = out[-1]
            gap = text[prev_end:start]
            if "\n" not in gap and (gap == "" or _THAI_ABBREVIATION_END.search(text[prev_start:prev_end])):
                out[-1] = (prev_start, end)
                continue
        out.append((start, end))
    return out


def thai_sentence_breaks(text: str) -> list[tuple[int, int]]:
    """Character spans ``(start, end)`` of the Thai sentences of ``text`` (crfcut + two rejoin rules)."""
    return rejoin_spans(text, crfcut_spans(text))


def squad_language(squad: dict, sample_chars: int = 20000) -> str:
    """``"th"`` when most letters of a SQuAD dict's first paragraphs are Thai script, else ``"en"``."""
    thai = other = 0
    for article in squad.get("data", []):
        for para in article.get("paragraphs", []):
            for ch in para.get("context", ""):
                if "\u0e00" <= ch <= "\u0e7f":
                    thai += 1
                elif ch.isalpha():
                    other += 1
            if thai + other >= sample_chars:
                return "th" if thai > other else "en"
    return "th" if thai > other else "en"


def thai_sentences(text: str) -> list[str]:
    return [text[s:e] for s, e in thai_sentence_breaks(text)]


def thai_word_tokens(text: str) -> list[str]:
    """Thai words of ``text`` (PyThaiNLP ``newmm``), white space dropped; Latin words and numbers kept as they are."""
    try:
        from pythainlp.tokenize import word_tokenize
    except ImportError:
        raise UserError("Thai word segmentation needs pythainlp: pip install pythainlp") from None
    return [t for t in word_tokenize(text, engine="newmm", keep_whitespace=False) if t.strip()]


# ------------------------------------------------- answers crossing a break
def merge_spans_for_answers(spans: list[tuple[int, int]], answers: Iterable[tuple[int, int]]) -> tuple[list[tuple[int, int]], int, int]:
    """Merge the sentences each answer ``(start, end)`` overlaps into one span.

    Returns (spans, number of answers that crossed a break, number of breaks removed).
    """
    drop: set[int] = set()  # break i sits between spans[i] and spans[i + 1]
    crossing = 0
    for a_start, a_end in answers:
        hit = [i for i, (s, e) in enumerate(spans) if s < a_end and a_start < e]
        if len(hit) > 1:
            crossing += 1
            drop.update(range(hit[0], hit[-1]))
    merged: list[tuple[int, int]] = []
    for i, span in enumerate(spans):
        if i > 0 and (i - 1) in drop:
            merged[-1] = (merged[-1][0], span[1])
        else:
            merged.append(span)
    return merged, crossing, len(drop)


# ------------------------------------------------------------- iapp records
def iapp_records_to_squad(records: Iterable[dict], stats: dict | None = None, where: str = IAPP_NAME) -> dict:
    """iapp_wiki_qa_squad records (file or hub rows) -> a SQuAD v1.1-format dict.

    Articles are grouped by ``article_id`` and paragraphs by context text.
    Answer texts padded with white space are trimmed and their offsets moved
    (counted in ``stats["answers_trimmed"]``); an offset that does not point
    at its answer text is a UserError.
    """
    stats = {} if stats is None else stats
    stats.setdefault("answers_trimmed", 0)
    articles: dict[str, dict] = {}
    for n, r in enumerate(records):
        try:
            context, qid, question, ans = r["context"], str(r["question_id"]), r["question"], r["answers"]
            art = articles.setdefault(str(r.get("article_id", r.get("title", ""))), {"title": r.get("title") or "", "paragraphs": {}})
            answers = []
            for text, start in zip(ans["text"], ans["answer_start"]):
                start = int(start)
                if context[start : start + len(text)] != text:
                    raise UserError(f"{where}: record {n} (question_id {qid}): answer_start {start} does not point at {text[:30]!r}")
                trimmed = text.strip()
                if trimmed != text:
                    stats["answers_trimmed"] += 1
                    start += len(text) - len(text.lstrip())
                if trimmed:
                    answers.append({"text": trimmed, "answer_start": start})
        except (KeyError, TypeError, ValueError) as e:
            raise UserError(f"{where}: record {n}: malformed ({type(e).__name__}: {e})") from None
        if not answers:
            raise UserError(f"{where}: record {n} (question_id {qid}): no answer")
        art["paragraphs"].setdefault(context, []).append({"id": qid, "question": question, "answers": answers})
    return {
        "version": IAPP_NAME,
        "data": [
            {"title": a["title"], "paragraphs": [{"context": c, "qas": q} for c, q in a["paragraphs"].items()]}
            for a in articles.values()
        ],
    }


def _read_jsonl_text(text: str, where: str) -> list[dict]:
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise UserError(f"{where}: line {lineno}: malformed JSON ({e.msg})") from None
    return rows


def _local_iapp(data_dir: Path | None, data_file: Path | None) -> Path | None:
    if data_file is not None:
        if not Path(data_file).is_file():
            raise UserError(f"{data_file}: no such file")
        return Path(data_file)
    data_dir = locations.data_dir(data_dir)
    if data_dir is not None:
        p = data_dir / IAPP_NAME / "data.zip"
        if p.is_file():
            return p
    return None


def read_iapp_file(path: Path, split: str) -> list[dict]:
    """The records of ``split`` from the iapp ``data.zip`` (or from one of its ``.jsonl`` files)."""
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as zf:
                member = IAPP_MEMBERS[split]
                if member not in zf.namelist():
                    raise UserError(f"{path}: no member {member} (split {split})")
                text = zf.read(member).decode("utf-8-sig")
            return _read_jsonl_text(text, f"{path}:{member}")
        return _read_jsonl_text(Path(path).read_text(encoding="utf-8-sig"), str(path))
    except (OSError, zipfile.BadZipFile, UnicodeDecodeError) as e:
        raise UserError(f"{path}: cannot read ({e})") from None


def iapp_squad(split: str, *, data_dir: Path | None = None, data_file: Path | None = None,
               stats: dict | None = None) -> tuple[dict, dict]:
    """The SQuAD-format dict of iapp_wiki_qa_squad ``split`` and its sources (path -> sha256)."""
    from data.io import sha256_file

    split = _split(split)
    path = _local_iapp(data_dir, data_file)
    if path is not None:
        return iapp_records_to_squad(read_iapp_file(path, split), stats, where=str(path)), {str(path): sha256_file(path)}
    from data.beir import hub_offline, offline_reason

    where = locations.shown_dir(data_dir)
    message = (f"{IAPP_NAME} {split}: put the dataset's data.zip (data/train.jsonl, data/valid.jsonl, data/test.jsonl)"
               f" at {where / IAPP_NAME / 'data.zip'}, or pass --data-file")
    if hub_offline():
        raise UserError(message + "; " + offline_reason())
    try:
        import datasets

        rows = datasets.load_dataset(IAPP_HUB, split={"dev": "validation"}.get(split, split))
    except Exception as e:
        raise UserError(message + f"; the hub was not reachable ({type(e).__name__})") from None
    return iapp_records_to_squad(rows, stats, where=IAPP_HUB), {f"hf:{IAPP_HUB}": split}


def _split(split: str) -> str:
    split = IAPP_SPLIT_ALIASES.get(split, split)
    if split not in IAPP_MEMBERS:
        raise UserError(f"{IAPP_NAME} has no split {split!r}; use train, validation (dev) or test")
    return split


def build_thai_reqa(squad: dict, *, name: str, split: str, sources: dict | None = None) -> Dataset:
    """ReQA dataset of a Thai SQuAD dict: Thai sentences, answer-crossing sentences merged."""
    from data.progress import tqdm  # a line every 30 s when stderr is not a terminal

    from data.reqa import build_reqa

    answers_of: dict[str, list[tuple[int, int]]] = {}
    for article in squad["data"]:
        for para in article["paragraphs"]:
            spans_list = answers_of.setdefault(para["context"], [])
            for qa in para["qas"]:
                spans_list += [(a["answer_start"], a["answer_start"] + len(a["text"])) for a in qa["answers"]]
    spans_of: dict[str, list[tuple[int, int]]] = {}
    counts = {"straddling_crfcut": 0, "straddling": 0, "breaks_merged": 0}
    for context, answers in tqdm(answers_of.items(), desc=f"{name} sentences", unit="para", leave=False):
        raw = crfcut_spans(context)
        counts["straddling_crfcut"] += merge_spans_for_answers(raw, answers)[1]
        spans, crossing, merged = merge_spans_for_answers(rejoin_spans(context, raw), answers)
        counts["straddling"] += crossing
        counts["breaks_merged"] += merged
        spans_of[context] = spans

    def breaks(text: str) -> list[tuple[int, int]]:
        return spans_of[text] if text in spans_of else thai_sentence_breaks(text)

    meta = dict(sources or {})
    meta.update({f"iapp_{k}": v for k, v in counts.items()})
    return build_reqa(squad, name=name, split=split, sentence_breaks=breaks, language="th", sources=meta)


def load_iapp(split: str, *, data_dir: Path | None = None, data_file: Path | None = None, arg: str | None = None,
              skip_bad_records: bool = False) -> Dataset:
    """Registry loader for ``iapp_wiki_qa_squad`` (train, validation/dev, test) as a Thai ReQA dataset."""
    from data.cache import cached_build
    from data.io import sha256_file

    split = _split(split)
    path = _local_iapp(data_dir, data_file)

    def build() -> Dataset:
        stats: dict = {}
        squad, sources = iapp_squad(split, data_dir=data_dir, data_file=data_file, stats=stats)
        sources = dict(sources)
        sources["iapp_answers_trimmed"] = stats["answers_trimmed"]
        return build_thai_reqa(squad, name=IAPP_NAME, split=split, sources=sources)

    if path is None:
        return build()
    return cached_build([IAPP_NAME, THAI_VERSION, split, sha256_file(path)], build)
