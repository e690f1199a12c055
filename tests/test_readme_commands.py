"""Every command line README.md shows goes through the real argument parser of its module: its flags exist and its
values parse, so the README cannot drift from the code.  Nothing runs.

The commands are read from README.md at test time: every ``python -m MODULE ...`` line of a fenced ``bash`` block
(backslash continuations joined, ``#`` comments dropped) and every inline code span that is such a command.  A
module of this project is parsed the way its ``main`` parses: ``pipeline.run`` and ``pipeline.sweep`` build their
typed configuration (every value checked, a ``--config FILE`` read; a file the README only names is read as an empty
one), and ``pipeline.run``'s retriever spec is built as the run builds it before loading anything; any other
command's ``main`` runs up to its ``ArgumentParser.parse_args`` and stops there.  Third-party modules (``pytest``)
are left to their own parsers.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import re
import shlex
from pathlib import Path
from unittest import mock

import pytest

from data.errors import UserError
from tests.conftest import ROOT

README = ROOT / "README.md"
PROJECT_PACKAGES = {p.parent.name for p in ROOT.glob("*/*.py")}  # (bench/ has no __init__.py)


def readme_commands(text: str) -> list[str]:
    """``python -m ...`` command lines of fenced bash blocks and of inline code spans, in README order."""
    commands: list[tuple[int, str]] = []
    fence = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```", re.S | re.M)
    for block in fence.finditer(text):
        if block.group(1).lower() not in ("bash", "sh", "shell", "console", ""):
            continue
        joined = re.sub(r"\\\n", " ", block.group(2))
        for line in joined.splitlines():
            line = line.strip().removeprefix("$ ").strip()
            if re.match(r"python3? -m \S", line):
                commands.append((block.start(), line))
    prose = fence.sub(lambda m: " " * len(m.group(0)), text)
    for span in re.finditer(r"`([^`\n]+)`", prose):
        if re.match(r"python3? -m \S", span.group(1).strip()):
            commands.append((span.start(), span.group(1).strip()))
    return [line for _, line in sorted(commands)]


def split_command(line: str) -> tuple[str, list[str]]:
    """(module, its arguments) of ``python -m MODULE ARGS...`` (shell words, comments dropped)."""
    words = shlex.split(line, comments=True)
    assert words[:2] in (["python", "-m"], ["python3", "-m"]), line
    return words[2], words[3:]


class _Parsed(BaseException):
    """Raised by the patched ``parse_args`` once the real one has parsed: the command stops before it runs."""


class Refused(AssertionError):
    """The command stopped before its parser finished (its own parser turns argparse's errors into one line)."""


def parse_only(module_name: str, argv: list[str], tmp_path: Path):
    """Parse ``argv`` as ``python -m module_name`` does, running nothing; returns what the parser made."""
    module = importlib.import_module(module_name)
    if hasattr(module, "parse_config"):  # typed configs: pipeline.run, pipeline.sweep
        argv = list(argv)
        for i, word in enumerate(argv[:-1]):
            if word == "--config" and not (ROOT / argv[i + 1]).is_file():
                (tmp_path / Path(argv[i + 1]).name).write_text("{}\n", encoding="utf-8")
                argv[i + 1] = str(tmp_path / Path(argv[i + 1]).name)
        config, _ = module.parse_config(argv)
        if module_name == "pipeline.run":  # the retriever spec, built as the run builds it before any data
            from pipeline import stages
            from pipeline.experiment import retriever_options

            stages.build_retriever(config.retriever.spec, retriever_options(config))
        return config
    real = argparse.ArgumentParser.parse_args

    def parse_args(self, args=None, namespace=None):
        raise _Parsed(real(self, args, namespace))

    assert hasattr(module, "main"), f"python -m {module_name}: no main() to parse with"
    stderr = io.StringIO()
    with mock.patch.object(argparse.ArgumentParser, "parse_args", parse_args), contextlib.redirect_stderr(stderr):
        try:
            status = module.main(argv)
        except _Parsed as parsed:
            return parsed.args[0]
    raise Refused(f"python -m {module_name} exited {status} before its arguments were parsed: {stderr.getvalue().strip()}")


def _commands() -> list[str]:
    return readme_commands(README.read_text(encoding="utf-8"))


def test_the_readme_commands_are_found():
    """The reader of README.md finds what it shows: the main job whole (its continuation joined), the five common
    commands, the results table's commands."""
    commands = _commands()
    main_job = ("python -m pipeline.run --dataset reqa_squad --split dev --retriever bm25 --depth 100 --selector top:5 "
                "--reader ../shared/models/minilm-squad-reader")
    assert any(" ".join(c.split()) == main_job for c in commands), commands
    modules = {split_command(c)[0] for c in commands}
    assert {"pipeline.run", "pipeline.sweep", "pipeline.compare", "pipeline.report"} <= modules, modules


def test_joined_continuations_comments_and_inline_commands():
    text = ("intro `python -m pipeline.run --limit 2` and `not a command`\n\n"
            "```bash\nbash install.sh   # not python\npython -m pipeline.sweep --n 1-5 \\\n  --seeds 1  # a comment\n```\n"
            "```text\npython -m pipeline.run --no-such-flag\n```\n")
    assert readme_commands(text) == ["python -m pipeline.run --limit 2", "python -m pipeline.sweep --n 1-5    --seeds 1  # a comment"]
    assert split_command(readme_commands(text)[1]) == ("pipeline.sweep", ["--n", "1-5", "--seeds", "1"])


@pytest.mark.parametrize("command", _commands())
def test_a_readme_command_parses(command, tmp_path, capsys):
    module, argv = split_command(command)
    if module.split(".")[0] not in PROJECT_PACKAGES:
        pytest.skip(f"{module} is not this project's")
    try:
        parse_only(module, argv, tmp_path)
    except SystemExit as e:  # argparse: an unknown flag or a value it cannot convert
        pytest.fail(f"{command}\n-> exit {e.code}: {capsys.readouterr().err.strip()}")
    except Exception as e:  # a value the config refuses (one line, naming the flag)
        pytest.fail(f"{command}\n-> {type(e).__name__}: {e}")


def test_a_drifted_command_fails_the_check(tmp_path, capsys):
    """What the check catches: a flag that does not exist, a value that does not parse, a bad spec."""
    for command in ("python -m pipeline.run --dataset reqa_squad --retriver bm25",
                    "python -m pipeline.run --depth many",
                    "python -m pipeline.run --retriever fuse-zscore:bm25+nothing",
                    "python -m pipeline.sweep --bootstrap 0",
                    "python -m pipeline.compare runs/a runs/b --test t-test-of-my-own",
                    "python -m pipeline.report runs/a --top ten"):
        module, argv = split_command(command)
        with pytest.raises((SystemExit, UserError, Refused)):
            parse_only(module, argv, tmp_path)
