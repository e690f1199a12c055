"""Dataset names -> loaders (:data:`DATASETS`), and :func:`load_dataset`, the single entry point.

A dataset name is a registered loader's name (``reqa_squad``), or that name
and an argument after a colon (``squad_file:PATH``, ``beir:scifact``), which
the loader receives as ``arg``.  Whether a name takes an argument:

* built-ins, as listed in :data:`ARGUMENTS`: ``squad_file:``, ``beir:``,
  ``mteb:`` and ``open:`` need one, ``squad_open`` takes one or none, the
  others none;
* any other loader (a plugin, or one registered with ``DATASETS.register``),
  from its signature: no ``arg`` parameter -> none; ``arg`` without a default
  -> required; ``arg=None`` -> optional (``foo`` and ``foo:ARG``).

The loader contract::

    fn(split, *, data_dir, data_file, arg, skip_bad_records[, language]) -> data.types.Dataset

``split`` is ``dev``/``train``/``test`` (``validation``/``valid``/``val`` are
passed as ``dev``); ``data_dir`` is the data dir (``--data-dir``, else
``$QA_DATA_DIR``: :func:`data.locations.data_dir`, None when neither is set);
``data_file`` an explicit input file or None; ``skip_bad_records`` asks to
drop and count malformed records rather than fail; ``language`` (``en``/``th``)
is passed only to loaders that have that parameter, and only when
``--language`` names one.  A loader raises :class:`data.errors.UserError` (one
line) for anything the user must fix.  Every built-in follows the same rule
for its input: an explicit ``data_file`` wins; else the file is looked up in
the data dir (laid out like ``../shared/data``); else the Hugging Face hub is
tried (online users); else a one-line error says exactly which file to put
where.  Built datasets are cached with :func:`data.cache.cached_build`.

Third-party loaders register through the entry-point group
``qa_retrieval_eval.datasets`` (see :mod:`data.plugins`); a built-in name
wins over a plugin of the same name.  :func:`load_dataset` checks what every
loader returns (a non-empty corpus and query set, the requested language).
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Callable

from data.cache import BUILD_VERSION, cached_build  # noqa: F401  (importable from here, as before)
from data.errors import UserError
from data import locations
from data.locations import find_local  # noqa: F401
from data.plugins import Registry
from data.squad import (SQUAD_FILES, load_squad_any, load_squad_counted, records_to_squad,  # noqa: F401
                        squad_dict, squad_from_hub)
from data.types import LANGUAGES, Dataset

Loader = Callable[..., Dataset]

DATASETS: Registry[Loader] = Registry("datasets", what="dataset")

# Whether a built-in name takes an argument (``name:ARG``): "none", "optional" or "required".
ARGUMENTS: dict[str, str] = {}


def _builtin(name: str, target: str, argument: str = "none") -> None:
    DATASETS.register(name, target)  # "module:function", imported on first use
    ARGUMENTS[name] = argument


_builtin("reqa_squad", "data.squad_datasets:load_reqa_squad")
_builtin("squad_file", "data.squad_datasets:load_squad_file", "required")
_builtin("squad_open", "data.open_domain:load_squad_open", "optional")
_builtin("reqa_nq", "data.nq:load_reqa_nq")
_builtin("beir", "data.beir:load_beir", "required")
_builtin("mteb", "data.beir:load_mteb", "required")
_builtin("iapp_wiki_qa_squad", "data.thai:load_iapp")
_builtin("open", "data.open_domain:load_open", "required")

default_data_dir = locations.data_dir  # the one QA_DATA_DIR lookup (as it was named here)

SPLIT_ALIASES = {"validation": "dev", "valid": "dev", "val": "dev"}


def dataset_names() -> list[str]:
    """The registered dataset names, built-in and plugin (without their ``:ARG`` part)."""
    return DATASETS.names()


def dataset_forms() -> list[str]:
    """The names as written on a command line: ``beir:NAME``, ``squad_open[:NAME]``, ``reqa_squad``..."""
    suffix = {"none": "", "optional": "[:NAME]", "required": ":NAME"}
    return [name + suffix[ARGUMENTS.get(name, "none")] for name in DATASETS.names()]


def argument_rule(name: str, loader: Loader) -> str:
    """``none``, ``optional`` or ``required``: whether dataset ``name`` takes ``name:ARG`` (see the module doc)."""
    if name in ARGUMENTS:
        return ARGUMENTS[name]
    try:
        param = inspect.signature(loader).parameters.get("arg")
    except (TypeError, ValueError):  # no signature to read: let the loader decide
        return "optional"
    if param is None:
        return "none"
    return "required" if param.default is inspect.Parameter.empty else "optional"


def resolve(name: str) -> tuple[Loader, str | None]:
    """The loader of dataset ``name`` and its argument (None without one); one-line errors otherwise."""
    base, colon, arg = str(name).partition(":")
    if base not in DATASETS.names():
        raise UserError(f"unknown dataset {name!r} (known: {', '.join(dataset_forms())})")
    try:
        loader = DATASETS.get(base)
    except (ImportError, AttributeError) as e:
        raise UserError(f"dataset {name!r}: its loader is not available ({type(e).__name__}: {e})") from None
    rule = argument_rule(base, loader)
    if colon and rule == "none":
        raise UserError(f"unknown dataset {name!r}: {base} takes no argument (use {base})")
    if not arg and rule == "required":
        raise UserError(f"unknown dataset {name!r}: {base} needs an argument, as in {base}:NAME")
    return loader, (arg or None)


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
    loader, arg = resolve(name)
    if data_file and not Path(data_file).is_file():
        raise UserError(f"{data_file}: no such file (--data-file)")
    kwargs = {}
    if language is not None and "language" in inspect.signature(loader).parameters:
        kwargs["language"] = language
    ds = loader(
        split,
        data_dir=locations.data_dir(data_dir),
        data_file=Path(data_file) if data_file else None,
        arg=arg,
        skip_bad_records=skip_bad_records,
        **kwargs,
    )
    if not isinstance(ds, Dataset):
        raise UserError(f"dataset {name!r}: its loader returned {type(ds).__name__}, not a data.types.Dataset")
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


def __getattr__(name: str):
    """``load_reqa_squad`` / ``load_squad_file`` stay importable from here (they live in :mod:`data.squad_datasets`)."""
    if name in ("load_reqa_squad", "load_squad_file"):
        import importlib

        return getattr(importlib.import_module("data.squad_datasets"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
