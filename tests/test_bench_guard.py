"""bench/_machine.py: the busy-machine guard (with injected load readings), FLOP counts, the matmul ceiling."""

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def machine():
    spec = importlib.util.spec_from_file_location("bench_machine", ROOT / "bench" / "_machine.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_machine"] = mod
    spec.loader.exec_module(mod)
    return mod


def readings(*values):
    it = iter(values)
    return lambda: next(it)


def test_quiet_machine_is_a_result(machine, capsys):
    guard = machine.Guard(threads=2, cores=2, load_reader=readings(0.1, 0.9)).start()
    assert machine.finish(guard) == 0
    out = capsys.readouterr().out
    assert "machine quiet throughout" in out and "NOT A RESULT" not in out


def test_busy_before_is_refused(machine, capsys):
    guard = machine.start(2, load_reader=readings(1.6, 0.2))
    guard.cores = 2
    assert machine.finish(guard) == machine.EXIT_BUSY
    captured = capsys.readouterr()
    assert "NOT A RESULT" in captured.out and "1.60" in captured.out
    assert "warning: load average 1.60" in captured.err


def test_busy_after_counts_the_bench_own_threads(machine, capsys):
    # after the run, 2 of the load are the bench's own threads: 2.9 - 2 = 0.9 <= 1.0 (half of 2 cores)
    quiet = machine.Guard(threads=2, cores=2, load_reader=readings(0.0, 2.9)).start()
    assert machine.finish(quiet) == 0
    # 3.2 - 2 = 1.2 > 1.0: something else ran beside it
    busy = machine.Guard(threads=2, cores=2, load_reader=readings(0.0, 3.2)).start()
    assert machine.finish(busy) == machine.EXIT_BUSY
    assert "NOT A RESULT" in capsys.readouterr().out.splitlines()[-1]


def test_allow_busy_exits_zero_but_still_says_so(machine, capsys):
    guard = machine.Guard(threads=1, cores=2, load_reader=readings(5.0, 5.0)).start()
    assert machine.finish(guard, allow_busy=True) == 0
    assert "NOT A RESULT" in capsys.readouterr().out


def test_is_busy_threshold(machine):
    assert not machine.is_busy(1.0, 2)
    assert machine.is_busy(1.01, 2)
    assert not machine.is_busy(7.9, 16)
    assert machine.is_busy(3.0, 2, own=1.0)


def test_header_names_cpu_flags_threads_and_load(machine):
    import hardware

    guard = machine.Guard(threads=2, cores=2, load_reader=readings(0.25)).start()
    head = guard.header()
    assert hardware.cpu_model() in head and "2 threads" in head and "0.25" in head
    assert ("native bf16" in head) and (("no native bf16" in head) != hardware.cpu_has_native_bf16())


def test_encoder_flops_by_hand(machine):
    config = SimpleNamespace(hidden_size=384, intermediate_size=1536, num_hidden_layers=6)
    L, d, f = 100, 384, 1536
    one = 6 * (8 * L * d * d + 4 * L * d * f + 4 * L * L * d)
    assert machine.encoder_flops(config, [100]) == one
    assert machine.encoder_flops(config, [100, 100]) == 2 * one
    assert machine.encoder_flops(config, [200]) > 2 * one  # attention grows with L^2


def test_matmul_ceiling_is_measured(machine):
    gflops = machine.matmul_ceiling("float32", threads=1, n=128, seconds=0.05)
    assert 0.01 < gflops < 1e5
