"""An example dataset loader plugin: ``tiny_squad`` / ``tiny_squad:N``, a small ReQA-style sentence dataset.

Registered by the entry point (``entry_points.txt`` of the ``.dist-info``; a
real package declares it in its ``pyproject.toml``)::

    [qa_retrieval_eval.datasets]
    tiny_squad = qa_plugin_example.dataset:load_tiny_squad

It follows the loader contract of :mod:`data.registry` and builds only through
public helpers: :func:`data.squad.load_squad_any` finds SQuAD v1.1 (``--data-file``,
else ``squad/dev-v1.1.json[.zip|.gz]`` for dev and the train file, e.g.
``squad/train-v1.1.reconstructed.json.gz``, under the data dir, else the hub),
:func:`data.reqa.build_reqa` turns the first ``N`` articles (default 3) into
ReQA's sentence candidates and query inputs, and :func:`data.cache.cached_build`
caches the result under the input file's sha256.  Both ``dev`` and ``train``
exist, so selectors and retrievers that learn from a train split work on it too.
"""

from __future__ import annotations

from data.cache import cached_build
from data.errors import UserError
from data.reqa import build_reqa
from data.squad import load_squad_any, squad_dict
from data.types import Dataset

DEFAULT_ARTICLES = 3


def load_tiny_squad(split, *, data_dir, data_file, arg=None, skip_bad_records=False) -> Dataset:
    """The first ``int(arg or 3)`` articles of SQuAD v1.1 ``split`` (dev or train) as a ReQA dataset."""
    try:
        n = int(arg) if arg else DEFAULT_ARTICLES
    except ValueError:
        n = 0
    if n < 1:
        raise UserError(f"tiny_squad:{arg}: the argument is a number of articles (a positive integer)")
    name = f"tiny_squad:{n}"
    _, digest = squad_dict(split, data_dir=data_dir, data_file=data_file)  # checks the split too

    def build() -> Dataset:
        squad, sources = load_squad_any(split, data_dir=data_dir, data_file=data_file,
                                        skip_bad_records=skip_bad_records)
        tiny = {"version": squad.get("version", "1.1"), "data": squad["data"][:n]}
        return build_reqa(tiny, name=name, split=split, sources={**sources, "articles": len(tiny["data"])})

    if digest is None:  # from the hub: nothing local to key a cache entry on
        return build()
    return cached_build(["qa_plugin_example.tiny_squad", split, n, digest, skip_bad_records], build)
