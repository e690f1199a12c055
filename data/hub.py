"""Whether the Hugging Face hub can be reached: decided once per process, never retried.

Offline when the user says so -- ``HF_HUB_OFFLINE``, ``HF_DATASETS_OFFLINE`` or
``TRANSFORMERS_OFFLINE`` set to a true value -- or when one quick probe fails: an
HTTP ``HEAD`` of the hub's address (``$HF_ENDPOINT``, default
``https://huggingface.co``; proxies from the environment apply, certificates are
checked) that gets no success or redirect within :data:`PROBE_TIMEOUT` second
(``$QA_HUB_PROBE_TIMEOUT`` for a slow link).  A name that does not resolve or a
refused connection fails at once; a proxy's refusal or a certificate that is not
the hub's counts as unreachable too.

The probe runs the first time something asks (:func:`offline`), that is, only
in a command that is about to use the hub: a dataset not found locally, a hub
model name (reader, encoder, BERT-F1's default).  When it fails, the process
switches the hub libraries to offline mode -- the three variables (for what is
imported later and for child processes) and the flags huggingface_hub and
datasets read, where they are already imported -- so they look only in their
local caches: a name that is not cached fails at once, without the hub client's
retries, and the caller goes on to its local source, its documented fallback,
or one error line naming what to give instead.
"""

from __future__ import annotations

import os
import sys

PROBE_TIMEOUT = 1.0  # seconds, name lookup, connection, TLS and the answer included
OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
DEFAULT_ENDPOINT = "https://huggingface.co"

_decided: tuple[bool, str] | None = None  # (offline, why) once known


def _true(value: str | None) -> bool:
    return (value or "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def switched_off() -> str | None:
    """The variable that switches hub access off, when the user set one to a true value."""
    for name in OFFLINE_VARIABLES:
        if _true(os.environ.get(name)):
            return name
    return None


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def probe(timeout: float | None = None) -> str | None:
    """None when the hub answers an HTTP ``HEAD`` of its address with a success or a redirect within ``timeout``
    seconds (default :func:`probe_timeout`), name lookup, connection and TLS included; else why not (a short phrase)."""
    import threading

    url = endpoint()
    timeout = probe_timeout() if timeout is None else timeout
    outcome: list[str | None] = []
    # in a thread: a name lookup that hangs does not heed the request's timeout
    worker = threading.Thread(target=lambda: outcome.append(_head(url, timeout)), name="hub-probe", daemon=True)
    worker.start()
    worker.join(timeout)
    problem = outcome[0] if outcome else f"no answer within {timeout:g} s"
    return None if problem is None else f"{url} cannot be reached: {problem}"


def probe_timeout() -> float:
    """:data:`PROBE_TIMEOUT`, or ``$QA_HUB_PROBE_TIMEOUT`` seconds (a slow link to the hub)."""
    try:
        value = float(os.environ.get("QA_HUB_PROBE_TIMEOUT") or PROBE_TIMEOUT)
    except ValueError:
        return PROBE_TIMEOUT
    return value if value > 0 else PROBE_TIMEOUT


def _head(url: str, timeout: float) -> str | None:
    """One ``HEAD`` of ``url`` (proxies from the environment apply; certificates checked against certifi's bundle, or
    ``$SSL_CERT_FILE`` / ``$REQUESTS_CA_BUNDLE``): None on a 2xx/3xx answer, else what went wrong."""
    import socket
    import ssl
    import urllib.error
    import urllib.request

    try:
        cafile = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("SSL_CERT_FILE")
        if not cafile:
            try:
                import certifi

                cafile = certifi.where()
            except ImportError:
                cafile = None
        context = ssl.create_default_context(cafile=cafile)
        opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context))
        with opener.open(urllib.request.Request(url, method="HEAD"), timeout=timeout):
            return None
    except urllib.error.HTTPError as e:  # an answer, but not the hub's (a proxy that refuses, a wrong endpoint)
        return f"it answered HTTP {e.code}"
    except urllib.error.URLError as e:
        reason = e.reason
    except (OSError, ValueError, ssl.SSLError) as e:  # timeouts, resets, a malformed HF_ENDPOINT
        reason = e
    if isinstance(reason, socket.gaierror):
        return "its name does not resolve"
    if isinstance(reason, (socket.timeout, TimeoutError)):
        return f"no answer within {timeout:g} s"
    if isinstance(reason, ssl.SSLError):
        return f"TLS failed ({getattr(reason, 'reason', None) or type(reason).__name__})"
    return str(getattr(reason, "strerror", None) or reason or type(reason).__name__)


def offline() -> bool:
    """True when the hub is not to be used (see the module doc); decided on the first call, then remembered."""
    global _decided
    if _decided is None:
        off = switched_off()
        if off:
            _decided = (True, f"hub access is switched off ({off})")
        else:
            problem = probe()
            _decided = (problem is not None, problem or "")
        if _decided[0]:
            go_offline()
    return _decided[0]


def why_offline() -> str:
    """Why the hub is not used, as a message's tail (``''`` when it is)."""
    offline()
    return _decided[1] if _decided else ""


def go_offline() -> None:
    """Switch huggingface_hub, datasets and transformers to their local caches for the rest of this process (and
    its children): no request, hence no retry, is made any more."""
    for name in OFFLINE_VARIABLES:
        os.environ[name] = "1"
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        constants.HF_HUB_OFFLINE = True
    config = sys.modules.get("datasets.config")
    if config is not None:
        config.HF_HUB_OFFLINE = True
        config.HF_DATASETS_OFFLINE = True


def forget() -> None:
    """Decide again on the next :func:`offline` (tests; a process whose network changed)."""
    global _decided
    _decided = None


def assume(reachable: bool, why: str = "assumed") -> None:
    """Take the decision as given, without a probe (tests that stand in for the hub)."""
    global _decided
    _decided = (not reachable, "" if reachable else why)
    if not reachable:
        go_offline()


# ------------------------------------------------------------------ models named by hub name
def cache_dir() -> str:
    """huggingface_hub's local cache of hub files (``$HF_HUB_CACHE``, default ``~/.cache/huggingface/hub``)."""
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)


def cached_locally(repo_id: str, filename: str = "config.json") -> bool:
    """Whether ``filename`` of model ``repo_id`` is in the local HF cache (what offline loading can use)."""
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(repo_id, filename)
    except Exception:  # a name the hub client refuses is not in its cache either
        return False
    return isinstance(found, str)


def shown_path(path) -> str:
    """``path`` for a message: relative to the current directory when that is how a user would type it
    (``../shared/models/minilm-squad-reader``), else absolute."""
    from pathlib import Path

    path = Path(path)
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive
        return str(path)
    return rel if len(rel) < len(str(path)) else str(path)
