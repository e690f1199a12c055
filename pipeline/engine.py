"""Where the heavy stages of a run execute: in this process or on Ray.

``pipeline.run --engine local`` (the default) encodes, searches and reads in
this process; ``--engine ray`` (:mod:`pipeline.ray_engine`) runs dense corpus
encoding and reading as Ray Data ``map_batches`` over actor pools and BM25
search as Ray tasks over query blocks.  Both engines give the same results
(same ids, same spans; scores equal up to float rounding) and both write
resumable shards, so a rerun after a crash picks up where it stopped.

An engine offers these hooks:

* ``adapt_retriever(retriever)`` returns the retriever to run (the Ray engine
  swaps BM25 and dense retrievers, also inside fused ones, for subclasses
  that distribute their heavy part);
* ``prepare_reader(reader)`` loads (local) or checks (Ray) the reader up
  front, so a bad model fails before any work;
* ``read_pairs(reader, questions, passages, cache)`` reads pairs like
  :meth:`readers.extractive.ExtractiveReader.read_pairs`;
* ``reader_facts(reader)`` says how the reads were made, for the manifest
  (:meth:`readers.extractive.ExtractiveReader.facts` of the reader that read:
  this process's, or on Ray an actor's).

On CUDA out-of-memory the reader's batch is halved and the read retried
(chunks already read come from the read cache); the encoder halves its own
batches (:func:`hardware.device.run_in_batches`).
"""

from __future__ import annotations

from typing import Any, Sequence

from data.errors import UserError
from readers.halving import read_pairs_halving  # noqa: F401 - used below; kept importable from here

ENGINES = ("local", "ray")


class LocalEngine:
    """Everything in this process (the default)."""

    name = "local"

    def adapt_retriever(self, retriever):
        return retriever

    def prepare_reader(self, reader):
        """Check, then load the reader now, so a bad model fails before any retrieval."""
        reader.identity()  # parameters, model source (an extractive one's QA head): checked before torch is imported
        return reader.load()

    def read_pairs(self, reader, questions: Sequence[str], passages: Sequence[str], cache=None):
        return read_pairs_halving(reader, list(questions), list(passages), cache=cache)

    def reader_facts(self, reader) -> dict[str, Any]:
        return reader.facts()

    def info(self) -> dict[str, Any]:
        return {"engine": self.name}

    def close(self) -> None:
        pass


class EngineReader:
    """A reader whose ``read_pairs`` runs on an engine (what :func:`pipeline.stages.read_top` calls)."""

    def __init__(self, reader, engine):
        self.reader = reader
        self.engine = engine

    def read_pairs(self, questions, passages, cache=None):
        return self.engine.read_pairs(self.reader, questions, passages, cache)


def make_engine(config=None, *, device: str = "auto") -> Any:
    """The engine a :class:`pipeline.config.EngineConfig` names (default: this process)."""
    name = config.name if config is not None else "local"
    if name == "local":
        return LocalEngine()
    if name == "ray":
        from pipeline.ray_engine import RayEngine

        return RayEngine(
            address=config.ray_address,
            actors=config.ray_actors,
            gpus_per_actor=config.ray_gpus_per_actor,
            cpus_per_actor=config.ray_cpus_per_actor,
            device=device,
        )
    raise UserError(f"--engine {name!r}: use {' or '.join(ENGINES)}")
