"""Faults at corpus scale: a killed BM25 index build and a full disk during the corpus store build.

``python -m bench.scale_faults --size dpr --kills 3``

Runs on the DPR-format TSV and the ``qa.csv`` that ``python -m bench.scale`` wrote
(``$QA_CACHE_DIR/scale``), with the user's own command, ``python -m pipeline.run
--dataset open:TSV+QA --retriever bm25`` (retrieval only, the first
``--questions`` questions at ``--depth``), each run in a fresh process:

1. **Disk full during the store build.**  The run's cache is an empty
   ``--tmpfs`` file system (default 1 GiB; the 21M store needs about 13 GiB),
   mounted in a private mount namespace (``unshare -m``; root only).  Expected:
   exit status 2, one ``error:`` line naming the file and "No space left on
   device", and nothing left in the cache but the store's lock file.
2. **Killed index builds.**  The same command on a real cache directory: the
   first run builds the corpus store (the "next run with space" of step 1), then
   the index; each of ``--kills`` runs is killed with SIGKILL (the Python
   process only, as ``kill -9 PID`` would) at a random point of the index build
   (uniform over ``--build-seconds``, default: the index time that
   ``bench.scale`` measured at this size).  After each kill: no index under its
   final name (only a hidden temporary directory, which the next build removes),
   no process of the build (the indexer JVM dies with its parent), and no file
   in the run's output directory (which the run creates, empty, when it starts).
3. **The run after the kills** builds the index to the end and writes its
   ``run.trec``; the same command on the cache of ``bench.scale``'s own run
   (whose index was never interrupted) writes the reference.  They must be
   byte-identical.

It prints a table and writes ``--out`` (.md and .json).  Seconds are wall
seconds of whole commands; nothing here is a speed result.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.scale import parse_size  # noqa: E402


def command(tsv: Path, qa: Path, args, out: Path) -> list[str]:
    return [sys.executable, "-m", "pipeline.run", "--dataset", f"open:{tsv}+{qa}", "--retriever", "bm25",
            "--limit", str(args.questions), "--depth", str(args.depth), "--threads", str(args.threads), "--out", str(out)]


def environment(cache: Path) -> dict:
    return dict(os.environ, QA_CACHE_DIR=str(cache), HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
                QA_PROGRESS="0", TQDM_DISABLE="1")


def processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line mentions ``text`` (a build's leftovers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmd:
            found.append(int(entry.name))
    return found


def listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []


def disk_full(tsv: Path, qa: Path, args, work: Path) -> dict:
    """Step 1: the store build on a tmpfs too small for it."""
    cache = work / "tmpfs-cache"
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)
    if os.geteuid() != 0 or shutil.which("unshare") is None or \
            subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        return {"skipped": "needs root and unshare -m (a private mount namespace)"}
    show = ("import json,os,sys; r=sys.argv[1]; "
            "print('LEFT', json.dumps(sorted(os.path.relpath(os.path.join(d, f), r) for d, _, fs in os.walk(r) for f in fs)))")
    script = (f'mount -t tmpfs -o size={args.tmpfs} tmpfs "$0" && "$@"; rc=$?; '
              f'{sys.executable} -c "{show}" "$0"; exit $rc')
    t0 = time.perf_counter()
    proc = subprocess.run(["unshare", "-m", "sh", "-c", script, str(cache), *command(tsv, qa, args, work / "tmpfs-out")],
                          cwd=ROOT, env=environment(cache), capture_output=True, text=True)
    left = next((json.loads(line[5:]) for line in proc.stdout.splitlines() if line.startswith("LEFT ")), None)
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    result = {"seconds": round(time.perf_counter() - t0, 1), "exit": proc.returncode, "stderr_lines": errors[-5:],
              "stderr_line_count": len(errors), "left_in_cache": left, "out_files": listing(work / "tmpfs-out")}
    # nothing of the store but its lock file (the digest of the TSV, remembered under sha256/, may stay)
    lock_only = left is not None and all(name.endswith(".lock") for name in left if name.startswith("corpus_store"))
    result["ok"] = (proc.returncode == 2 and len(errors) == 1 and "No space left on device" in errors[0]
                    and lock_only and not result["out_files"])
    return result


def killed_builds(tsv: Path, qa: Path, args, work: Path, build_seconds: float) -> list[dict]:
    """Step 2: ``--kills`` runs killed (SIGKILL) at random points of their index build."""
    cache = work / "cache"
    rng = random.Random(args.seed)
    attempts = []
    for i in range(args.kills):
        out = work / f"killed-{i}"
        shutil.rmtree(out, ignore_errors=True)
        left = set((cache / "bm25").glob(".*.build.*"))  # what the previous kill left (this run removes it)
        proc = subprocess.Popen(command(tsv, qa, args, out), cwd=ROOT, env=environment(cache),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        t0 = time.perf_counter()
        while not [p for p in (cache / "bm25").glob(".*.build.*") if p not in left and (p / "input").exists()]:
            if proc.poll() is not None:
                raise SystemExit(f"error: run {i} ended before its index build began:\n{proc.stderr.read()[-3000:]}")
            time.sleep(0.2)
        began = time.perf_counter() - t0
        delay = rng.uniform(0.05, 0.95) * build_seconds
        deadline = time.perf_counter() + delay
        while time.perf_counter() < deadline and proc.poll() is None:
            time.sleep(0.2)
        if proc.poll() is not None:
            raise SystemExit(f"error: run {i} finished before its kill at {delay:.0f} s into the build; "
                             f"give a larger --build-seconds (exit {proc.returncode})")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        time.sleep(2.0)  # the indexer JVM notices its parent died
        orphans = processes_mentioning(str(cache))
        for pid in orphans:  # recorded, then removed so that they do not disturb the next attempt
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        final = [p.name for p in (cache / "bm25").iterdir() if p.is_dir() and not p.name.startswith(".")]
        temporary = [p for p in (cache / "bm25").iterdir() if p.is_dir() and p.name.startswith(".")]
        attempts.append({"attempt": i + 1, "build_began_s": round(began, 1), "killed_after_s": round(delay, 1),
                         "index_under_final_name": final, "temporary_dirs": len(temporary),
                         "temporary_bytes": sum(f.stat().st_size for t in temporary for f in t.rglob("*") if f.is_file()),
                         "orphans": orphans, "out_files": listing(out)})
        print(f"kill {i + 1}: {json.dumps(attempts[-1])}", file=sys.stderr)
    return attempts


def finished_run(tsv: Path, qa: Path, args, cache: Path, out: Path) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    proc = subprocess.run(command(tsv, qa, args, out), cwd=ROOT, env=environment(cache), capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"error: the run on {cache} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return {"seconds": round(time.perf_counter() - t0, 1), "leftovers": [p.name for p in (cache / "bm25").iterdir()
                                                                          if p.name.startswith(".") and p.is_dir()]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.scale_faults", description=__doc__.splitlines()[0])
    p.add_argument("--size", default="dpr", help="corpus size of a TSV that bench.scale wrote (10k, 1M, dpr)")
    p.add_argument("--questions", type=int, default=500, help="questions of each run (the first of bench.scale's qa.csv)")
    p.add_argument("--depth", type=int, default=1000)
    p.add_argument("--kills", type=int, default=3)
    p.add_argument("--seed", type=int, default=35)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    p.add_argument("--tmpfs", default="1g", help="size of the file system the disk-full run gets")
    p.add_argument("--build-seconds", type=float, help="index build time the kill points are drawn over "
                   "(default: bench.scale's measured index time at this size)")
    p.add_argument("--cache", help="bench.scale's cache (default: $QA_CACHE_DIR/scale)")
    p.add_argument("--scale-results", default=str(ROOT / "bench" / "results" / "scale_dpr.json"))
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "scale_faults"), help="output stem (.md and .json)")
    args = p.parse_args(argv)
    from data.io import cache_dir, write_json, write_text

    n = parse_size(args.size)
    root = Path(args.cache) if args.cache else cache_dir("scale")
    tsv = root / f"psgs_squad_{n}.tsv"
    qas = sorted(root.glob("squad-dev-*.qa.csv"), key=lambda q: -q.stat().st_size)
    reference_cache = root / f"run-{n}"
    if not tsv.is_file() or not qas or not (reference_cache / "bm25").is_dir():
        raise SystemExit(f"error: {root}: no TSV, qa.csv or finished bench.scale run of {n:,} passages; "
                         f"run python -m bench.scale --sizes {args.size} first")
    qa = qas[0]
    build_seconds = args.build_seconds
    if build_seconds is None:
        saved = json.loads(Path(args.scale_results).read_text(encoding="utf-8"))["runs"][str(n)]
        build_seconds = float(saved["index"]["index_s"])
    work = root / f"faults-{n}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    results = {"size": n, "questions": args.questions, "depth": args.depth, "build_seconds": build_seconds}
    results["disk_full"] = disk_full(tsv, qa, args, work)
    print(f"disk full: {json.dumps(results['disk_full'])}", file=sys.stderr)
    results["kills"] = killed_builds(tsv, qa, args, work, build_seconds)
    results["after_kills"] = finished_run(tsv, qa, args, work / "cache", work / "after-kills")
    results["reference"] = finished_run(tsv, qa, args, reference_cache, work / "reference")
    same = (work / "after-kills" / "run.trec").read_bytes() == (work / "reference" / "run.trec").read_bytes()
    results["identical_run"] = same
    ok = results["disk_full"].get("ok", True) and same and all(
        not k["index_under_final_name"] and not k["orphans"] and not k["out_files"] for k in results["kills"])
    results["ok"] = ok
    lines = [f"Faults at {n:,} passages (`python -m bench.scale_faults --size {args.size} --kills {args.kills}`): "
             f"`pipeline.run --retriever bm25`, {args.questions} questions at depth {args.depth}", ""]
    d = results["disk_full"]
    if "skipped" in d:
        lines.append(f"Disk full during the store build: skipped ({d['skipped']}).")
    else:
        lines.append(f"Disk full during the store build ({args.tmpfs} tmpfs): exit {d['exit']}, {d['stderr_line_count']} "
                     f"stderr line(s): `{d['stderr_lines'][-1] if d['stderr_lines'] else ''}`; left in the cache: "
                     f"{d['left_in_cache']}; files in the output directory: {len(d['out_files'])} -> {'ok' if d['ok'] else 'FAILED'}")
    lines += ["", f"Index build killed (SIGKILL to the Python process) at random points of a {build_seconds:.0f}-s build:", "",
              "| kill | build began after s | killed after s | index under its final name | temporary dirs (MiB) | "
              "orphan processes | files in the output directory |", "|---|---|---|---|---|---|---|"]
    for k in results["kills"]:
        lines.append(f"| {k['attempt']} | {k['build_began_s']:.0f} | {k['killed_after_s']:.0f} | "
                     f"{', '.join(k['index_under_final_name']) or 'none'} | {k['temporary_dirs']} ({k['temporary_bytes'] / 2**20:,.0f}) | "
                     f"{len(k['orphans'])} | {len(k['out_files'])} |")
    lines += ["", f"The run after the kills: {results['after_kills']['seconds']:.0f} s (store already built; index rebuilt; "
              f"temporary directories left: {len(results['after_kills']['leftovers'])}); its run.trec "
              f"{'is byte-identical to' if same else 'DIFFERS from'} the run on bench.scale's uninterrupted index "
              f"({results['reference']['seconds']:.0f} s).", "", "Result: " + ("all faults handled" if ok else "FAILED")]
    text = "\n".join(lines) + "\n"
    write_json(Path(args.out).with_suffix(".json"), results)
    write_text(Path(args.out).with_suffix(".md"), text)
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
