"""Reader spec strings -> reader objects, through one registry.

Grammar::

    spec    := [ KIND ":" ] MODEL [ "[" option ("," option)* "]" ]
    option  := KEY "=" VALUE          (quote VALUE, '...' or "...", to hold "," or "]")
    KIND    := a name of READERS: extractive | generative | a plugin's

A spec without a kind is an extractive reader (``../shared/models/minilm-squad-reader``, ``bert-base``), so
every older command keeps its meaning.  Examples: ``generative:smollm2-135m-instruct``,
``generative:/models/qwen3-0.6b[max_new_tokens=16,order=lost-in-the-middle,shots=2]``,
``generative:gemma3-270m[template=my-prompt.yaml]``.  Bracket keys are the reader class's own constructor
parameters (one name everywhere: spec, config file ``reader.options``, Python API), converted to their types.

:data:`READERS` is open to other packages through the entry-point group ``qa_retrieval_eval.readers``: a
class whose constructor takes ``model`` first.  A reader that reads each (question, passage) pair alone
offers ``read_pairs`` as :class:`readers.extractive.ExtractiveReader` does; one that reads a question's top
n passages together sets ``reads = "set"`` and offers ``generate`` / ``generate_every_n`` as
:class:`readers.generative.GenerativeReader` does.  Both offer ``load()``, ``identity()`` and ``facts()``.
"""

from __future__ import annotations

from typing import Any, Mapping

from data.errors import UserError
from data.plugins import Registry, bracket_options, build

READERS: Registry = Registry("readers", what="reader kind")
READERS.register("extractive", "readers.extractive:ExtractiveReader")
READERS.register("generative", "readers.generative:GenerativeReader")

DEFAULT_KIND = "extractive"


def parse_reader_spec(spec: str) -> tuple[str, str, dict[str, str]]:
    """``"generative:smollm2-135m-instruct[shots=2]"`` -> ``("generative", "smollm2-135m-instruct", {"shots": "2"})``;
    a spec without a registered kind in front is an extractive reader's model."""
    if not isinstance(spec, str) or not spec.strip():
        raise UserError("reader spec is empty (give a model: PATH, ALIAS or KIND:MODEL)")
    body, options = bracket_options(spec.strip(), "reader")
    kind, colon, model = body.partition(":")
    if colon and (kind in READERS.builtin_names() or (kind and "/" not in kind and "." not in kind and READERS.find(kind))):
        if not model.strip():
            raise UserError(f"reader {spec!r}: {kind} needs a model ({kind}:MODEL)")
        return kind, model.strip(), options
    return DEFAULT_KIND, body, options


def reader_kind(spec: str | None) -> str | None:
    """The registered kind a spec names (None for no reader)."""
    return None if not spec else parse_reader_spec(spec)[0]


def make_reader(spec: str, options: Mapping[str, Any] | None = None, **fixed: Any):
    """The reader a spec names: its kind's class with ``model``, ``fixed`` settings (device, dtype, ...: those
    the class takes), then ``options`` and the spec's bracket options (the spec's win), typed by the class."""
    import inspect

    kind, model, spec_options = parse_reader_spec(spec)
    factory = READERS.get(kind)
    takes = inspect.signature(factory).parameters
    fixed = {k: v for k, v in fixed.items() if k in takes and v is not None}
    merged = {**dict(options or {}), **spec_options}
    for key in list(merged):
        if key.replace("-", "_") in fixed:
            fixed.pop(key.replace("-", "_"))
    return build(factory, merged, f"reader {spec!r}", model=model, **fixed)


def is_set_reader(reader) -> bool:
    """True for a reader that reads a question's top n passages together (a generative one)."""
    return getattr(reader, "reads", "pairs") == "set"
