"""The reading half of ``pipeline.run`` for a generative reader: select n, generate from the top n at once, score.

An extractive reader reads each (question, passage) pair alone and picks the best span; a generative reader
(:class:`readers.generative.GenerativeReader`) writes one answer from all n passages.  Everything around
the reading is the same as :func:`pipeline.reading.run_reader`'s: the selectors decide n from the retrieval
scores (``top:0`` is the closed-book baseline), the answer metrics and the error split score the answers, and
the run writes predictions.json, details.jsonl and costs.jsonl (with prompt and generated tokens per question:
the cost axis in tokens).  ``confidence`` stops on the generated answer's mean token log-probability: every n
up to its τ is generated (the shared prompt prefix reused), and each question keeps the answer at its stop.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from data.errors import UserError
from data.io import write_json, write_jsonl
from pipeline import stages

FEW_SHOT_SEED = 0  # which training questions become the few-shot examples (the same for every run)


def few_shot_examples(train, k: int, unit: str = "paragraph", *, seed: int = FEW_SHOT_SEED, evaluated_split: str | None = None) -> list:
    """``k`` few-shot examples from the training split ``train``: questions whose gold passage (sentence or
    paragraph, as the run reads) holds their first answer, drawn with a fixed seed.  Never from the evaluated
    split: ``evaluated_split`` equal to ``train.split`` is a one-line error."""
    from readers.prompts import Example

    if k <= 0:
        return []
    if train is None:
        raise UserError(f"reader shots={k}: few-shot examples come from a training split (--train-split); none loaded")
    if evaluated_split is not None and train.split == evaluated_split:
        raise UserError(f"reader shots={k}: --train-split {train.split} is the evaluated split; few-shot examples must "
                        "come from another split")
    corpus, queries = train.corpus, train.queries
    use_paragraphs = unit == "paragraph" and bool(corpus.paragraph_texts)
    order = np.random.default_rng(seed).permutation(len(queries))
    examples, seen = [], set()
    for i in order:
        gold = [int(g) for g in (queries.gold[i] if queries.gold is not None else [])]
        answers = [a for a in queries.answers[i] if isinstance(a, str) and a.strip()] if queries.answers else []
        if not gold or not answers or queries.texts[i] in seen:
            continue
        row = gold[0]
        passage = corpus.paragraph_texts[int(corpus.paragraph_ids[row])] if use_paragraphs else corpus.texts[row]
        if answers[0] not in passage:
            continue
        seen.add(queries.texts[i])
        examples.append(Example(queries.texts[i], passage, answers[0]))
        if len(examples) == k:
            return examples
    raise UserError(f"reader shots={k}: the training split has only {len(examples)} questions whose passage holds the answer")


def prepare_examples(reader, train, unit: str, evaluated_split: str) -> None:
    """Give a generative reader its few-shot examples (when it asks for any) from the training split."""
    shots = int(getattr(reader, "shots", 0) or 0)
    if shots:
        reader.set_examples(few_shot_examples(train, shots, unit, evaluated_split=evaluated_split), train.split)


def run_generative_reader(config, dataset, ranking, selector, train, retriever_factory, timer, out: Path, reader,
                          stage: Path | None = None) -> dict:
    """Select, generate, answer and score (as :func:`pipeline.reading.run_reader`, for a generative reader).

    Generations are cached in ``reader.read_cache`` (default ``<out>/generations``): a rerun of the same
    command resumes from the batches already generated and writes the same files.
    """
    from pipeline.reading import score_answers, selector_depth
    from readers.generative import GenerationCache
    from retrievers.base import release

    stage = Path(stage) if stage is not None else out
    rc = config.reader
    cache = GenerationCache(Path(rc.read_cache) if rc.read_cache else out / "generations")
    closed_book = getattr(selector, "method", None) == "top" and int(getattr(selector, "n", 1)) == 0
    depth = 1 if closed_book else min(selector_depth(selector), ranking.depth)
    prepare_examples(reader, train, rc.read_unit, dataset.split)
    if selector.needs_fit():
        if train is None:
            raise UserError(f"selector {selector.spec} is learned: it needs a training split (--train-split)")
        with timer("selector_fit"):
            from data.types import limit_queries

            fit_train = limit_queries(train, config.data.train_limit)
            retriever = retriever_factory()
            try:
                fit_ranking = stages.retrieve(retriever, fit_train, depth, train=fit_train)
            finally:
                release(retriever)
            stages.fit_selector(selector, fit_train, fit_ranking, depth, rc.read_unit, reader=reader, cache=cache)
    found = stages.candidates_for(dataset, ranking, depth, rc.read_unit)
    qs, bearing = found.queries, found.bearing
    with timer("read"):
        t0 = time.perf_counter()
        if getattr(selector, "reads_answers", False):
            reads, grid = stages.generate_every_n(reader, qs.texts, found.passages, cache=cache)
            n = stages.select_n(selector, found.passages, found.first_relevant(), reads=reads)
            gens = pick_generations(grid, n)
            n_read, n_reused = reads.n_read, reads.n_reused
        else:
            n = np.zeros(len(qs), dtype=np.int64) if closed_book else stages.select_n(selector, found.passages, found.first_relevant())
            gens = stages.generate_top(reader, qs.texts, found.passages, n, cache=cache)
            n_read, n_reused = gens.n_read, gens.n_reused
        wall = time.perf_counter() - t0
    answers = list(gens.text)
    with timer("answer_metrics"):
        scored = score_answers(answers, qs, bearing, n, config)
    tail = ("errors", "bert_f1_info")
    summary = {k: v for k, v in scored["summary"].items() if k not in tail}
    summary.update({"selector": selector.spec, "read_unit": rc.read_unit, "reader": rc.model,
                    "mean_prompt_tokens": float(gens.prompt_tokens.mean()) if len(gens) else 0.0,
                    "mean_generated_tokens": float(gens.generated_tokens.mean()) if len(gens) else 0.0})
    summary.update({k: scored["summary"][k] for k in tail if k in scored["summary"]})
    info = {"reads_done": int(n_read), "reads_reused": int(n_reused), "read_cache": str(cache.directory),
            "passages_read": int(n.sum()), "reader_s": round(float(wall), 3),
            "prompt_tokens": int(gens.prompt_tokens.sum()), "generated_tokens": int(gens.generated_tokens.sum()),
            **reader.facts(), **scored["info"]}
    selected = stages.take_top(found.passages, n)
    write_json(stage / "predictions.json", dict(zip(qs.question_ids, answers)))
    write_jsonl(stage / "details.jsonl", generation_rows(qs, dataset.corpus, selected, n, gens, bearing, scored))
    write_jsonl(stage / "costs.jsonl", [{"id": qid, "passages_read": int(k), "prompt_tokens": int(p), "generated_tokens": int(g),
                                         "reader_s": round(float(s), 6)}
                                        for qid, k, p, g, s in zip(qs.question_ids, n, gens.prompt_tokens, gens.generated_tokens, gens.seconds)])
    return {"metrics": summary, "info": info, "per_query": scored["per_query"]}


def pick_generations(grid: list, n: np.ndarray):
    """The generation of each question at its own n (``grid[n]`` holds every question's at n)."""
    from readers.generative import Generations, _copy

    out = Generations.empty(len(n))
    for q, k in enumerate(n):
        _copy(out, q, grid[int(k)], q)
        out.seconds[q] = grid[int(k)].seconds[q]
    return out


def generation_rows(queries, corpus, selected, n, gens, bearing, scored) -> list[dict]:
    """details.jsonl for a generative reader: per question the passages read (rank order), the raw output and the
    answer taken from it, its mean token log-probability, the tokens it cost and its scores."""
    rows = []
    for q in range(len(queries)):
        keys = [int(k) for k in selected.keys[q, : n[q]]]
        rows.append({
            "id": queries.question_ids[q],
            "question": queries.texts[q],
            "n": int(n[q]),
            "passages": [corpus.ids[k] for k in keys] if selected.unit == "sentence" else keys,
            "answer": gens.text[q],
            "output": gens.raw[q],
            "answer_rank": None,
            "score": None if np.isnan(gens.logprob[q]) else float(gens.logprob[q]),
            "prompt_tokens": int(gens.prompt_tokens[q]),
            "generated_tokens": int(gens.generated_tokens[q]),
            "answer_in_passages": bool(scored["recall"][q]),
            "gold": queries.answers[q],
            **{name: (None if np.isnan(v[q]) else float(v[q])) for name, v in scored["values"].items()},
            "error": scored["errors"][q],
            "read": [{"rank": j + 1, "text": selected.texts[q][j], "retriever_score": float(selected.retriever_scores[q, j]),
                      "span": None, "reader_score": None, "answer_bearing": bool(bearing[q, j])} for j in range(int(n[q]))],
        })
    return rows
