"""TREC run files: ``qid Q0 docid rank score tag`` per line (trec_eval's format)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from data.errors import UserError
from data.io import atomic_path
from retrievers.types import Ranking


def write_trec_run(path: str | Path, ranking: Ranking, query_ids: Sequence[str], doc_ids: Sequence[str], tag: str) -> None:
    tag = "".join(tag.split()) or "run"
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            for q, qid in enumerate(query_ids):
                for j, (cid, s) in enumerate(zip(ranking.ids[q], ranking.scores[q])):
                    if cid < 0:
                        break
                    f.write(f"{qid} Q0 {doc_ids[cid]} {j + 1} {float(s):.6f} {tag}\n")


def read_run(path: str | Path) -> dict[str, list[tuple[int, str, float]]]:
    """``qid -> [(rank, docid, score)]`` in rank order: a TREC run as its lines say, no corpus needed."""
    out: dict[str, list[tuple[int, str, float]]] = {}
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
            if (parts[0], parts[2]) in seen:  # (trec_eval refuses these too)
                raise UserError(f"{path}:{n}: document {parts[2]!r} ranked again for query {parts[0]!r}"
                                f" (also line {seen[parts[0], parts[2]]})")
            seen[parts[0], parts[2]] = n
            out.setdefault(parts[0], []).append(hit)
    for hits in out.values():
        hits.sort(key=lambda h: h[0])
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
