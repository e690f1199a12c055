"""``python -m pipeline.export NAME --split dev --out DIR``: a built dataset in BEIR layout (see :mod:`data.export`)."""

from __future__ import annotations

import argparse
import sys

from data.export import export_beir
from data.io import staged_outputs
from data.types import limit_queries
from pipeline.cli import main_guard, make_out_dir, parse_with_config, write_manifest


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser of ``python -m pipeline.export``."""
    p = argparse.ArgumentParser(prog="python -m pipeline.export", description="Write a built dataset in BEIR layout (corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv).")
    p.add_argument("dataset")
    p.add_argument("--split", default="dev")
    p.add_argument("--out")
    p.add_argument("--data-dir", help="local data directory (default: $QA_DATA_DIR, else ../shared/data beside the "
                   "checkout, else ../shared/data from the current directory)")
    p.add_argument("--data-file")
    p.add_argument("--limit", type=int, help="export only the first N questions (the corpus stays whole)")
    p.add_argument("--language", default="auto", help="language of squad_file: and open: datasets (auto, en, th)")
    p.add_argument("--config")
    return p


@main_guard
def main(argv=None) -> int:
    args = parse_with_config(build_parser(), argv)
    from data.registry import load_dataset

    ds = limit_queries(load_dataset(args.dataset, args.split, data_dir=args.data_dir, data_file=args.data_file,
                                   language=args.language), args.limit)
    out = make_out_dir(args.out, f"export-{args.dataset}-{args.split}")
    with staged_outputs(out, last="manifest.json") as stage:  # a failed export leaves nothing half-written
        counts = export_beir(ds, stage)
        write_manifest(stage, command="pipeline.export", config=vars(args), seed=None, sources=ds.sources, timings={},
                       extra={"counts": counts})
    print(f"wrote {counts['corpus']} documents, {counts['queries']} queries, {counts['qrels']} qrels to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
