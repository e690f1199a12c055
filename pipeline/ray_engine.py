"""Run the heavy stages on Ray: ``python -m pipeline.run --engine ray``.

* Dense corpus encoding: the missing embedding shards go through Ray Data
  ``map_batches`` over an actor pool (one encoder load per actor); the driver
  writes each shard to the cache as it arrives, so a crash loses at most the
  shards in flight.
* Reading: the (question, passage) pairs not yet in the read cache are cut
  into the reader's chunks and read by an actor pool (one model load per
  actor); each chunk is added to the read cache as it arrives.
* BM25 search: the queries are split into blocks searched by Ray tasks, each
  with its own JVM and Lucene searcher over the cached index directory.

The cluster is ``--ray-address`` or ``$RAY_ADDRESS``; with neither, a local
Ray instance is started (``ray.init(num_cpus=...)``), and an instance already
started in this process is used as is.  ``--ray-actors`` actors of
``--ray-cpus-per-actor`` CPUs and ``--ray-gpus-per-actor`` GPUs run the
encoder and the reader.  Results equal the local engine's: same shards and
chunks, the same functions on the same inputs (scores may differ in the last
float bits when the actors use other thread counts or devices).
"""

from __future__ import annotations

import io
import json
import math
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from data.errors import UserError
from retrievers.base import constructor_params, members_of
from retrievers.bm25 import BM25Retriever
from retrievers.dense import DenseRetriever

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("data", "retrievers", "readers", "pipeline", "eval", "selection")


def keep_jvm_signal_handlers() -> None:
    """Stop ``ray.init`` from taking SIGSEGV away from a JVM in this process (call before it).

    Ray's core worker installs its C++ failure-signal handler at ``ray.init``,
    over whatever is there.  In a driver whose JVM (Pyserini) is already
    running, that handler then receives the JVM's deliberate SIGSEGVs (implicit
    null checks, stack banging) and kills the process: an intermittent
    "Fatal Python error: Segmentation fault".  Ray's own switch,
    ``RAY_DISABLE_FAILURE_SIGNAL_HANDLER``, turns the handler off; it is read
    when ``ray`` is imported, so the constant is set too in case ``ray`` was
    imported earlier.  Local workers inherit the variable.  Python's
    faulthandler is enabled before the JVM starts (:mod:`retrievers.java`), so
    ray does not install that one over the JVM either.
    """
    value = os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")
    try:
        from ray._private import ray_constants
    except ImportError:  # a Ray without this module has no such switch
        return
    ray_constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER = value.lower() in ("1", "true")  # as Ray parses it


class RayEngine:
    """Dense encoding and reading on Ray actor pools, BM25 search on Ray tasks.

    Parameters
    ----------
    address : Ray cluster address (``ray://host:10001`` or ``host:6379``);
        ``None`` uses ``$RAY_ADDRESS``, else starts a local instance.
    actors : actors per pool (and BM25 query blocks).
    gpus_per_actor : GPUs each encoder/reader actor reserves (fractions allowed).
    cpus_per_actor : CPUs each actor or task reserves (also its torch threads).
    device : the run's ``--device``; actors use CUDA when they reserve GPUs.
    """

    name = "ray"

    def __init__(self, address: str | None = None, actors: int = 2, gpus_per_actor: float = 0.0,
                 cpus_per_actor: float = 1.0, device: str = "auto"):
        self.address = address
        self.actors = actors
        self.gpus_per_actor = gpus_per_actor
        self.cpus_per_actor = cpus_per_actor
        self.device = device

    # ------------------------------------------------------------- lifecycle
    def check(self) -> "RayEngine":
        """Validate the options (before any work is done)."""
        if not isinstance(self.actors, int) or isinstance(self.actors, bool) or self.actors < 1:
            raise UserError(f"--ray-actors {self.actors!r}: must be a positive integer")
        for flag, value in (("--ray-gpus-per-actor", self.gpus_per_actor), ("--ray-cpus-per-actor", self.cpus_per_actor)):
            if not isinstance(value, (int, float)) or value < 0 or not math.isfinite(value):
                raise UserError(f"{flag} {value!r}: must be a number >= 0")
        if self.cpus_per_actor <= 0 and self.gpus_per_actor <= 0:
            raise UserError("--ray-cpus-per-actor 0 needs --ray-gpus-per-actor > 0")
        dev = str(self.device)
        if dev.startswith("cuda") and self.gpus_per_actor <= 0:
            raise UserError(f"--device {dev} with --engine ray: give the actors GPUs with --ray-gpus-per-actor")
        if self.gpus_per_actor > 0 and dev == "cpu":
            raise UserError("--ray-gpus-per-actor > 0 with --device cpu: drop one of them")
        try:
            import ray  # noqa: F401
            import ray.data  # noqa: F401
        except ImportError as err:
            raise UserError(f"--engine ray needs Ray Data: pip install 'ray[data]' ({err})") from None
        return self

    def start(self):
        """Connect to (or start) Ray once; returns the ``ray`` module."""
        import ray
        import ray.data

        if getattr(self, "_ray", None) is not None:
            return ray
        self.check()
        self._owned = False
        if not ray.is_initialized():
            address = self.address or os.environ.get("RAY_ADDRESS") or None
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
            keep_jvm_signal_handlers()
            try:
                if address:
                    # the cluster's Python needs our third-party packages; our own code travels with the job
                    kwargs["runtime_env"] = {"py_modules": [str(ROOT / p) for p in PACKAGES]}
                    ray.init(address=address, **kwargs)
                else:
                    need = max(2, math.ceil(self.actors * max(self.cpus_per_actor, 0)))
                    ray.init(num_cpus=need, **kwargs)
            except Exception as err:  # unreachable cluster, bad address
                raise UserError(f"ray: cannot connect to {address or 'a local instance'} ({type(err).__name__}: {str(err).splitlines()[0][:160]})") from None
            self._owned = True
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False  # our own tqdm bars show progress
        if hasattr(context, "print_on_execution_start"):
            context.print_on_execution_start = False
        self._ray = ray
        return ray

    def close(self) -> None:
        ray = getattr(self, "_ray", None)
        if ray is not None and getattr(self, "_owned", False):
            ray.shutdown()
        self._ray = None

    def info(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "engine": self.name,
            "actors": self.actors,
            "gpus_per_actor": self.gpus_per_actor,
            "cpus_per_actor": self.cpus_per_actor,
        }
        ray = getattr(self, "_ray", None)
        if ray is not None and ray.is_initialized():
            out["cluster_resources"] = {k: v for k, v in ray.cluster_resources().items() if k in ("CPU", "GPU")}
        return out

    def _actor_device(self) -> str:
        return "cuda" if self.gpus_per_actor > 0 else "cpu"

    def _pool(self, n_items: int):
        import ray.data

        return ray.data.ActorPoolStrategy(size=max(1, min(self.actors, n_items)))

    def _remote_args(self) -> dict[str, Any]:
        args: dict[str, Any] = {"num_cpus": self.cpus_per_actor}
        if self.gpus_per_actor > 0:
            args["num_gpus"] = self.gpus_per_actor
        return args

    def _threads(self) -> int:
        return max(1, int(self.cpus_per_actor))

    # ------------------------------------------------------------ retrievers
    def adapt_retriever(self, retriever):
        """The retriever with its BM25/dense parts (also the members of fused ones) on Ray."""
        on_ray = ON_RAY.get(type(retriever))  # exactly these classes: a subclass may change what search does
        if on_ray is not None:
            if self.gpus_per_actor > 0 and getattr(retriever, "backend", "torch") != "torch":
                retriever.backend = "torch"  # CUDA actors encode with torch; the embeddings' key must say so
            return _rebuild(on_ray, retriever, engine=self)
        members = members_of(retriever)
        if members:
            retriever.members[:] = [self.adapt_retriever(m) for m in members]
        return retriever

    def encode_shards(self, retriever: DenseRetriever, texts: Sequence[str], ranges: Sequence[tuple[int, int]]):
        """Yield ``(lo, hi, embeddings)`` for the shards, encoded by an actor pool, as they finish."""
        if not ranges:
            return
        ray = self.start()
        from data.progress import tqdm  # a line every 30 s when stderr is not a terminal

        items = [{"lo": lo, "hi": hi, "texts": list(texts[lo:hi])} for lo, hi in ranges]
        spec = retriever.encoder_spec()
        if spec["backend"] == "auto":  # decided once, by the driver: the actors encode as the embeddings' key says
            spec["backend"] = retriever.encoder_backend()
        params = {
            "encoder": spec,
            "device": self._actor_device(),
            "threads": self._threads(),
        }
        ds = ray.data.from_items(items, override_num_blocks=len(items))
        out = ds.map_batches(
            _EncodeActor, batch_size=1, compute=self._pool(len(items)), fn_constructor_kwargs={"params": params},
            **self._remote_args(),
        )
        with tqdm(total=sum(hi - lo for lo, hi in ranges), desc="encode corpus (ray)", unit="text", leave=False) as bar:
            for row in _rows(out):
                lo, hi = int(row["lo"]), int(row["hi"])
                bar.update(hi - lo)
                yield lo, hi, _from_bytes(row["emb"])

    def search_bm25(self, retriever: "RayBM25Retriever", query_texts: Sequence[str], k: int):
        """BM25 over query blocks, one Ray task (own JVM and searcher) per block."""
        from retrievers.types import Ranking

        ray = self.start()
        from data.progress import tqdm  # a line every 30 s when stderr is not a terminal

        texts = list(query_texts)
        if not texts:
            return BM25Retriever.search(retriever, texts, k)
        block = max(1, min(2000, math.ceil(len(texts) / self.actors)))
        params = constructor_params(retriever, BM25Retriever)
        params["threads"] = self._threads()
        corpus_ref = ray.put(retriever.corpus_)
        task = ray.remote(_bm25_block).options(num_cpus=max(self.cpus_per_actor, 0.001))
        pending = {task.remote(params, corpus_ref, texts[lo : lo + block], k): lo for lo in range(0, len(texts), block)}
        parts = {}
        with tqdm(total=len(texts), desc="bm25 search (ray)", unit="query", leave=False) as bar:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                lo = pending.pop(done[0])
                ids, scores = _get(ray, done[0])
                parts[lo] = (ids, scores)
                bar.update(len(ids))
        order = sorted(parts)
        return Ranking(np.concatenate([parts[lo][0] for lo in order]), np.concatenate([parts[lo][1] for lo in order]))

    # --------------------------------------------------------------- reading
    def read_pairs(self, reader, questions: Sequence[str], passages: Sequence[str], cache=None):
        """As ``reader.read_pairs``, with the pairs not in ``cache`` read by an actor pool, chunk by chunk."""
        from readers.extractive import plan_reads

        self._remote_reader_setup(reader)
        plan = plan_reads(reader, questions, passages, cache)
        chunks = plan.chunks(reader.pairs_per_chunk)
        if chunks:
            ray = self.start()
            from data.progress import tqdm  # a line every 30 s when stderr is not a terminal

            items = []
            for c, rows in enumerate(chunks):
                qs, ps = plan.texts(rows)
                items.append({"chunk": c, "questions": qs, "passages": ps})
            ds = ray.data.from_items(items, override_num_blocks=len(items))
            out = ds.map_batches(
                _ReadActor, batch_size=1, compute=self._pool(len(items)),
                fn_constructor_kwargs={"params": self._actor_reader_params(reader)}, **self._remote_args(),
            )
            with tqdm(total=len(plan.todo), desc="reading (ray)", unit="pair", leave=False) as bar:
                for row in _rows(out):
                    self._actor_facts().setdefault(reader.identity(), json.loads(str(row["facts"])))
                    rows = chunks[int(row["chunk"])]
                    plan.store(rows, _from_bytes(row["score"]), _from_bytes(row["start"]), _from_bytes(row["end"]), cache)
                    bar.update(len(rows))
        return plan.result()

    def reader_facts(self, reader) -> dict[str, Any]:
        """How the actors read (batch shape, precision, an int8 reader's recipe and agreement): what the first
        actor that read reported; the driver's settings when every read came from the cache."""
        return self._actor_facts().get(reader.identity()) or reader.facts()

    def _actor_facts(self) -> dict[str, dict]:
        if not hasattr(self, "actor_facts_"):
            self.actor_facts_ = {}  # reader identity -> facts, as an actor reported them
        return self.actor_facts_

    def prepare_reader(self, reader):
        """Check the reader (parameters, model, QA head) without loading it: the actors load it."""
        if getattr(reader, "reads", "pairs") == "set":
            raise UserError("a generative reader runs on the local engine (--engine local): Ray actors read pairs")
        self._remote_reader_setup(reader)
        reader.pair_keys([], [])
        return reader

    def _remote_reader_setup(self, reader) -> None:
        """Pin what the driver and the actors must agree on (the cache key holds the dtype).

        With GPU actors the driver may have no GPU: it keeps its own copy on
        CPU (it only hashes and looks up) and both sides read in bfloat16
        unless a dtype was given.
        """
        if self.gpus_per_actor > 0:
            if reader.dtype == "auto":
                reader.dtype = "bfloat16"
            reader.device = "cpu"
            reader.backend = "torch"  # CUDA actors read with torch; the driver's keys must say so
        elif getattr(reader, "backend", "torch") == "auto":  # decided once here, so every actor reads as the keys say
            reader.backend = reader.resolved_backend()

    def _actor_reader_params(self, reader) -> dict[str, Any]:
        from readers.extractive import ExtractiveReader

        params = constructor_params(reader, ExtractiveReader)
        params.update(device=self._actor_device(), progress=False, num_threads=self._threads())
        return params


# ------------------------------------------------------------- subclasses
class RayDenseRetriever(DenseRetriever):
    """A :class:`DenseRetriever` whose missing corpus shards are encoded on a Ray actor pool."""

    def encode_shards(self, texts, ranges):
        return self.engine_.encode_shards(self, texts, ranges)

    def search_device(self) -> str:
        # the driver encodes queries and holds the index: it uses what it has (GPUs are the actors')
        return "cpu" if self.device == "cpu" else "auto"

    def encode_precision(self) -> str:
        return "cuda-autocast" if self.engine_.gpus_per_actor > 0 else "float32"


class RayBM25Retriever(BM25Retriever):
    """A :class:`BM25Retriever` whose search is split over Ray tasks by query blocks."""

    def index(self, corpus):
        super().index(corpus)  # builds (or finds) the cached index once, here
        self.corpus_ = corpus
        return self

    def search(self, query_texts, k, batch_size: int = 2000):
        if not hasattr(self, "corpus_"):
            raise RuntimeError("call index(corpus) before search()")
        if k < 1:
            raise UserError(f"bm25: k must be >= 1 (got {k})")
        return self.engine_.search_bm25(self, query_texts, k)


# the retrievers whose heavy part runs on Ray, by exact class -> their Ray version
ON_RAY = {BM25Retriever: RayBM25Retriever, DenseRetriever: RayDenseRetriever}


def _rebuild(cls, obj, engine):
    new = cls(**constructor_params(obj))
    new.engine_ = engine
    return new


# ----------------------------------------------------------------- workers
class _EncodeActor:
    """One sentence encoder per actor; each call encodes one shard."""

    def __init__(self, params: dict):
        import torch

        from retrievers.encoders import load_encoder

        torch.set_num_threads(int(params["threads"]))
        self.params = params
        spec = dict(params["encoder"])
        self.encoder = load_encoder(spec.pop("model"), device=params["device"], options=dict(spec.pop("options")), **spec)

    def __call__(self, batch: dict) -> dict:
        out = []
        for texts in batch["texts"]:
            emb = self.encoder.encode_passages([str(t) for t in texts], show_progress=False)
            out.append(_to_bytes(emb))
        return {"lo": batch["lo"], "hi": batch["hi"], "emb": np.array(out, dtype=object)}


class _ReadActor:
    """One extractive reader per actor; each call reads one chunk of pairs."""

    def __init__(self, params: dict):
        from readers.extractive import ExtractiveReader

        self.reader = ExtractiveReader(**params).load()

    def __call__(self, batch: dict) -> dict:
        from readers.halving import read_pairs_halving

        scores, starts, ends = [], [], []
        for qs, ps in zip(batch["questions"], batch["passages"]):
            reads = read_pairs_halving(self.reader, [str(q) for q in qs], [str(p) for p in ps])
            scores.append(_to_bytes(reads.score))
            starts.append(_to_bytes(reads.start_char))
            ends.append(_to_bytes(reads.end_char))
        return {
            "chunk": batch["chunk"],
            "facts": np.array([json.dumps(self.reader.facts())] * len(scores), dtype=object),
            "score": np.array(scores, dtype=object),
            "start": np.array(starts, dtype=object),
            "end": np.array(ends, dtype=object),
        }


def _bm25_block(params: dict, corpus, texts: list[str], k: int):
    """One block of BM25 queries (a Ray task: its own JVM, the cached index)."""
    retriever = BM25Retriever(**params).index(corpus)
    ranking = retriever.search(texts, k)
    return ranking.ids, ranking.scores


def _to_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(array), allow_pickle=False)
    return buf.getvalue()


def _from_bytes(blob) -> np.ndarray:
    return np.load(io.BytesIO(bytes(blob)), allow_pickle=False)


def _rows(dataset):
    """Iterate a Ray dataset's rows; a bad-input error inside Ray surfaces as our own one-line error."""
    try:
        yield from dataset.iter_rows()
    except Exception as err:
        _raise_user_error(err)
        raise


def _get(ray, ref):
    try:
        return ray.get(ref)
    except Exception as err:
        _raise_user_error(err)
        raise


def _raise_user_error(err: BaseException) -> None:
    """Raise the ``UserError`` behind a Ray error, if there is one.

    Ray re-raises a worker's exception as its own types; the original is kept
    as ``cause`` (tasks) or only in the text of the remote traceback (Ray Data
    wraps it in ``UserCodeException``), whose last line is
    ``data.errors.UserError: <message>``.
    """
    seen, hops = err, 0
    while seen is not None and hops < 20:
        for candidate in (seen, getattr(seen, "cause", None)):
            if isinstance(candidate, UserError):
                raise UserError(str(candidate)) from None
        seen, hops = seen.__cause__ or seen.__context__, hops + 1
    marker = "data.errors.UserError: "
    for line in reversed(str(err).splitlines()):
        if line.startswith(marker):
            raise UserError(line[len(marker):]) from None

