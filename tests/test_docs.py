"""The documentation stays true: the site builds strictly, every command it quotes parses, the README stays short.

* ``mkdocs build --strict`` (mkdocs.yml, docs/) passes: every page in the nav, every link and anchor found,
  the API reference generated from the docstrings;
* every ``python -m <our module> ...`` command quoted in README.md and docs/*.md (fenced shell blocks and
  inline code) is parsed by that command's real argument parser without running it: ``pipeline.run`` and
  ``pipeline.sweep`` through the typed configuration (pydantic validation included, plus the dataset name
  and the retriever spec the config names), modules with ``build_parser()`` through it, the others by
  stopping their ``main`` right after argparse has parsed.  Config files a command names (``--config
  run.yaml``) come from the docs' own YAML blocks that start with ``# run.yaml``;
* README.md has at most 250 lines, and README and docs hold no session history.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT

DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
OUR_PACKAGES = {"pipeline", "readers", "data", "retrievers", "eval", "selection", "hardware", "tests", "bench"}
SHELL_FENCES = {"", "bash", "sh", "shell", "console"}


# ------------------------------------------------------------------ the site
@pytest.mark.slow
def test_site_builds_strictly(tmp_path):
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip('mkdocs is not installed: pip install -e ".[docs]" (install.sh does)')
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    problems = [line for line in proc.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert proc.returncode == 0, "\n".join(problems) or proc.stderr[-3000:]
    assert (tmp_path / "site" / "index.html").is_file() and (tmp_path / "site" / "reference" / "index.html").is_file()


# ------------------------------------------------------- quoted commands
@dataclass(frozen=True)
class Command:
    where: str  # file:line
    module: str
    args: tuple[str, ...]


def _fenced_blocks(text: str):
    """(first line number, language, body) of every fenced code block."""
    for m in re.finditer(r"^```([\w-]*)[^\n]*\n(.*?)^```", text, flags=re.S | re.M):
        yield text.count("\n", 0, m.start()) + 2, m.group(1).lower(), m.group(2)


def _logical_lines(body: str, first: int):
    """Shell lines with their ``\\`` continuations joined, and the line each starts on."""
    start, parts = None, []
    for i, line in enumerate(body.splitlines()):
        if start is None:
            start = first + i
        if line.rstrip().endswith("\\"):
            parts.append(line.rstrip()[:-1])
            continue
        parts.append(line)
        yield start, " ".join(parts)
        start, parts = None, []
    if parts:
        yield start, " ".join(parts)


_REDIRECT = re.compile(r"\s\d?>>?\s*\S+")


def _commands_in(line: str, where: str):
    """The ``python -m <module> args`` commands of one shell line (env prefixes, ``;``/``&&``/pipes, redirections and
    comments allowed)."""
    lexer = shlex.shlex(_REDIRECT.sub(" ", line), posix=True, punctuation_chars=";&|<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        tokens = list(lexer)
    except ValueError as e:
        raise AssertionError(f"{where}: cannot split the command line ({e}): {line}") from None
    out = []
    for i, tok in enumerate(tokens):
        if tok in ("python", "python3") and i + 2 < len(tokens) and tokens[i + 1] == "-m":
            module = tokens[i + 2]
            if module.split(".")[0] not in OUR_PACKAGES:
                continue
            args = []
            for t in tokens[i + 3:]:
                if t and set(t) <= set(";&|<>"):
                    break
                args.append(t)
            out.append(Command(where, module, tuple(args)))
    return out


def quoted_commands() -> list[Command]:
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        name = page.relative_to(ROOT).as_posix()
        fenced = list(_fenced_blocks(text))
        for first, lang, body in fenced:
            if lang in SHELL_FENCES:
                for lineno, line in _logical_lines(body, first):
                    found += _commands_in(line, f"{name}:{lineno}")
        prose = re.sub(r"^```.*?^```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S | re.M)
        for m in re.finditer(r"`([^`\n]+)`", prose):
            span = m.group(1)
            if re.match(r"^(\w+=\S+\s+)*python3? -m \S+\s+\S", span):  # a command with arguments, not a module's name
                found += _commands_in(span, f"{name}:{prose.count(chr(10), 0, m.start()) + 1}")
    return found


COMMANDS = quoted_commands()
# a stand-in instead of a value: ... / …, <thing>, a lone capital (--seed S), or a capitalised word a reader must replace
_PLACEHOLDER = re.compile(r"^(\.\.\.|…|<[^>]+>|[A-Z])$|\b(DIR|FILE|PATH|NAME|MODEL|SPEC|DEST|MODULE|RUN_[A-Z]|KEY=VALUE|"
                          r"MODEL_OR_DIR|SQUAD_FILE|CORPUS|QUESTIONS)\b")


class _Parsed(BaseException):
    """Raised right after argparse parsed a command's flags, so its main stops there."""


def _parse_config_command(module, args):
    from data.registry import resolve
    from retrievers.registry import make_retriever

    config, _ = module.parse_config(list(args))
    resolve(config.data.dataset)  # a registered dataset name (and argument rule)
    make_retriever(config.retriever.spec, config.retriever.constructor_options(seed=config.seed if hasattr(config, "seed") else None,
                                                                                device="cpu"))


def _parse_with_main(module, args, monkeypatch):
    original = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, *a, **kw):
        raise _Parsed(original(self, *a, **kw))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    try:
        module.main(list(args))
    except _Parsed:
        return
    raise AssertionError("its main returned without parsing arguments")


def _config_files(directory: Path) -> None:
    """The docs' YAML/TOML examples that name their file on the first line (``# run.yaml``), written out."""
    for page in PAGES:
        for _, lang, body in _fenced_blocks(page.read_text(encoding="utf-8")):
            m = re.match(r"#\s*(\S+\.(?:ya?ml|toml))\s*\n", body)
            if lang in ("yaml", "yml", "toml") and m:
                (directory / m.group(1)).write_text(body, encoding="utf-8")


def test_docs_quote_commands():
    assert len(COMMANDS) >= 40, "the command extraction found too few commands in README.md and docs/"
    modules = {c.module for c in COMMANDS}
    assert {"pipeline.run", "pipeline.sweep", "pipeline.compare", "pipeline.report", "pipeline.export",
            "pipeline.sweep_report", "pipeline.position", "readers.train"} <= modules


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: f"{c.where} {c.module}")
def test_quoted_command_parses(command, tmp_path, monkeypatch, capsys):
    placeholders = [a for a in command.args if _PLACEHOLDER.search(a)]
    assert not placeholders, f"{command.where}: write real values, not placeholders {placeholders}"
    _config_files(tmp_path)
    monkeypatch.chdir(tmp_path)  # relative paths (config files) resolve here; nothing runs
    from data.errors import UserError

    module = importlib.import_module(command.module)
    try:
        if hasattr(module, "parse_config"):  # pipeline.run, pipeline.sweep: the typed configuration
            _parse_config_command(module, command.args)
        elif hasattr(module, "build_parser"):
            module.build_parser().parse_args(list(command.args))
        else:
            _parse_with_main(module, command.args, monkeypatch)
    except SystemExit as e:
        if e.code not in (0, None):  # --help exits 0
            raise AssertionError(f"{command.where}: python -m {command.module} {shlex.join(command.args)}\n"
                                 f"{capsys.readouterr().err.strip()}") from None
    except UserError as e:
        raise AssertionError(f"{command.where}: python -m {command.module} {shlex.join(command.args)}\nerror: {e}") from None


# --------------------------------------------------------------- the words
def test_readme_is_a_short_guide():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; move detail into docs/"


_HISTORY = re.compile(r"\b(sessions?|issues?|notes|withdrawn)\b|tried and dropped", re.I)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_session_history(page):
    hits = [f"{page.name}:{n}: {line.strip()[:120]}" for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
            if _HISTORY.search(line)]
    assert not hits, "user docs describe the tool, not its history:\n" + "\n".join(hits)
