"""Write an ``open:`` corpus of SQuAD v1.1 sentences and a question file, for speed runs at a chosen size.

The passages are the sentences of SQuAD train, then dev (``$QA_DATA_DIR/squad``; sentences of fewer than four
words left out), in the files' order, the first ``--passages`` of them, as a DPR-style TSV (id, text, title);
the questions are every tenth SQuAD dev question, the first ``--questions``, as a DPR ``.qa.csv`` (question TAB
answer list). Use them as ``--dataset "open:DIR/psgs.tsv+DIR/q-{split}.qa.csv" --split dev``.

    python bench/make_open_corpus.py --passages 100000 --questions 1000 --out runs/open100k
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import re
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SENTENCE_END = re.compile(r'(?<=[.!?])\s+(?=[A-Z0-9"])')


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--passages", type=int, default=100_000)
    p.add_argument("--questions", type=int, default=1000)
    p.add_argument("--out", required=True)
    p.add_argument("--data-dir", default=os.environ.get("QA_DATA_DIR") or str(ROOT.parent / "shared" / "data"))
    args = p.parse_args(argv)
    squad = Path(args.data_dir) / "squad"
    train = json.load(gzip.open(squad / "train-v1.1.reconstructed.json.gz"))
    with zipfile.ZipFile(squad / "dev-v1.1.json.zip") as z:
        dev = json.loads(z.read(next(n for n in z.namelist() if n.endswith(".json"))))
    rows = []
    for data in (train, dev):
        for article in data["data"]:
            for paragraph in article["paragraphs"]:
                rows += [(article["title"].replace("_", " "), s) for s in SENTENCE_END.split(paragraph["context"])
                         if len(s.split()) >= 4]
    if len(rows) < args.passages:
        print(f"error: SQuAD holds {len(rows)} sentences, fewer than --passages {args.passages}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "psgs.tsv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, delimiter="\t", lineterminator="\n")
        writer.writerow(["id", "text", "title"])
        for i, (title, sentence) in enumerate(rows[: args.passages]):
            writer.writerow([f"s{i}", sentence, title])
    questions = [(qa["question"], [a["text"] for a in qa["answers"]])
                 for article in dev["data"] for paragraph in article["paragraphs"] for qa in paragraph["qas"]]
    with open(out / "q-dev.qa.csv", "w", encoding="utf-8") as f:
        for question, answers in questions[::10][: args.questions]:
            f.write(question.replace("\t", " ") + "\t" + repr(answers) + "\n")
    print(f"{out}: {args.passages} passages, {min(args.questions, len(questions[::10]))} questions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
