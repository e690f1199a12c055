"""Progress bars for every long loop: tqdm on a terminal, a line every 30 s in a log.

tqdm redraws its bar with a carriage return on every update; written to a
file (a log, a CI job, ``2> run.log``) that is one endless line.  When the
bar's stream is not a terminal, :class:`tqdm` here

* refreshes at most every :data:`LOG_INTERVAL_S` seconds (tqdm's
  ``mininterval``, as pip, Hugging Face and Lightning do for non-TTY output),
* writes each refresh as its own line (``\\n`` instead of ``\\r``), and
* leaves blank clears out.

Hugging Face's own bars (loading weights, downloads) are silenced the same
way when this module is imported with stderr not a terminal.  On a terminal
it is plain tqdm.  ``QA_PROGRESS=0`` turns every bar off and
``QA_PROGRESS=1`` forces terminal behaviour.  It is a drop-in replacement:
``from data.progress import tqdm`` (``tqdm.write`` and ``disable=`` work as
before).
"""

from __future__ import annotations

import os
import sys

from tqdm.auto import tqdm as _tqdm

LOG_INTERVAL_S = 30.0


def is_terminal(stream) -> bool:
    """Whether ``stream`` is an interactive terminal (``QA_PROGRESS=1`` says yes)."""
    if os.environ.get("QA_PROGRESS") == "1":
        return True
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class _LineStream:
    """A file for tqdm that turns each ``\\r``-redraw into one line and drops blank clears."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        line = text.replace("\r", "").rstrip()
        if line:
            self.stream.write(line + "\n")
        return len(text)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except (AttributeError, ValueError, OSError):
            pass

    def isatty(self) -> bool:
        return False


class tqdm(_tqdm):  # noqa: N801 - a drop-in for tqdm.tqdm
    """tqdm that prints at most a line every :data:`LOG_INTERVAL_S` s when its stream is not a terminal."""

    def __init__(self, *args, **kwargs):
        if os.environ.get("QA_PROGRESS") == "0":
            kwargs["disable"] = True
        stream = kwargs.get("file") or sys.stderr
        self._log_mode = not is_terminal(stream)
        self._last_log = float("-inf")
        if self._log_mode and not isinstance(stream, _LineStream):
            kwargs["file"] = _LineStream(stream)
            kwargs["mininterval"] = max(float(kwargs.get("mininterval") or 0.0), LOG_INTERVAL_S)
            kwargs["maxinterval"] = max(float(kwargs.get("maxinterval") or 0.0), LOG_INTERVAL_S)
            kwargs.setdefault("ascii", True)
            kwargs.setdefault("ncols", 100)
        super().__init__(*args, **kwargs)

    def refresh(self, nolock=False, lock_args=None):
        """In a log, explicit refreshes (``bar.refresh()``, ``set_postfix``) also wait out the interval."""
        if getattr(self, "_log_mode", False) and not self.disable:
            now = self._time()
            if now - self._last_log < self.mininterval:
                return None
            self._last_log = now
        return super().refresh(nolock=nolock, lock_args=lock_args)


def quiet_library_bars() -> None:
    """When stderr is not a terminal, also silence Hugging Face's own ``\r`` bars (weights, downloads)."""
    if is_terminal(sys.stderr):
        return
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # read by huggingface_hub and transformers at import
    if "transformers" in sys.modules:
        try:
            sys.modules["transformers"].utils.logging.disable_progress_bar()
        except AttributeError:
            pass


quiet_library_bars()


def progress(iterable=None, **kwargs) -> tqdm:
    """``tqdm(iterable, **kwargs)`` with the log-friendly behaviour above."""
    return tqdm(iterable, **kwargs)
