"""bench/gpu_check.sh keeps working without a GPU: its CI-sized CPU form runs every stage and prints the table."""

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_gpu_check_cpu_form_prints_its_table():
    env = {**os.environ, "QA_DATA_DIR": os.environ["QA_DATA_DIR"]}
    proc = subprocess.run(["bash", "bench/gpu_check.sh", "--device", "cpu"], cwd=ROOT, capture_output=True, text=True,
                          env=env, timeout=900)
    out = proc.stdout
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "== CUDA tests" in out and "passed" in out
    table = [line for line in out.splitlines() if line.startswith("| ")]
    stages = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in table[1:]}
    assert "passages/s" in stages["reader ours float32"]
    assert "sentences/s" in stages["encoder ours (token budget)"]
    assert "queries/s" in stages["FAISS flat CPU"]
    generative = {k: v for k, v in stages.items() if k.startswith("generative")}
    assert [k.split()[-1] for k in generative] == ["n=1", "n=2", "n=0..2"], generative
    assert all("prompts/s" in v for k, v in generative.items() if "every" not in k), generative
    assert "x the n=2 read" in generative[next(k for k in generative if "every" in k)], generative
    main_job = next(v for k, v in stages.items() if k.startswith("main job"))
    assert main_job.endswith("s wall"), main_job
    assert not any(v == "failed" for v in stages.values()), stages
    assert ("machine quiet throughout" in out) or ("NOT A RESULT" in out)
