"""Small file utilities shared by every stage: atomic writes, checksums, cache dir."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import queue
import struct
import tempfile
import threading
import zlib
from pathlib import Path
from typing import Any, Iterable, Iterator, TypeVar

from data.errors import UserError


def cache_dir(*parts: str) -> Path:
    """The project cache (``QA_CACHE_DIR`` or ``~/.cache/qa-retrieval-eval``)."""
    root = Path(os.environ.get("QA_CACHE_DIR") or Path.home() / ".cache" / "qa-retrieval-eval")
    path = root.joinpath(*parts)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"{path}: cannot create cache directory ({e.strerror or e}); set QA_CACHE_DIR") from None
    return path


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


T = TypeVar("T")


def read_ahead(items: Iterable[T], depth: int = 2) -> Iterator[T]:
    """``items``, produced by a background thread up to ``depth`` ahead of the consumer.

    For a producer and a consumer that spend their time in code that releases the GIL
    (Arrow's parsers and compute kernels, file writes): on 2 cores the corpus store's
    JSON parsing then overlaps the writing of the previous batches (bench/json_store.py).
    An exception of the producer is raised in the consumer at the item where it
    happened; a consumer that stops early stops the producer (and closes it, when it
    is a generator) at its next item.  Not for cheap items: each costs a queue hand-off.
    """
    handoff: queue.Queue = queue.Queue(max(1, depth))
    stop = threading.Event()
    done = object()

    def put(x) -> bool:
        while not stop.is_set():
            try:
                handoff.put(x, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        source = iter(items)
        try:
            for x in source:
                if not put((x, None)):
                    return
            put((done, None))
        except BaseException as e:  # handed to the consumer, raised there
            put((None, e))
        finally:
            close = getattr(source, "close", None)
            if stop.is_set() and close is not None:
                close()

    worker = threading.Thread(target=produce, name="read-ahead", daemon=True)
    worker.start()
    try:
        while True:
            x, error = handoff.get()
            if error is not None:
                raise error
            if x is done:
                return
            yield x
    finally:
        stop.set()
        worker.join()


def sha256_text(*parts: Any) -> str:
    """Content hash of a sequence of strings/values (used for cache keys)."""
    h = hashlib.sha256()
    for p in parts:
        if isinstance(p, (list, tuple)):
            for x in p:
                b = str(x).encode("utf-8")
                h.update(len(b).to_bytes(8, "little"))
                h.update(b)
        else:
            b = str(p).encode("utf-8")
            h.update(len(b).to_bytes(8, "little"))
            h.update(b)
    return h.hexdigest()


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp path beside ``path``; on success it is renamed onto ``path``.

    A crash or an exception leaves ``path`` untouched (no half-written output).
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
    except OSError as e:
        raise UserError(f"{path.parent}: cannot write output ({e.strerror or e})") from None
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, 0o666 & ~_umask())  # mkstemp makes 0600; outputs get the usual mode
        os.replace(tmp_path, path)
    except OSError as e:
        tmp_path.unlink(missing_ok=True)
        raise UserError(f"{path}: write failed ({e.strerror or e})") from None
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, default=_json_default) + "\n")


def write_jsonl(path: str | os.PathLike, rows) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False, default=_json_default) + "\n")


def _json_default(o: Any):
    import numpy as np

    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


# ------------------------------------------------------------ checksummed cache files
class Damaged(Exception):
    """A cache file whose bytes are not those its writer recorded (the message says how, in a few words)."""


CHECKED_MAGIC = b"QACRC32\n"
_CHECKED_HEADER = struct.Struct("<8sQI")  # magic, payload bytes, CRC-32 of the payload


class _Crc32Writer:
    """A binary file's ``write`` that also counts the bytes and their CRC-32."""

    def __init__(self, f):
        self._f = f
        self.crc = 0
        self.size = 0

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        self.crc = zlib.crc32(view, self.crc)
        self.size += view.nbytes
        return self._f.write(view)


@contextlib.contextmanager
def checked_writer(path: str | os.PathLike) -> Iterator[Any]:
    """A binary file object (``write`` only) whose bytes become ``path``, atomically, behind a header recording
    their size and CRC-32; :func:`open_checked` reads them back only when both still match."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(_CHECKED_HEADER.pack(CHECKED_MAGIC, 0, 0))
            writer = _Crc32Writer(f)
            yield writer
            f.seek(0)
            f.write(_CHECKED_HEADER.pack(CHECKED_MAGIC, writer.size, writer.crc))


def open_checked(path: str | os.PathLike):
    """``path`` (written by :func:`checked_writer`) open at its first payload byte, once its size and CRC-32 were
    found to be those recorded; :class:`Damaged` (saying what differs) otherwise.  The caller closes the file."""
    f = open(path, "rb")
    try:
        head = f.read(_CHECKED_HEADER.size)
        if len(head) < _CHECKED_HEADER.size or not head.startswith(CHECKED_MAGIC):
            raise Damaged(f"no checksum header in its first {_CHECKED_HEADER.size} bytes")
        _, size, crc = _CHECKED_HEADER.unpack(head)
        actual, seen = 0, 0
        while block := f.read(1 << 20):
            actual = zlib.crc32(block, actual)
            seen += len(block)
        if seen != size:
            raise Damaged(f"{seen + len(head)} bytes, its build wrote {size + len(head)}")
        if actual != crc:
            raise Damaged(f"CRC-32 {actual:08x}, its build recorded {crc:08x}")
        f.seek(len(head))
        return f
    except BaseException:
        f.close()
        raise


# ------------------------------------------------------------ crash safety
def warn(message: str) -> None:
    """One ``warning: ...`` line on stderr (for things a run recovers from)."""
    import sys

    print("warning: " + " ".join(str(message).split()), file=sys.stderr, flush=True)


def file_lock(path: str | os.PathLike, timeout: float = -1):
    """An inter-process lock on ``path`` (``filelock``; released when the holder dies)."""
    from filelock import FileLock

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return FileLock(str(path), timeout=timeout)


class ShardStore:
    """A directory of finished array shards that survives crashes.

    Each shard is one ``.npy`` file written atomically under the name
    ``<name>.<sha256 of its bytes, 16 hex>.npy``: a file that is there is
    complete, and one whose bytes no longer match its name (a bad disk, a
    hand edit) is removed with a warning and rebuilt, never served.
    :meth:`lock` serializes writers that share the directory.
    """

    SUFFIX = ".npy"

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)

    def lock(self):
        return file_lock(self.directory / ".lock")

    def _parse(self, path: Path) -> tuple[str, str] | None:
        stem = path.name[: -len(self.SUFFIX)]
        name, _, digest = stem.rpartition(".")
        if not name or len(digest) != 16:
            return None
        return name, digest

    def finished(self) -> dict[str, Path]:
        """``name -> path`` of every shard whose bytes match its checksum (bad ones are removed)."""
        out: dict[str, Path] = {}
        if not self.directory.is_dir():
            return out
        for tmp in self.directory.glob(".*.tmp"):  # left by a killed writer (call under lock())
            tmp.unlink(missing_ok=True)
        for path in sorted(self.directory.glob("*" + self.SUFFIX)):
            parsed = self._parse(path)
            if parsed is None:
                continue
            name, digest = parsed
            try:
                ok = sha256_file(path)[:16] == digest
            except OSError:
                ok = False
            if not ok:
                warn(f"{path}: cache shard is damaged (its bytes do not match the checksum in its name); removed and rebuilt")
                path.unlink(missing_ok=True)
                continue
            out[name] = path
        return out

    def save(self, name: str, array) -> Path:
        """Write ``array`` as shard ``name`` (atomic rename; replaces an older shard of that name)."""
        import io as _io

        import numpy as np

        buf = _io.BytesIO()
        np.save(buf, np.ascontiguousarray(array), allow_pickle=False)
        data = buf.getvalue()
        digest = hashlib.sha256(data).hexdigest()[:16]
        path = self.directory / f"{name}.{digest}{self.SUFFIX}"
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        for old in self.directory.glob(f"{name}.*{self.SUFFIX}"):
            if old != path and self._parse(old) and self._parse(old)[0] == name:
                old.unlink(missing_ok=True)
        return path

    @staticmethod
    def load(path: str | os.PathLike):
        import numpy as np

        return np.load(path, allow_pickle=False)


@contextlib.contextmanager
def staged_outputs(out_dir: str | os.PathLike, last: str = "metrics.json", outputs: Iterable[str] = ()) -> Iterator[Path]:
    """Write a run's final files into a staging directory, then move them all into ``out_dir``.

    Nothing reaches ``out_dir`` unless every file was written (a full disk, an
    error or a crash leaves the previous contents as they were); ``last`` is
    moved last, so its presence marks a complete set.  ``outputs``: every name
    the command may write; those an earlier run left in ``out_dir`` and this one
    did not write (a reader's files after a retrieval-only rerun) are removed,
    with a ``note:``, before ``last`` is moved, so the set is always one run's.
    """
    import shutil

    out_dir = Path(out_dir)
    for stale in out_dir.glob(".staging-*"):  # left by a run that was killed
        shutil.rmtree(stale, ignore_errors=True)
    try:
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=out_dir))
    except OSError as e:
        raise UserError(f"{out_dir}: cannot write output ({e.strerror or e})") from None
    try:
        try:
            yield staging
        except UserError as e:  # a failed write names the file it was writing, not the staging directory
            raise UserError(str(e).replace(str(staging), str(out_dir))) from None
        names = sorted(p.name for p in staging.iterdir())
        names.sort(key=lambda n: n == last)
        stale = [n for n in sorted(set(outputs) - set(names)) if (out_dir / n).exists()]
        for name in names:
            src, dst = staging / name, out_dir / name
            if name == last:
                _remove_stale(out_dir, stale)
                stale = []
            try:
                if src.is_dir():
                    if dst.is_dir():
                        shutil.rmtree(dst)
                    os.replace(src, dst)
                else:
                    os.replace(src, dst)
            except OSError as e:
                raise UserError(f"{dst}: write failed ({e.strerror or e})") from None
        _remove_stale(out_dir, stale)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _remove_stale(out_dir: Path, names: list[str]) -> None:
    import shutil
    import sys

    for name in names:
        path = out_dir / name
        try:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        except FileNotFoundError:
            continue
        except OSError as e:
            raise UserError(f"{path}: left by an earlier run, cannot be removed ({e.strerror or e})") from None
    if names:
        print(f"note: {out_dir}: removed {', '.join(names)} of an earlier run (this run does not write them)", file=sys.stderr)


def remembered_sha256_file(path: Path) -> str:
    """sha256 of a file, remembered in the cache by (real path, size, mtime) so a big file is hashed once."""
    st = path.stat()
    memo = cache_dir("sha256") / (sha256_text(str(path.resolve()), st.st_size, st.st_mtime_ns)[:32] + ".txt")
    if memo.is_file():
        digest = memo.read_text().strip()
        if len(digest) == 64:
            return digest
    digest = sha256_file(path)
    try:
        write_text(memo, digest + "\n")
    except UserError:
        pass
    return digest


def os_reason(e: OSError) -> str:
    """An OSError's reason without its file name (``No space left on device``; Arrow's errors carry the errno in
    their text, so without an errno the text itself)."""
    return os.strerror(e.errno) if e.errno else " ".join(str(e).split())


@contextlib.contextmanager
def entry_lock(path: str | os.PathLike, what: str):
    """The build lock of one cache entry ``path`` (``<name>.lock`` beside it, :func:`file_lock`); an unwritable
    cache is one ``UserError`` line naming the ``what`` cache."""
    from data.errors import UserError

    path = Path(path)
    try:
        lock = file_lock(path.parent / f"{path.name}.lock")
        lock.acquire()
    except OSError as e:
        raise UserError(f"{path.parent}: the {what} cache is not writable ({os_reason(e)}); "
                        "make it writable or set QA_CACHE_DIR to a writable directory") from None
    try:
        yield
    finally:
        lock.release()


def discard_directory(path: Path, what: str) -> None:
    """Remove a damaged cache entry ``path`` (a directory): renamed aside first, onto an empty hidden directory
    beside it, so nothing is ever found half-removed at ``path``; then deleted.  ``what`` names it in the one-line
    error when it cannot be moved (``cannot remove the damaged <what>``)."""
    import shutil

    from data.errors import UserError

    path = Path(path)
    if not path.exists():
        return
    aside = None
    try:
        aside = Path(tempfile.mkdtemp(prefix=f".{path.name}.damaged.", suffix=".tmp", dir=path.parent))
        os.replace(path, aside)  # onto the empty directory just made
    except FileNotFoundError:  # another process removed it meanwhile
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)
        return
    except OSError as e:
        raise UserError(f"{path}: cannot remove the damaged {what} ({os_reason(e)}); delete it and rerun") from None
    shutil.rmtree(aside, ignore_errors=True)


def load_config_text(text: str, path: str | os.PathLike) -> Any:
    """The value of a YAML, TOML or JSON config file's ``text`` (by the suffix of ``path``).

    A key given twice in one mapping is a UserError naming the file, the line and the key: PyYAML and ``json``
    would keep the last one without a word, ``tomllib`` refuses it without naming the key.  Other syntax errors
    are raised as the parsers raise them.
    """
    import re

    suffix = Path(path).suffix.lower()
    if suffix == ".toml":
        import tomllib

        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            at = re.search(r"\(at line (\d+), column \d+\)", str(e))
            if at and str(e).startswith(("Cannot overwrite a value", "Cannot declare")):
                line = int(at.group(1))
                source = (text.splitlines() or [""])[min(line, len(text.splitlines())) - 1].strip()
                key = source.strip("[] ").split("=")[0].strip() or source
                raise UserError(f"{path}: line {line}: key {key!r} appears twice (one value per key)") from None
            raise
    if suffix == ".json":
        def unique(pairs):
            seen = {}
            for k, v in pairs:
                if k in seen:
                    raise UserError(f"{path}: key {k!r} appears twice in one object (one value per key)")
                seen[k] = v
            return seen

        return json.loads(text, object_pairs_hook=unique)
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            if isinstance(node, yaml.MappingNode):
                seen: dict = {}
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":  # (<<: merged keys may be overridden)
                        continue
                    key = self.construct_object(key_node, deep=True)
                    try:
                        first = seen.get(key)
                    except TypeError:  # an unhashable key: the constructor names it
                        continue
                    if first is not None:
                        raise UserError(f"{path}: line {key_node.start_mark.line + 1}: key {key!r} appears twice "
                                        f"(first on line {first}; one value per key)")
                    seen[key] = key_node.start_mark.line + 1
            return super().construct_mapping(node, deep)

    return yaml.load(text, Loader=UniqueKeyLoader)
