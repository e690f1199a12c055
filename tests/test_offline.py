"""A fresh checkout, offline, nothing set: the README's commands find the data beside the checkout, and the hub is
probed once and never retried -- a hub name resolves to the local source or fallback at once, or stops with one
error line within 2 s naming what to use instead.

The commands run as a user runs them: ``python -m pipeline.run`` from the checkout root, with none of
``QA_DATA_DIR``, ``HF_HUB_OFFLINE``, ``HF_DATASETS_OFFLINE``, ``TRANSFORMERS_OFFLINE`` set.  The hub's address
(``HF_ENDPOINT``) is one that cannot answer -- a closed port, or a server that accepts and never answers -- so the
tests mean the same on a machine with internet.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import READER, ROOT

MAIN_JOB = ("python -m pipeline.run --dataset reqa_squad --split dev --retriever bm25 --depth 100 --selector top:5 "
            "--reader ../shared/models/minilm-squad-reader")
RETRY_MARKS = ("Retrying", "Retry ", "thrown while requesting")
BOUND_S = 2.0  # one error line within 2 s: a functional bound (a hang or the hub client's retries take 10 s or more);
# measured 0.55 s on an idle 2-core Xeon, 1.5-2.2 s with a main job beside it: the tests allow a margin for a busy
# machine (the suite runs in two processes on two cores), far below what a retry costs
MARGIN_S = 1.0

pytestmark = pytest.mark.skipif(not READER.is_dir() or not (ROOT.parent / "shared" / "data").is_dir(),
                                reason="needs ../shared/data and ../shared/models beside the checkout")


def closed_port() -> str:
    """An address where nothing listens: the connection is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def silent_server():
    """An address that accepts connections and never answers: the probe waits its timeout, no longer."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    server.close()


def user_env(endpoint: str, **extra) -> dict:
    """The environment of a user who set nothing: no data dir, no offline switch; the suite's cache (so built
    datasets and indexes are reused), the given hub address."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("QA_DATA_DIR", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(HF_ENDPOINT=endpoint, **extra)
    return env


def run(command: str, endpoint: str, *extra: str, timeout: float = 900, **env) -> tuple[subprocess.CompletedProcess, float]:
    argv = shlex.split(command.replace("python ", f"{sys.executable} ", 1)) + list(extra)
    t0 = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, env=user_env(endpoint, **env), capture_output=True, text=True, timeout=timeout)
    return proc, time.monotonic() - t0


def assert_one_error_line(proc, wall: float, bound: float, *needles: str) -> str:
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-2000:]
    assert not any(mark in proc.stderr for mark in RETRY_MARKS)
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert wall < bound + MARGIN_S, f"{wall:.2f} s for: {lines[0]}"
    return lines[0]


# ------------------------------------------------------------------ the probe, in this process
@pytest.fixture
def undecided(monkeypatch):
    """No offline switch set and no decision made yet (restored afterwards)."""
    import huggingface_hub.constants

    from data import hub

    for name in hub.OFFLINE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    hub.forget()
    yield hub
    hub.forget()


def test_the_hub_is_probed_once_and_offline_switches_the_hub_libraries(undecided, monkeypatch):
    import huggingface_hub.constants

    hub = undecided
    monkeypatch.setenv("HF_ENDPOINT", closed_port())
    probes = []
    real = hub.probe
    monkeypatch.setattr(hub, "probe", lambda *a, **k: probes.append(1) or real(*a, **k))
    t0 = time.monotonic()
    assert hub.offline() and hub.offline() and hub.offline()
    assert len(probes) == 1 and time.monotonic() - t0 < 1.0
    assert "cannot be reached" in hub.why_offline()
    assert all(os.environ[name] == "1" for name in hub.OFFLINE_VARIABLES)  # what is imported later, child processes
    assert huggingface_hub.constants.HF_HUB_OFFLINE is True  # what is imported already


def test_an_offline_switch_is_honoured_without_a_probe(undecided, monkeypatch):
    hub = undecided
    monkeypatch.setattr(hub, "probe", lambda *a, **k: pytest.fail("probed although switched off"))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    assert hub.offline() and hub.why_offline() == "hub access is switched off (HF_DATASETS_OFFLINE)"


def test_a_silent_hub_is_given_up_after_the_probe_timeout(undecided, silent_server, monkeypatch):
    hub = undecided
    monkeypatch.setenv("HF_ENDPOINT", silent_server)
    t0 = time.monotonic()
    assert hub.offline()
    assert time.monotonic() - t0 < hub.PROBE_TIMEOUT + 0.5
    assert hub.why_offline() == f"{silent_server} cannot be reached: no answer within {hub.PROBE_TIMEOUT:g} s"


# ------------------------------------------------------------------ the commands
def test_reader_by_hub_name_offline_is_one_line_within_2s_naming_a_local_reader():
    """The README's main job with ``--reader bert-base`` and no hub: one line, at once, naming the local directory
    to pass instead (the shared reader) -- no retries, nothing loaded first."""
    proc, wall = run(MAIN_JOB.replace("../shared/models/minilm-squad-reader", "bert-base"), closed_port())
    assert_one_error_line(proc, wall, BOUND_S, "--reader bert-base", "csarron/bert-base-uncased-squad-v1",
                          "cannot be reached", "--reader ../shared/models/minilm-squad-reader")


def test_reader_by_hub_name_when_the_hub_never_answers(silent_server):
    """A hub that accepts and never answers costs the probe's timeout (1 s), once: the line still comes within
    the bound."""
    proc, wall = run(MAIN_JOB.replace("../shared/models/minilm-squad-reader", "bert-base"), silent_server)
    assert_one_error_line(proc, wall, BOUND_S, "no answer within 1 s", "--reader ../shared/models/minilm-squad-reader")


def test_dataset_not_found_offline_is_one_line_at_once(tmp_path):
    """SQuAD not under the data dir given and no hub: the one-line error naming the file to put where, without the
    datasets library's five retries of ``datasets/squad`` (29 s before)."""
    proc, wall = run("python -m pipeline.run --dataset reqa_squad --split dev --retriever bm25", closed_port(),
                     "--data-dir", str(tmp_path), "--out", str(tmp_path / "out"))
    assert_one_error_line(proc, wall, BOUND_S, f"squad/dev-v1.1.json (or .zip/.gz) under {tmp_path}", "cannot be reached")


def test_hub_dataset_names_offline_are_one_line_at_once(tmp_path):
    for dataset, needle in (("beir:nfcorpus", "no local BEIR copy"), ("reqa_nq", "Natural Questions not found")):
        proc, wall = run(f"python -m pipeline.run --dataset {dataset} --retriever bm25", closed_port(),
                         "--data-dir", str(tmp_path), "--out", str(tmp_path / "out"))
        assert_one_error_line(proc, wall, BOUND_S, needle, "cannot be reached")


@pytest.mark.slow
def test_bert_f1_default_offline_falls_back_at_once(tmp_path):
    """roberta-large not in the (empty) HF cache and no hub: BERT-F1's documented fallback at once, no retries."""
    code = ("from eval.bertscore import bert_f1; s, info = bert_f1(['Denver Broncos'], [['the Denver Broncos']], cache=False);"
            " print(info['fallback'], info['model'])")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=user_env(closed_port(), HF_HUB_CACHE=str(tmp_path / "hf"), HF_HOME=str(tmp_path / "hf-home")))
    wall = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("True ") and "minilm" in proc.stdout.lower()
    assert not any(mark in proc.stderr for mark in RETRY_MARKS), proc.stderr[-2000:]
    assert wall < 60, wall  # loading the fallback model; the retries alone took ~30 s before


@pytest.mark.slow
def test_the_readme_main_job_runs_as_written_with_nothing_set(tmp_path):
    """The README's main job, pasted as written (on 3 questions, two answer metrics, an output directory of its
    own): the data are found beside the checkout with no variable set, and nothing waits for the hub."""
    proc, _ = run(MAIN_JOB, closed_port(), "--limit", "3", "--metrics", "em,f1", "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "reader em (%)" in proc.stdout and "sentence MRR" in proc.stdout
    assert not any(mark in proc.stderr for mark in RETRY_MARKS), proc.stderr[-2000:]
    manifest = (tmp_path / "out" / "manifest.json").read_text(encoding="utf-8")
    assert str((ROOT / ".." / "shared" / "data" / "squad" / "dev-v1.1.json.zip").resolve()) in manifest


def test_without_a_data_dir_the_shared_data_beside_the_checkout_is_found(monkeypatch, tmp_path):
    """The lookup itself (in this process): nothing set, any current directory."""
    from data import locations
    from data.squad import squad_dict

    monkeypatch.delenv("QA_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    shared = (ROOT / ".." / "shared" / "data").resolve()
    assert locations.data_dir() == shared
    assert squad_dict("dev", data_dir=None, data_file=None)[0] == shared / "squad" / "dev-v1.1.json.zip"
    assert Path(locations.shown_dir()) == shared
