"""The configuration of a run or a sweep: one tree of small typed records.

Built once at the edge -- from command-line flags (:mod:`pipeline.cli`), a
YAML/TOML file, or Python -- and validated once (pydantic): a bad value is one
line naming its field path and where it came from.  Below the command-line
module nothing sees argparse; stages receive the records they need.

Every setting has one name, its field path (``retriever.bm25.k1``).  A
field's command-line flag is declared next to it (``--bm25-k1``) and the
parsers of ``pipeline.run`` and ``pipeline.sweep`` are generated from these
records, so a new setting is one field.  Config files use the field paths
as nested mappings (``retriever: {bm25: {k1: 1.2}}``) or the flag names
(``bm25-k1: 1.2``).

:meth:`Config.fingerprint` hashes the settings that change results (every
field not marked ``volatile``: output places, threads, batch sizes and the
execution engine are not), so caches and resumes key on the whole
configuration and no list of flags is kept by hand anywhere.

Why pydantic: typed records with field-path errors, JSON dumps for the
manifest and strict unknown-key checks are what it is for; it is a
well-kept dependency that the tool's stack already installs.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from data.errors import UserError

TextField = Literal["sentence", "sentence+context", "context"]
ReadUnit = Literal["sentence", "paragraph"]
ReaderDtype = Literal["auto", "float32", "bfloat16", "float16", "int8"]
ReaderBackend = Literal["auto", "torch", "openvino"]
EncoderBackend = Literal["auto", "torch", "openvino"]


def setting(default: Any = None, flag: str | None = None, help: str = "", *, volatile: bool = False,
            metavar: str | None = None, repeat: bool = False, new: bool = False, **constraints: Any):
    """A field with its command-line flag and help; ``volatile`` settings change no result (left out of fingerprints);
    ``repeat``: the flag may be given several times (a list); ``new``: a setting added after fingerprints were
    recorded, left out of them while it holds its default (so the caches and sweep resumes of configurations
    that do not use it keep their keys)."""
    extra = {"flag": flag, "volatile": volatile, "metavar": metavar, "repeat": repeat, "new": new}
    return Field(default, description=help, json_schema_extra=extra, **constraints)


def each_checked(values: list[str], check) -> list[str]:
    """``values`` after ``check(value)`` accepted each (a name or spec); its one-line UserError becomes the field's error."""
    for value in values:
        try:
            check(value)
        except UserError as e:
            raise ValueError(str(e)) from None
    return values


class Section(BaseModel):
    """A record of settings: unknown keys are errors; values are checked on assignment too."""

    # a YAML number for a text setting (seeds: 3, n: 20) is that text, as on the command line
    model_config = ConfigDict(extra="forbid", validate_assignment=True, protected_namespaces=(), coerce_numbers_to_str=True)


# ----------------------------------------------------------------------- data
class DataConfig(Section):
    """Which questions and corpus, and the training split learned components are fitted on."""

    dataset: str = setting("reqa_squad", "--dataset", "reqa_squad, reqa_nq, squad_open, beir:NAME, mteb:NAME, "
                           "iapp_wiki_qa_squad, squad_file:PATH, open:SOURCE, or a plugin's dataset name")
    split: str = setting("dev", "--split")
    data_dir: Optional[str] = setting(None, "--data-dir", "local data directory, laid out like ../shared/data (default:"
                                     " $QA_DATA_DIR, else ../shared/data beside the checkout, else ../shared/data from the"
                                     " current directory)")
    data_file: Optional[str] = setting(None, "--data-file", "explicit dataset file")
    skip_bad_records: bool = setting(False, "--skip-bad-records", "skip (and count) invalid records instead of failing")
    language: str = setting("auto", "--language", "language of squad_file: and open: datasets: auto (squad_file: detected"
                            " from the text, open: English), en or th (Thai: ReQA sentences split with the Thai rules, BM25"
                            " pre-tokenized with newmm, Thai answer metrics)")
    answer_match: Optional[Literal["string", "regex"]] = setting(
        None, "--answer-match", "open: datasets: how an answer-bearing passage is decided (string: DPR has_answer;"
        " regex: CuratedTREC patterns); default: the dataset spec's")
    limit: Optional[int] = setting(None, "--limit", "evaluate only the first N questions", ge=1)
    train_split: str = setting("train", "--train-split", "split that learned retrievers/selectors are fitted on")
    train_limit: Optional[int] = setting(5000, "--train-limit", "questions of the training split used for fitting selectors", ge=1)

    def load_options(self) -> dict:
        """Keyword arguments of :func:`data.registry.load_dataset` (after the name and split)."""
        return {"data_dir": self.data_dir, "data_file": self.data_file, "skip_bad_records": self.skip_bad_records,
                "answer_match": self.answer_match, "language": self.language}

    def train_options(self) -> dict:
        """As :meth:`load_options` for the training split (its own file is never ``data_file``)."""
        return {**self.load_options(), "data_file": None}


class SweepDataConfig(DataConfig):
    dataset: str = setting("squad_open", "--dataset", "squad_open (paragraphs), reqa_squad (sentences), any dataset with answers")
    every: Optional[int] = setting(None, "--every", "evaluate every K-th question (spread over all articles), before --limit", ge=1)
    limit: Optional[int] = setting(None, "--limit", "evaluate only the first N questions (the corpus keeps their gold rows)", ge=1)
    corpus_sizes: str = setting("x1,x2,x5,all", "--corpus-sizes", "counts, noise ratios xR (R times the gold rows) or all,"
                                " e.g. 2067,5000,10000,all or x1,x2,x5,x10")
    seeds: str = setting("1", "--seeds", "number of noise samples K (seeds 1..K) or a list of seeds, e.g. 3,7")
    train_limit: Optional[int] = setting(2000, "--train-limit", "training questions (whole articles, seeded)", ge=1)
    train_seed: int = setting(13, "--train-seed", "seed of the training-question sample", ge=0, le=2**32 - 1)


# ------------------------------------------------------------------ retrieval
class BM25Config(Section):
    """Constructor options of :class:`retrievers.bm25.BM25Retriever` (its parameter names)."""

    k1: float = setting(0.9, "--bm25-k1")
    b: float = setting(0.4, "--bm25-b")
    field: TextField = setting("sentence", "--bm25-field")
    index_path: Optional[str] = setting(None, "--bm25-index", "search this existing Lucene index (a directory, e.g. built by"
                                        " python -m pyserini.index.lucene, or a Pyserini prebuilt index name such as"
                                        " wikipedia-dpr-100w) instead of building one; its document ids are matched to the corpus ids",
                                        metavar="DIR|NAME")


class DenseConfig(Section):
    """Constructor options of :class:`retrievers.dense.DenseRetriever` (its parameter names)."""

    model: Optional[str] = setting(None, "--encoder", "dense encoder name or path (default all-MiniLM-L6-v2, offline)")
    field: TextField = setting("sentence", "--dense-field")
    index_type: str = setting("flat", "--dense-index", "dense index: flat (exact), hnsw, or a FAISS index_factory string,"
                              " e.g. IVF4096,PQ64 (trained on a seeded sample, cached)", metavar="flat|hnsw|FACTORY")
    train_sample: Optional[int] = setting(None, "--dense-train-sample", "corpus rows a FAISS factory index is trained on "
                                          "(default max(65536, 64 x nlist), at most the corpus; seeded by --seed)", ge=1)
    nprobe: Optional[int] = setting(None, "--nprobe", "IVF lists searched per query (default 2 x sqrt(nlist))", ge=1)
    ef_search: Optional[int] = setting(None, "--ef-search", "HNSW search breadth efSearch (default 128)", ge=1)
    refine: Optional[float] = setting(None, "--dense-refine", "re-rank a factory index's top K_FACTOR x k by exact inner"
                                      " products read from the memory-mapped corpus embeddings", metavar="K_FACTOR")
    index_dir: Optional[str] = setting(None, "--dense-index-dir", "prebuilt FAISS index to search instead of encoding the corpus:"
                                       " a directory in Pyserini's layout (index + docid) or a Pyserini prebuilt dense index name")
    query_prompt: Optional[str] = setting(None, "--query-prompt", "dense query prompt: a prompt name of the model or a literal"
                                          " prefix; '' for none (default: the model's config_sentence_transformers.json prompts,"
                                          " else its family's, e.g. e5 'query: ')")
    passage_prompt: Optional[str] = setting(None, "--passage-prompt", "dense passage prompt, as --query-prompt (e5: 'passage: ');"
                                            " per member of a fused spec: dense:MODEL[query_prompt=...,passage_prompt=...]")
    token_budget: Optional[int] = setting(None, "--encoder-token-budget", "padded tokens per encoder batch (default: 2048 on the"
                                          " CPU, 16384 on CUDA; halved on CUDA out-of-memory)", volatile=True, ge=1)
    backend: EncoderBackend = setting(os.environ.get("QA_ENCODER_BACKEND") or "auto", "--encoder-backend",
                                      "what runs a sentence-transformers encoder on the CPU: auto (OpenVINO float32 or bf16"
                                      " where, on this CPU, it encoded SQuAD train check texts faster than torch with every"
                                      " vector within cosine 0.999 of torch's; measured once, cached), torch, openvino"
                                      " (default: $QA_ENCODER_BACKEND, else auto)")

    @field_validator("refine")
    @classmethod
    def _positive_refine(cls, v):
        if v is not None and not v > 0:
            raise ValueError("must be > 0; leave it unset for no re-ranking")
        return v


class RetrieverConfig(Section):
    """What ranks the corpus: a spec string and the options of the retrievers it names."""

    spec: str = setting("bm25", "--retriever", "bm25, dense[:MODEL], METHOD:a+b (rrf, fuse-minmax, fuse-zscore, fuse-sum,"
                        " route, route-stat, mrrank) or a plugin's retriever name; bracket options per member: bm25[k1=1.2]")
    depth: Optional[int] = setting(1000, "--depth", "results retrieved per query (metrics are computed within it)", ge=1)
    bm25: BM25Config = Field(default_factory=BM25Config)
    dense: DenseConfig = Field(default_factory=DenseConfig)
    fusion: dict[str, str] = setting({}, "--fusion-opt", "option of a fused retriever (repeatable)", metavar="KEY=VALUE")
    options: dict[str, dict[str, Any]] = setting({}, None, "constructor options of other (plugin) retrievers, by registered name")
    rerank: Optional[str] = setting(None, "--rerank", "re-rank the retriever's top --rerank-depth hits with a cross-encoder:"
                                    " [KIND:]MODEL[opts], MODEL a local directory (or a hub name, tried only when given);"
                                    " opts: depth=, max_length=, dtype=, batch_size= (docs: Retrievers, Re-ranking)",
                                    metavar="SPEC", new=True)
    rerank_depth: int = setting(100, "--rerank-depth", "first-stage hits re-scored per question (a spec's depth= wins)",
                                ge=1, new=True)
    rerank_field: Optional[Literal["sentence", "sentence+context"]] = setting(
        None, "--rerank-field", "what the cross-encoder reads of a candidate: sentence, or sentence+context (the sentence,"
        " the tokenizer's separator, its paragraph); default: what the model was trained on (its recipe.json), else"
        " sentence (a spec's field= wins)", new=True)
    rerank_mix: float = setting(0.0, "--rerank-mix", "weight of the first stage's score in the re-ranked score:"
                                " (1 - W) z(cross-encoder) + W z(first stage), z-scores per question over the re-scored"
                                " hits; 0 (default) ranks by the cross-encoder alone (a spec's mix= wins)",
                                ge=0.0, lt=1.0, new=True)
    rerank_max_length: int = setting(256, "--rerank-max-length", "tokens per (question, passage) pair the cross-encoder"
                                     " reads (a spec's max_length= wins)", ge=8, new=True)
    rerank_dtype: Literal["auto", "float32", "bfloat16"] = setting(
        "auto", "--rerank-dtype", "cross-encoder precision: auto (bf16 autocast on CUDA or a CPU with native bf16, else"
        " float32), float32, bfloat16", new=True)
    rerank_backend: Literal["auto", "torch", "openvino"] = setting(
        os.environ.get("QA_RERANK_BACKEND") or "auto", "--rerank-backend", "what runs the cross-encoder on the CPU:"
        " auto (OpenVINO where, on this CPU, it ranked SQuAD train check questions as torch float32 does and faster than"
        " torch; measured once, cached), torch, openvino (default: $QA_RERANK_BACKEND, else auto)", new=True)
    rerank_batch_size: Optional[int] = setting(None, "--rerank-batch-size", "most pairs per forward pass (default 64 on the"
                                               " CPU, 128 on CUDA)", volatile=True, ge=1)
    rerank_cache: Optional[str] = setting(None, "--rerank-cache", "directory of cached re-ranking scores (default:"
                                          " $QA_CACHE_DIR/rerank-scores; keyed by model content, max length, precision and"
                                          " the texts)", volatile=True, metavar="DIR")

    @field_validator("spec")
    @classmethod
    def _spec_not_empty(cls, v: str):
        if not v or not v.strip():
            raise ValueError("empty retriever spec")
        return v.strip()

    @field_validator("rerank")
    @classmethod
    def _rerank_parses(cls, v: Optional[str]):
        from retrievers.rerank import RERANKERS, parse_rerank_spec, spec_depth, spec_field, spec_mix

        if v is None:
            return v
        try:
            kind, _, _ = parse_rerank_spec(v)
            RERANKERS.get(kind)
            spec_depth(v, None)
            spec_field(v, None)
            spec_mix(v, None)
        except UserError as e:
            message, prefix = str(e), f"rerank {v.strip()!r}: "
            raise ValueError(message[len(prefix):] if message.startswith(prefix) else message) from None
        return v.strip()

    def rerank_options(self, device: str) -> dict:
        """The re-ranking stage's settings (:func:`retrievers.rerank.make_rerank_retriever`), empty without one."""
        if not self.rerank:
            return {}
        return {"spec": self.rerank, "depth": self.rerank_depth, "field": self.rerank_field, "mix": self.rerank_mix,
                "max_length": self.rerank_max_length,
                "dtype": self.rerank_dtype, "backend": self.rerank_backend, "batch_size": self.rerank_batch_size,
                "cache_dir": self.rerank_cache,
                "device": device}

    def constructor_options(self, *, seed: int | None, device: str) -> dict[str, dict]:
        """Options per registered retriever kind, as :func:`retrievers.registry.make_retriever` takes them.

        ``seed`` (a run's ``--seed``) reaches the FAISS training sample and learned fusers; ``None`` leaves
        their own defaults (the sweep, whose seeds are noise samples of the corpus).
        """
        from retrievers.fusion import method_learned
        from retrievers.registry import FUSERS

        bm25 = self.bm25.model_dump(exclude_none=True)
        dense = {"device": device, **{k: v for k, v in self.dense.model_dump().items() if v is not None or k == "token_budget"}}
        fusion = dict(self.fusion)
        if seed is not None:
            dense["seed"] = seed
            head = self.spec.split(":", 1)[0]
            if head in FUSERS and method_learned(head):
                fusion.setdefault("seed", str(seed))
        return {**{k: dict(v) for k, v in self.options.items()}, "bm25": bm25, "dense": dense, "fusion": fusion,
                "rerank": self.rerank_options(device)}


class SweepRetrieverConfig(RetrieverConfig):
    depth: Optional[int] = setting(None, "--depth", "results retrieved per question (default: N, or max(5N, 100) when"
                                   " reading paragraphs of sentence hits)", ge=1)


# -------------------------------------------------------------------- reading
class ReaderConfig(Section):
    """The reader and how it reads: an extractive span reader (a QA checkpoint) or a generative one (a language model)."""

    model: Optional[str] = setting(None, "--reader", "reader spec [KIND:]MODEL[opts]: a QA checkpoint path or alias (bert-base,"
                                   " bert-large, distilbert) is extractive; generative:MODEL is a language model (a"
                                   " directory, .gguf file, hub name or smollm2-135m-instruct, gemma3-270m) with options"
                                   " [template=..,max_new_tokens=..,order=rank|reversed|lost-in-the-middle,shots=..];"
                                   " omit for retrieval only")
    options: dict[str, Any] = setting({}, "--reader-opt", "an option of the reader's kind (repeatable; a spec's bracket"
                                      " options win): max_new_tokens=16, order=reversed, shots=2, template=FILE",
                                      metavar="KEY=VALUE")
    read_unit: ReadUnit = setting("sentence", "--read-unit", "what a passage is (squad_open: both are the paragraph)")
    max_length: int = setting(384, "--max-length", ge=8)
    stride: int = setting(128, "--stride", ge=0)
    max_answer_tokens: int = setting(30, "--max-answer-tokens", ge=1)
    batch_size: Optional[int] = setting(None, "--reader-batch-size", "most windows per forward pass (default: 64; halved on"
                                        " CUDA out-of-memory)", volatile=True, ge=1)
    token_budget: Optional[int] = setting(None, "--reader-token-budget", "cap windows x padded length per forward pass"
                                          " (default: 1024 on the CPU, none on CUDA)", volatile=True, ge=1)
    dtype: ReaderDtype = setting("auto", "--reader-dtype", "reader precision: auto (bf16/fp16 autocast on CUDA; on the CPU"
                                 " bf16 where it has native bf16, else float32), float32, bfloat16, float16, int8 (CPU: the checkpoint"
                                 " quantized once and cached, its answers checked against float32 on SQuAD train; only when asked)")
    backend: ReaderBackend = setting(os.environ.get("QA_READER_BACKEND") or "auto", "--reader-backend",
                                     "what runs the extractive reader on the CPU in float32/bf16: auto (OpenVINO where,"
                                     " on this CPU, it read SQuAD train check questions faster than torch with answers"
                                     " agreeing with torch float32's; measured once, cached), torch, openvino"
                                     " (default: $QA_READER_BACKEND, else auto)", new=True)
    mu: float = setting(1.0, "--mu", "BERTserini interpolation: (1-mu)*retriever + mu*reader", ge=0, le=1)
    read_cache: Optional[str] = setting(None, "--read-cache", "directory of cached reads (default: <out>/reads)", volatile=True)

    @field_validator("model")
    @classmethod
    def _spec_parses(cls, v: Optional[str]):
        from readers.registry import READERS, parse_reader_spec

        if v is None:
            return v
        kind, _, _ = parse_reader_spec(v)
        READERS.get(kind)
        return v.strip()

    @property
    def kind(self) -> Optional[str]:
        """The reader's registered kind (``extractive``, ``generative``, a plugin's), None without a reader."""
        from readers.registry import reader_kind

        return reader_kind(self.model)

    @model_validator(mode="after")
    def _generative_settings(self):
        if self.kind == "generative":
            if self.mu != 1.0:
                raise ValueError(f"--mu {self.mu}: a generative reader writes one answer from all n passages; there are"
                                 " no per-passage reader scores to mix with the retriever's")
            if self.dtype == "int8":
                raise ValueError("--reader-dtype int8 is the extractive reader's OpenVINO path; a generative reader takes"
                                 " auto, float32, bfloat16 or float16")
            if self.backend == "openvino":
                raise ValueError("--reader-backend openvino is the extractive reader's; a generative reader runs on torch")
        return self

    @model_validator(mode="after")
    def _budget_holds_a_window(self):
        if self.token_budget is not None and self.token_budget < self.max_length:
            raise ValueError(f"token_budget (--reader-token-budget) {self.token_budget}: must be at least"
                             f" max_length (--max-length) {self.max_length}")
        return self


class MetricsConfig(Section):
    """Answer metrics (names of the answer-metric registry) and BERTScore's options."""

    answer: list[str] = setting(["em", "f1", "rouge_l", "meteor", "bert_f1"], "--metrics",
                                "answer metrics, comma-separated (em, f1, rouge_l, meteor, bert_f1, or a plugin's)")
    bertscore_model: Optional[str] = setting(None, "--bertscore-model", "BERTScore model name or path (default roberta-large"
                                             " for English, bert-score's multilingual default otherwise; offline: all-MiniLM-L6-v2)")
    bertscore_layers: Optional[int] = setting(None, "--bertscore-layers", "BERTScore layer")
    bertscore_rescale: bool = setting(False, "--bertscore-rescale", "rescale BERT-F1 with bert-score's baseline for the model")
    bertscore_backend: Literal["auto", "torch", "openvino"] = setting(
        os.environ.get("QA_BERTSCORE_BACKEND") or "auto", "--bertscore-backend", "what embeds BERT-F1's tokens on the"
        " CPU: auto (OpenVINO where, on this CPU, its token embeddings were within cosine 0.999 of torch's and faster;"
        " measured once, cached), torch, openvino (default: $QA_BERTSCORE_BACKEND, else auto)", new=True)

    @field_validator("answer", mode="before")
    @classmethod
    def _comma_list(cls, v):
        if isinstance(v, str):
            v = [m.strip() for m in v.split(",") if m.strip()]
        return v

    @field_validator("answer")
    @classmethod
    def _registered(cls, v: list[str]):
        from eval.registry import answer_metric

        return each_checked(v, answer_metric)

    def options(self, language: str, device: str) -> dict[str, dict]:
        """Per answer metric, the options it is scored with (bert_f1: BERTScore's model, layer, rescaling, device)."""
        if "bert_f1" not in self.answer:
            return {}
        return {"bert_f1": {"model": self.bertscore_model, "num_layers": self.bertscore_layers, "rescale": self.bertscore_rescale,
                            "language": language, "device": None if device == "auto" else device,
                            "backend": self.bertscore_backend}}

    def bertscore(self, language: str, device: str) -> dict | None:
        """bert_f1's options when it is asked for, else None."""
        return self.options(language, device).get("bert_f1")


class SweepMetricsConfig(MetricsConfig):
    answer: list[str] = setting(["em", "f1", "bert_f1"], "--metrics", "em and f1 always; bert_f1 (default) adds BERT-F1"
                                " per n and selector; any other answer metric a sweep can score per n (rouge_l, meteor, a plugin's)")


class EngineConfig(Section):
    """Where the heavy stages execute: this process or a Ray cluster (same stages, same results)."""

    name: Literal["local", "ray"] = setting("local", "--engine", "local (this process) or ray (encoding, reading and BM25"
                                            " search on Ray)", volatile=True)
    ray_address: Optional[str] = setting(None, "--ray-address", "Ray cluster address (default: $RAY_ADDRESS, else a local"
                                         " Ray instance)", volatile=True)
    ray_actors: int = setting(2, "--ray-actors", "actors per encoder/reader pool (and BM25 query blocks)", volatile=True, ge=1)
    ray_gpus_per_actor: float = setting(0.0, "--ray-gpus-per-actor", "GPUs each encoder/reader actor reserves", volatile=True, ge=0)
    ray_cpus_per_actor: float = setting(1.0, "--ray-cpus-per-actor", "CPUs each actor or BM25 task reserves", volatile=True, ge=0)


class SelectorsConfig(Section):
    """The selectors a sweep scores on the same reads: threshold per θ, ordinal, oracle."""

    n: str = setting("1-20", "--n", "passages read: N or A-B; every n in 1..B is scored, rows for A..B are written")
    thetas: str = setting("0.5:0.95:0.05", "--thetas", "threshold θ grid: START:STOP:STEP or a list (default 0.5:0.95:0.05)")
    tau: Optional[int] = setting(None, "--tau", "τ of threshold and ordinal (default min(25, N))", ge=1)
    ordinal: bool = setting(True, "--no-ordinal", "skip the ordinal selector (no training retrieval)")
    extra: list[str] = setting([], "--selector", "another selector scored on the same reads (repeatable): any spec,"
                               " a plugin's too; learned ones are fitted like ordinal", repeat=True)

    @field_validator("extra")
    @classmethod
    def _selectors_parse(cls, v: list[str]):
        from selection import parse_selector

        return each_checked(v, parse_selector)


class StatisticsConfig(Section):
    bootstrap: int = setting(1000, "--bootstrap", "bootstrap replicates over questions", ge=1)
    bootstrap_seed: int = setting(0, "--bootstrap-seed")
    weighting: Literal["trapezoid", "log-trapezoid", "uniform"] = setting(
        "trapezoid", "--weighting", "regret weights over corpus sizes: trapezoid (over size), log-trapezoid (over log size: "
        "every decade weighs the same, for sizes spread over decades) or uniform")
    objective: str = setting("em", "--objective", "the answer metric best n, the best system, regret and savings at equal"
                             " quality are judged by: em (default), f1, or any metric in --metrics (has_answer for a"
                             " generative reader whose answers are not spans)")
    plots: bool = setting(True, "--no-plots", "no plots", volatile=True)


# ---------------------------------------------------------------- the configs
class Config(Section):
    """What run and sweep configurations share."""

    out: Optional[str] = setting(None, "--out", "output directory (default: a new directory under runs/)", volatile=True)
    device: str = setting("auto", "--device", "auto, cpu or cuda[:i]", volatile=True)

    @field_validator("device")
    @classmethod
    def _device(cls, v: str):
        d = str(v)
        if d not in ("auto", "cpu", "mps", "cuda") and not (d.startswith("cuda:") and d[5:].isdigit()):
            raise ValueError("use auto, cpu or cuda[:i]")
        return d

    def fingerprint(self, *sections: str, leave_out: tuple[str, ...] = ()) -> str:
        """sha256 of the canonical JSON of the settings that change results (``volatile`` ones left out),
        of the top-level ``sections`` only when named, less the ``leave_out`` field paths (``"data.seeds"``)."""
        settings = result_settings(self, sections)
        for path in leave_out:
            *parents, last = path.split(".")
            node = settings
            for key in parents:
                node = node.get(key, {})
            node.pop(last, None)
        return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()

    def to_dict(self) -> dict:
        """The whole configuration as JSON-able nested dicts (what the manifest records)."""
        return self.model_dump(mode="json")


class RunConfig(Config):
    """One ``pipeline.run``: retrieve, select, read, score."""

    data: DataConfig = Field(default_factory=DataConfig)
    retriever: RetrieverConfig = Field(default_factory=RetrieverConfig)
    selector: str = setting("top:5", "--selector", "how many passages to read: top:N, threshold:θ[,τ], ordinal[:τ],"
                            " gap[:τ[,b]], rlt[:τ[,λ]], confidence[:τ], oracle, or a plugin's (docs: Selectors)")
    reader: ReaderConfig = Field(default_factory=ReaderConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    threads: Optional[int] = setting(None, "--threads", "CPU threads for torch (default: the cores this process may use)",
                                     volatile=True, ge=1)
    seed: int = setting(13, "--seed", "seed of everything sampled (FAISS training sample, learned fusers, intervals)",
                        ge=0, le=2**32 - 1)

    @field_validator("selector")
    @classmethod
    def _selector_parses(cls, v: str):
        from selection import parse_selector

        try:
            parse_selector(v)
        except UserError as e:
            message, prefix = str(e), f"selector {v!r}: "
            raise ValueError(message[len(prefix):] if message.startswith(prefix) else message) from None
        return v

    @model_validator(mode="after")
    def _closed_book_is_generative(self):
        from selection import parse_selector

        selector = parse_selector(self.selector)
        if getattr(selector, "method", None) == "top" and selector.n == 0 and self.reader.model and self.reader.kind != "generative":
            raise ValueError("top:0 reads no passage (closed book): only a generative reader answers without one")
        return self

    @model_validator(mode="after")
    def _learned_selector_fits_on_another_split(self):
        """Checked here, before any work, as pipeline.run would find it after loading and retrieving."""
        from data.registry import SPLIT_ALIASES
        from selection import parse_selector

        data, selector = self.data, parse_selector(self.selector)
        if self.reader.model and selector.needs_fit() and \
                SPLIT_ALIASES.get(data.train_split, data.train_split) == SPLIT_ALIASES.get(data.split, data.split):
            raise ValueError(f"selector {selector.spec} is learned: --train-split {data.train_split} is the evaluated split; "
                             "fit it on another split")
        return self


class SweepConfig(Config):
    """One ``pipeline.sweep``: the run's stages looped over corpus sizes, n and seeds."""

    data: SweepDataConfig = Field(default_factory=SweepDataConfig)
    retriever: SweepRetrieverConfig = Field(default_factory=SweepRetrieverConfig)
    reader: ReaderConfig = Field(default_factory=ReaderConfig)
    metrics: SweepMetricsConfig = Field(default_factory=SweepMetricsConfig)
    selectors: SelectorsConfig = Field(default_factory=SelectorsConfig)
    statistics: StatisticsConfig = Field(default_factory=StatisticsConfig)

    @field_validator("metrics")
    @classmethod
    def _sweep_metrics(cls, v: SweepMetricsConfig):
        from eval.registry import answer_metric_names

        unknown = [m for m in v.answer if m not in answer_metric_names(sweep=True)]
        if unknown:
            raise ValueError(f"a sweep scores em, f1 and every metric it can score per n"
                             f" ({', '.join(answer_metric_names(sweep=True))}); not {unknown[0]!r}")
        return v

    @model_validator(mode="after")
    def _objective_is_scored(self):
        scored = dict.fromkeys(("em", "f1", *self.metrics.answer))
        if self.statistics.objective not in scored:
            raise ValueError(f"--objective {self.statistics.objective}: the sweep scores {', '.join(scored)}"
                             " (--metrics); judge by one of them")
        return self


# ------------------------------------------------------------ field metadata
def result_settings(model: BaseModel, sections: tuple[str, ...] = ()) -> dict:
    """The model's settings that change results, as a nested dict (``sections``: only those top-level ones)."""
    out = {}
    for name, info in type(model).model_fields.items():
        if sections and name not in sections:
            continue
        extra = info.json_schema_extra or {}
        if isinstance(extra, dict) and extra.get("volatile"):
            continue
        value = getattr(model, name)
        if isinstance(extra, dict) and extra.get("new") and value == info.default:
            continue
        out[name] = result_settings(value) if isinstance(value, BaseModel) else _jsonable(value)
    return out


def _jsonable(value):
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return json.loads(json.dumps(value, default=str))


def walk_fields(model_cls: type[BaseModel], prefix: tuple[str, ...] = ()):
    """``(path, FieldInfo, annotation)`` of every leaf setting, depth first."""
    for name, info in model_cls.model_fields.items():
        ann = info.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            yield from walk_fields(ann, prefix + (name,))
        else:
            yield prefix + (name,), info


def flag_table(model_cls: type[BaseModel]) -> dict[str, tuple[str, ...]]:
    """Flag dest (``bm25_k1``) -> field path (``("retriever", "bm25", "k1")``)."""
    out = {}
    for path, info in walk_fields(model_cls):
        extra = info.json_schema_extra or {}
        flag = extra.get("flag") if isinstance(extra, dict) else None
        if flag:
            out[flag.lstrip("-").replace("-", "_")] = path
    return out


def path_text(path) -> str:
    return ".".join(str(p) for p in path)


# ------------------------------------------------------------------ building
def set_path(tree: dict, path: tuple[str, ...], value) -> None:
    node = tree
    for key in path[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise UserError(f"{path_text(path[:-1])}: expected a mapping of settings")
    node[path[-1]] = value


def merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) and k not in ("fusion", "options") else v
    return out


def read_config_file(path: str | Path) -> dict[str, Any]:
    """A YAML or TOML file's mapping (one-line error naming the file otherwise)."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"{p}: config file not found")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        line = p.read_bytes()[: e.start].count(b"\n") + 1
        raise UserError(f"{p}: line {line}: not UTF-8 text") from None
    try:
        from data.io import load_config_text

        cfg = load_config_text(text, p)  # (a key given twice is an error, not the last one winning)
        if cfg is None and p.suffix.lower() != ".toml":
            cfg = {}
    except UserError:
        raise
    except Exception as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)  # YAML: where it went wrong
        where = f"line {mark.line + 1} column {mark.column + 1}: " if mark is not None else ""
        raise UserError(f"{p}: {where}cannot parse config ({(str(e).splitlines() or [type(e).__name__])[0]})") from None
    if not isinstance(cfg, dict):
        raise UserError(f"{p}: config must be a mapping of settings")
    return cfg


def tree_from_file(model_cls: type[BaseModel], cfg: dict[str, Any], source: str) -> tuple[dict, dict]:
    """A config file's mapping as a nested settings tree, and the origin of each path (the file).

    Keys are field paths (nested mappings) or flag names (``bm25-k1``, ``bm25_k1``).
    """
    flags = flag_table(model_cls)
    sections = {name for name, info in model_cls.model_fields.items()
                if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel)}
    tree: dict = {}
    origin: dict = {}
    for key, value in cfg.items():
        k = str(key).replace("-", "_")
        if k in sections and isinstance(value, dict):
            tree = merge(tree, {k: value})
            origin[(k,)] = source
            continue
        if k in flags:
            path = flags[k]
            set_path(tree, path, flag_value(k, value))
            origin[path] = source
            continue
        if k in model_cls.model_fields:
            set_path(tree, (k,), value)
            origin[(k,)] = source
            continue
        raise UserError(f"{source}: unknown setting(s) {key}")
    return tree, origin


def flag_value(dest: str, value):
    """A value given under a flag name (command line or file) as its setting's value: the ``--no-X`` switches
    store the negation of their setting, ``--fusion-opt KEY=VALUE`` items a mapping."""
    if dest.startswith("no_") and isinstance(value, bool):
        return not value
    if dest == "fusion_opt" and isinstance(value, list):
        return parse_key_values(value, "--fusion-opt")
    return value


def parse_key_values(items, flag: str) -> dict[str, str]:
    out = {}
    for item in items or []:
        if "=" not in str(item):
            raise UserError(f"{flag} {item!r}: expected KEY=VALUE")
        k, v = str(item).split("=", 1)
        out[k.strip()] = v.strip()
    return out


def build_config(model_cls: type[Config], tree: dict, origin: dict | None = None):
    """Validate a settings tree into ``model_cls``; a bad value is one line naming the flag or file it came from,
    the value, why, and its field path."""
    try:
        return model_cls.model_validate(tree)
    except ValidationError as e:
        raise UserError(describe_error(e.errors()[0], origin or {})) from None


def describe_error(err: dict, origin: dict) -> str:
    loc = tuple(str(x) for x in err["loc"] if not isinstance(x, int))
    where = next((origin[loc[:n]] for n in range(len(loc), 0, -1) if loc[:n] in origin), None)
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    ctx = err.get("ctx") or {}
    if err["type"] == "greater_than_equal":
        msg = f"must be >= {ctx.get('ge')}"
    elif err["type"] == "less_than_equal":
        msg = f"must be <= {ctx.get('le')}"
    elif err["type"] == "literal_error":
        msg = f"use {str(ctx.get('expected', '')).replace(chr(39), '')}"
    elif err["type"] == "extra_forbidden":
        msg = "unknown setting"
    got = err.get("input")
    value = "" if isinstance(got, (dict, BaseModel)) or got is None or err["type"] == "extra_forbidden" else f" {got!r}"
    path = path_text(loc)
    if where and where.startswith("--"):
        return f"{where}{value}: {msg} (setting {path})"
    if where:
        return f"{where}: {path}{value}: {msg}"
    return f"{path}{value}: {msg}" if path else msg


def load_config(model_cls: type[Config], path: str | Path, **overrides: Any):
    """A config object from a YAML/TOML file (field paths or flag names), for Python callers."""
    tree, origin = tree_from_file(model_cls, read_config_file(path), str(path))
    for key, value in overrides.items():
        set_path(tree, tuple(key.split(".")), value)
    return build_config(model_cls, tree, origin)
