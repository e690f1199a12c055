"""Start-up of the indexer JVM with and without the class-data sharing archive.

``python bench/jvm_start.py``   (about half a minute)

Every BM25 index build starts Anserini's IndexCollection in its own JVM
(:class:`retrievers.lucene.IndexCollectionRun`).  This bench runs exactly that
command (:func:`retrievers.java.java_command` with our helper classes on the
classpath) on a one-document collection, so the time is the JVM's start-up,
Anserini's set-up, one document and the exit, alternately with the archive of
:func:`retrievers.java.class_data_archive` and without it (``QA_JAVA_CDS=0``),
``--repeat`` times each; it prints the medians, their ratio, and how many
classes the JVM mapped from the archive (``-Xlog:class+load``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


def indexer_command(cds: bool, input_dir: Path, index_dir: Path, extra: list[str] | None = None) -> list[str]:
    from retrievers import java

    os.environ["QA_JAVA_CDS"] = "1" if cds else "0"
    cmd = java.java_command("2g")
    helper = java.helper_classes()
    if helper is not None:
        cp = cmd.index("-cp") + 1
        cmd[cp] += os.pathsep + helper
    return [cmd[0], *(extra or []), *cmd[1:], "io.anserini.index.IndexCollection", "-collection", "JsonCollection",
            "-input", str(input_dir), "-index", str(index_dir), "-generator", "DefaultLuceneDocumentGenerator",
            "-threads", "2"]


def main() -> int:
    import _machine
    from retrievers import java

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=7)
    _machine.add_guard_args(p)
    args = p.parse_args()
    archive = java.class_data_archive()  # made before the clock (once per Java runtime and Anserini jar)
    if archive is None:
        print(f"no archive: {java.jvm_info()['class_data_sharing_problem']}", file=sys.stderr)
        return 1
    guard = _machine.start(1)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "in").mkdir()
        (tmp / "in" / "doc.jsonl").write_text('{"id": "0", "contents": "one document"}\n')
        seconds: dict[bool, list[float]] = {True: [], False: []}
        for i in range(args.repeat):
            for cds in (True, False):
                cmd = indexer_command(cds, tmp / "in", tmp / f"index-{i}-{cds}")
                t0 = time.perf_counter()
                proc = subprocess.run(cmd, capture_output=True, text=True)
                seconds[cds].append(time.perf_counter() - t0)
                if proc.returncode != 0:
                    raise SystemExit(f"error: the indexer failed: {proc.stdout[-500:]}{proc.stderr[-500:]}")
        log = subprocess.run(indexer_command(True, tmp / "in", tmp / "index-log", ["-Xlog:class+load=info"]),
                             capture_output=True, text=True).stdout.splitlines()
    shared = sum("source: shared objects file" in x for x in log)
    loaded = sum("source:" in x for x in log)
    on, off = float(np.median(seconds[True])), float(np.median(seconds[False]))
    print(guard.header())
    print(f"indexer JVM on a one-document collection, medians of {args.repeat} alternating runs")
    print("| archive | seconds (median) | range |\n|---|---|---|")
    print(f"| without | {off:.3f} | {min(seconds[False]):.3f}-{max(seconds[False]):.3f} |")
    print(f"| with | {on:.3f} | {min(seconds[True]):.3f}-{max(seconds[True]):.3f} |")
    print(f"\nwith the archive: {off / on:.2f}x faster, {off - on:.2f} s saved per index build; "
          f"{shared} of {loaded} classes mapped from it")
    return _machine.finish(guard, allow_busy=args.allow_busy)


if __name__ == "__main__":
    raise SystemExit(main())
