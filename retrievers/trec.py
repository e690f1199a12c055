"""TREC run files: ``qid Q0 docid rank score tag`` per line (trec_eval's format)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from data.errors import UserError
from data.io import atomic_path
from retrievers.types import Ranking


def write_trec_run(path: str | Path, ranking: Ranking, query_ids: Sequence[str], doc_ids: Sequence[str], tag: str) -> None:
    """Every hit of every query (a row's ``-1`` padding ends it), ranks from 1, scores with 6 decimals."""
    tag = "".join(tag.split()) or "run"
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            for q, qid in enumerate(query_ids):  # one write per query: a depth-1000 run has millions of lines
                row = ranking.ids[q]
                pad = np.flatnonzero(row < 0)
                n = int(pad[0]) if len(pad) else len(row)
                head, tail = f"{qid} Q0 ", f" {tag}\n"
                docs = [doc_ids[c] for c in row[:n].tolist()]
                scores = ranking.scores[q, :n].astype(np.float64).tolist()
                f.write("".join([f"{head}{d} {j} {s:.6f}{tail}" for j, (d, s) in enumerate(zip(docs, scores), 1)]))


def read_run(path: str | Path, keep=None, stats: dict | None = None) -> dict[str, list[tuple[int, str, float]]]:
    """``qid -> [(rank, docid, score)]`` in rank order: a TREC run as its lines say, no corpus needed.

    ``keep(qid, docid, rank)``, when given, chooses the hits kept (every line is still checked; a document ranked
    twice is found among the kept ones): a reader of a deep run that needs its top and a few more holds only those.
    ``stats`` receives ``depth``, the deepest rank of any line."""
    out: dict[str, list[tuple[int, str, float]]] = {}
    deepest = 0
    seen: dict[tuple[str, str], int] = {}
    try:
        f = open(path, "rb")
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror or e})") from None
    with f:
        for n, raw in enumerate(f, 1):
            try:
                text = raw.decode("utf-8-sig" if n == 1 else "utf-8")  # (a byte-order mark is no part of a qid)
            except UnicodeDecodeError as e:
                raise UserError(f"{path}:{n}: not UTF-8 text (byte {e.start + 1} of the line)") from None
            if "\x00" in text:
                raise UserError(f"{path}:{n}: NUL byte in the line")
            parts = text.split()
            if not parts:
                continue
            if len(parts) != 6:
                raise UserError(f"{path}:{n}: expected 6 fields 'qid Q0 docid rank score tag'")
            try:
                hit = (int(parts[3]), parts[2], float(parts[4]))
            except ValueError:
                raise UserError(f"{path}:{n}: rank {parts[3]!r} or score {parts[4]!r} is not a number") from None
            if not np.isfinite(hit[2]):
                raise UserError(f"{path}:{n}: score {parts[4]!r} is not a finite number")
            deepest = max(deepest, hit[0])
            if keep is not None and not keep(parts[0], parts[2], hit[0]):
                continue
            if (parts[0], parts[2]) in seen:  # (trec_eval refuses these too)
                raise UserError(f"{path}:{n}: document {parts[2]!r} ranked again for query {parts[0]!r}"
                                f" (also line {seen[parts[0], parts[2]]})")
            seen[parts[0], parts[2]] = n
            out.setdefault(parts[0], []).append(hit)
    for hits in out.values():
        hits.sort(key=lambda h: h[0])
    if stats is not None:
        stats["depth"] = deepest
    return out


def read_trec_run(path: str | Path, query_ids: Sequence[str], doc_ids: Sequence[str]) -> Ranking:
    """Read a TREC run back into a Ranking over the given query/doc id lists (hits by descending score)."""
    qpos = {q: i for i, q in enumerate(query_ids)}
    dpos = {d: i for i, d in enumerate(doc_ids)}
    rows: dict[int, list[tuple[float, int]]] = {}
    for qid, hits in read_run(path).items():
        for _, did, score in hits:
            if qid not in qpos or did not in dpos:
                raise UserError(f"{path}: unknown query {qid!r} or document {did!r}")
            rows.setdefault(qpos[qid], []).append((score, dpos[did]))
    depth = max((len(v) for v in rows.values()), default=0)
    ids = np.full((len(query_ids), depth), -1, dtype=np.int64)
    scores = np.full((len(query_ids), depth), -np.inf, dtype=np.float32)
    for q, hits in rows.items():
        hits.sort(key=lambda t: -t[0])
        ids[q, : len(hits)] = [h[1] for h in hits]
        scores[q, : len(hits)] = [h[0] for h in hits]
    return Ranking(ids, scores)
