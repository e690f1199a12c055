"""SQuAD-format files as ReQA-style sentence datasets: the ``reqa_squad`` and ``squad_file:PATH`` loaders.

Both follow the loader contract of :mod:`data.registry` and cache what they
build (:func:`data.cache.cached_build`) under the input file's sha256.
"""

from __future__ import annotations

from pathlib import Path

from data.cache import cached_build
from data.errors import UserError
from data.squad import load_squad_any, load_squad_counted, squad_dict
from data.types import Dataset


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
