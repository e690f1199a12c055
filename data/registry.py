"""Dataset names -> loaders, and where local files are found.

``load_dataset(name, split)`` is the single entry point.  A name is either a
plain dataset name (``reqa_squad``) or a prefix with an argument
(``squad_file:PATH``, ``beir:scifact``).  Every loader follows the same rule:
an explicit ``data_file`` wins; else the file is looked up in ``data_dir`` or
in the directory named by ``QA_DATA_DIR`` (laid out like ``../shared/data``);
else the Hugging Face hub is tried (online users); else a one-line error says
exactly which file to put where.
"""

from __future__ import annotations

import importlib
import inspect
import os
import pickle
from pathlib import Path

from data.errors import UserError
from data.types import LANGUAGES, Dataset

# name or "prefix:" -> "module:function"; each is called as
# fn(split, *, data_dir, data_file, arg, skip_bad_records) -> Dataset
LOADERS: dict[str, str] = {
    "reqa_squad": "data.registry:load_reqa_squad",
    "squad_file:": "data.registry:load_squad_file",
    "squad_open": "data.open_domain:load_squad_open",
    "squad_open:": "data.open_domain:load_squad_open",
    "reqa_nq": "data.nq:load_reqa_nq",
    "beir:": "data.beir:load_beir",
    "mteb:": "data.beir:load_mteb",
    "iapp_wiki_qa_squad": "data.thai:load_iapp",
    "open:": "data.open_domain:load_open",
}

# Bump when a builder changes what it produces: it invalidates cached datasets.
BUILD_VERSION = "2"  # 2: sentence-level contexts are a RowParagraphs view

SPLIT_ALIASES = {"validation": "dev", "valid": "dev", "val": "dev"}


def dataset_names() -> list[str]:
    return sorted(k + ("NAME" if k.endswith(":") else "") for k in LOADERS)


def load_dataset(
    name: str,
    split: str = "dev",
    *,
    data_dir: str | Path | None = None,
    data_file: str | Path | None = None,
    skip_bad_records: bool = False,
    answer_match: str | None = None,
    language: str | None = None,
) -> Dataset:
    """Build (or load from cache) the dataset ``name`` for ``split``.

    ``answer_match`` (``string``/``regex``) overrides how an ``open:`` dataset
    decides answer-bearing passages (``--answer-match``).  ``language``
    (``--language``: ``auto``/``None``, ``en`` or ``th``) sets the language of
    datasets that can be in either (``squad_file:``, ``open:``; default:
    detected from the text / English); a dataset of a fixed language refuses
    the other one.
    """
    split = SPLIT_ALIASES.get(split, split)
    language = check_language(language)
    target, arg = _resolve(name)
    module, func = target.split(":")
    try:
        loader = getattr(importlib.import_module(module), func)
    except (ImportError, AttributeError) as e:
        raise UserError(f"dataset {name!r}: its loader {target} is not available ({e})") from None
    kwargs = {}
    if language is not None and "language" in inspect.signature(loader).parameters:
        kwargs["language"] = language
    ds = loader(
        split,
        data_dir=Path(data_dir) if data_dir else default_data_dir(),
        data_file=Path(data_file) if data_file else None,
        arg=arg,
        skip_bad_records=skip_bad_records,
        **kwargs,
    )
    if language is not None and ds.corpus.language != language:
        raise UserError(f"--language {language}: dataset {name!r} is {ds.corpus.language!r} text "
                        "(--language applies to squad_file: and open: datasets)")
    if len(ds.corpus) == 0:
        raise UserError(f"dataset {name!r} split {split!r}: the corpus is empty")
    if len(ds.queries) == 0:
        raise UserError(f"dataset {name!r} split {split!r}: no queries")
    if answer_match is not None:
        if ds.queries.answer_match is None:
            raise UserError(f"--answer-match applies to open: datasets (their gold is decided by answer matching), not {name!r}")
        if answer_match not in ("string", "regex"):
            raise UserError(f"--answer-match {answer_match!r}: use string or regex")
        ds.queries.answer_match = answer_match
        ds.sources["answer_match"] = answer_match
    return ds


def check_language(language: str | None) -> str | None:
    """``--language``: None for ``auto``/unset, else ``en`` or ``th`` (the languages the answer metrics define)."""
    if language is None or str(language).strip().lower() in ("", "auto"):
        return None
    code = str(language).strip().lower()
    if code not in LANGUAGES:
        raise UserError(f"--language {language!r}: use auto, {', '.join(LANGUAGES)}")
    return code


def _resolve(name: str) -> tuple[str, str | None]:
    if name in LOADERS:
        return LOADERS[name], None
    if ":" in name:
        prefix, arg = name.split(":", 1)
        if prefix + ":" in LOADERS and arg:
            return LOADERS[prefix + ":"], arg
    raise UserError(f"unknown dataset {name!r}; known: {', '.join(dataset_names())}")


def default_data_dir() -> Path | None:
    env = os.environ.get("QA_DATA_DIR")
    return Path(env) if env else None


def find_local(data_dir: Path | None, candidates: list[str]) -> Path | None:
    """The first of ``candidates`` (paths relative to the data dir) that exists."""
    if data_dir is None:
        return None
    for rel in candidates:
        p = Path(data_dir) / rel
        if p.is_file():
            return p
    return None


def cached_build(key_parts: list, build):
    """Return ``build()``, cached on disk under a content key (pickled Dataset)."""
    from data.io import atomic_path, cache_dir, sha256_text

    key = sha256_text(BUILD_VERSION, *key_parts)[:24]
    path = cache_dir("datasets") / f"{key}.pkl"
    if path.is_file():
        try:
            with open(path, "rb") as f:
                return pickle.load(f)
        except Exception:  # a partial or corrupt entry is rebuilt, never served
            path.unlink(missing_ok=True)
    ds = build()
    try:
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as f:
                pickle.dump(ds, f, protocol=pickle.HIGHEST_PROTOCOL)
    except UserError:
        pass  # an unwritable cache only costs time
    return ds


# --------------------------------------------------------------------- SQuAD
SQUAD_FILES = {
    "dev": ["squad/dev-v1.1.json", "squad/dev-v1.1.json.zip", "squad/dev-v1.1.json.gz"],
    "train": [
        "squad/train-v1.1.json",
        "squad/train-v1.1.json.gz",
        "squad/train-v1.1.json.zip",
        "squad/train-v1.1.reconstructed.json.gz",
    ],
}


def squad_dict(split: str, *, data_dir: Path | None, data_file: Path | None, skip_bad_records: bool = False):
    """The SQuAD v1.1 dict for ``split`` and its source file checksums."""
    from data.io import sha256_file

    if split not in SQUAD_FILES:
        raise UserError(f"SQuAD has no split {split!r}; use dev or train")
    path = data_file or find_local(data_dir, SQUAD_FILES[split])
    if path is not None:
        return path, sha256_file(path)
    return None, None


def load_squad_counted(path: Path, digest: str, skip_bad_records: bool = False) -> tuple[dict, dict]:
    """A local SQuAD file and its sources; with ``skip_bad_records``, how many records were skipped."""
    from data.squad import load_squad_json

    stats: dict = {}
    squad = load_squad_json(path, skip_bad_records=skip_bad_records, stats=stats)
    sources = {str(path): digest}
    if skip_bad_records:
        sources["skipped_records"] = stats.get("skipped_records", 0)
    return squad, sources


def load_squad_any(split: str, *, data_dir, data_file, skip_bad_records=False) -> tuple[dict, dict]:
    """Load SQuAD v1.1 (local file, else the hub); returns (squad dict, sources)."""
    path, digest = squad_dict(split, data_dir=data_dir, data_file=data_file)
    if path is not None:
        return load_squad_counted(path, digest, skip_bad_records)
    try:
        return squad_from_hub(split), {"hf:squad": split}
    except Exception as e:  # offline, or the datasets library cannot reach the hub
        where = data_dir or "$QA_DATA_DIR"
        raise UserError(
            f"SQuAD v1.1 {split} not found: put {SQUAD_FILES[split][0]} (or .zip/.gz) under {where}"
            f" (set QA_DATA_DIR or --data-dir), or pass --data-file; the hub was not reachable ({type(e).__name__})"
        ) from None


def squad_from_hub(split: str) -> dict:
    """SQuAD v1.1 from the Hugging Face ``squad`` dataset, regrouped into SQuAD JSON."""
    import datasets

    rows = datasets.load_dataset("squad", split={"dev": "validation", "train": "train"}[split])
    return records_to_squad(rows)


def records_to_squad(rows) -> dict:
    """Flat (id, title, context, question, answers{text, answer_start}) records -> SQuAD dict."""
    articles: dict[str, dict[str, list]] = {}
    for r in rows:
        paras = articles.setdefault(r.get("title", ""), {})
        qas = paras.setdefault(r["context"], [])
        ans = r["answers"]
        qas.append(
            {
                "id": str(r["id"]),
                "question": r["question"],
                "answers": [{"text": t, "answer_start": int(s)} for t, s in zip(ans["text"], ans["answer_start"])],
            }
        )
    return {
        "data": [
            {"title": t, "paragraphs": [{"context": c, "qas": q} for c, q in paras.items()]}
            for t, paras in articles.items()
        ]
    }


def load_reqa_squad(split, *, data_dir, data_file, arg=None, skip_bad_records=False) -> Dataset:
    """ReQA SQuAD (Ahmad et al. 2019): see :mod:`data.reqa`."""
    from data.reqa import build_reqa

    path, digest = squad_dict(split, data_dir=data_dir, data_file=data_file)

    def build():
        squad, sources = load_squad_any(split, data_dir=data_dir, data_file=data_file, skip_bad_records=skip_bad_records)
        return build_reqa(squad, name="reqa_squad", split=split, sources=sources)

    if digest is None:
        return build()
    return cached_build(["reqa_squad", split, digest, skip_bad_records], build)


def load_squad_file(split, *, data_dir, data_file, arg=None, skip_bad_records=False, language=None) -> Dataset:
    """Any SQuAD v1.1-format file as a ReQA-style sentence dataset (``squad_file:PATH``).

    A file whose paragraphs are mostly Thai script (XQuAD-th, iapp-style files)
    is split with the Thai rules (:func:`data.thai.build_thai_reqa`) and marked
    ``language="th"`` (BM25 then pre-tokenizes with newmm).  ``language``
    (``--language``) replaces the detection: ``th`` splits with the Thai rules,
    any other code with ReQA's splitter and marks the dataset that language.
    """
    from data.io import sha256_file
    from data.reqa import build_reqa
    from data.thai import build_thai_reqa, squad_language

    path = Path(arg)
    if not path.is_file():
        raise UserError(f"{path}: no such file (dataset squad_file:{arg})")
    digest = sha256_file(path)

    def build():
        squad, sources = load_squad_counted(path, digest, skip_bad_records)
        lang = language or squad_language(squad)
        if lang == "th":
            return build_thai_reqa(squad, name=f"squad_file:{path.name}", split=split, sources=sources)
        return build_reqa(squad, name=f"squad_file:{path.name}", split=split, sources=sources, language=lang)

    return cached_build(["squad_file", digest, skip_bad_records, f"language-{language}" if language else "language-detected"], build)
