"""ReQA SQuAD built exactly as ReQA's reference code builds it."""

import pytest

from data.errors import UserError
from data.registry import load_dataset
from data.sentences import reqa_sentences


def test_dev_counts_match_reqa(reqa_dev):
    # ReQA's squad_eval.py prints "index size=10250 questions=11426" on SQuAD v1.1 dev
    assert len(reqa_dev.corpus) == 10250
    assert len(reqa_dev.queries) == 11426
    assert reqa_dev.sources["answers_between_sentences"] == 0


def test_gold_sets_are_every_candidate_with_the_answer_sentence(reqa_dev):
    corpus, queries = reqa_dev.corpus, reqa_dev.queries
    by_text = {}
    for i, t in enumerate(corpus.texts):
        by_text.setdefault(t, []).append(i)
    for q in range(0, len(queries), 97):
        sentence = queries.answer_sentences[q]
        assert sorted(queries.gold[q].tolist()) == by_text[sentence]
        # the sentence holds at least one of the question's answers
        assert any(a in sentence for a in queries.answers[q])
    # candidates are unique (sentence, paragraph) pairs
    assert len(set(zip(corpus.texts, corpus.contexts))) == len(corpus)
    # one query input per question and distinct answer sentence
    pairs = list(zip(queries.question_ids, queries.answer_sentences))
    assert len(set(pairs)) == len(pairs)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("It rained. The game went on.", ["It rained.", "The game went on."]),
        ("Dr. Smith arrived. He left.", ["Dr. Smith arrived.", "He left."]),
        ("The book by J. R. R. Tolkien sold well. It was long.", ["The book by J. R. R. Tolkien sold well.", "It was long."]),
        ("It was founded in Jan. 1990 by them.", ["It was founded in Jan. 1990 by them."]),
        ("It was disputed.[citation needed] Later it was accepted.", ["It was disputed.[citation needed]", "Later it was accepted."]),
        ('He said "Go." Then he left.', ['He said "Go."', "Then he left."]),
        ("It cost 5 dollars, e.g. A lot. Yes.", ["It cost 5 dollars, e.g. A lot.", "Yes."]),
        ("The U.S. 2000 census counted them.", ["The U.S. 2000 census counted them."]),
        ("He moved to Washington, D.C. The city grew.", ["He moved to Washington, D.C.", "The city grew."]),
        ("It rained all day.However the game went on.", ["It rained all day.However the game went on."]),
    ],
)
def test_sentence_breaker_rules(text, expected):
    assert reqa_sentences(text) == expected


def test_contexts_are_a_view_of_the_paragraphs_not_a_copy(reqa_dev):
    """Each candidate's context is its paragraph, read through paragraph_ids from the one paragraph list."""
    import numpy as np

    from data.types import RowParagraphs

    corpus = reqa_dev.corpus
    assert isinstance(corpus.contexts, RowParagraphs) and corpus.contexts.paragraph_texts is corpus.paragraph_texts
    assert len(corpus.paragraph_texts) == 2067  # SQuAD v1.1 dev paragraphs (every one has an answer sentence)
    rows = np.arange(0, len(corpus), 37)
    for i in rows:
        para = corpus.paragraph_texts[corpus.paragraph_ids[i]]
        assert corpus.contexts[int(i)] is para and corpus.texts[i] in para
    assert corpus.contexts[5:9] == [corpus.paragraph_texts[p] for p in corpus.paragraph_ids[5:9]]
    assert corpus.contexts.fetch(rows) == [corpus.contexts[int(i)] for i in rows] == corpus.contexts[rows]
    sub = corpus.subset(rows)
    assert isinstance(sub.contexts, RowParagraphs) and list(sub.contexts) == corpus.contexts.fetch(rows)
    assert sum(1 for _ in corpus.contexts) == len(corpus)


def test_offsets_are_exact_on_real_paragraphs(reqa_dev):
    from data.sentences import reqa_sentence_breaks

    for ctx in reqa_dev.corpus.paragraph_texts[:300]:
        spans = reqa_sentence_breaks(ctx)
        assert all(ctx[s:e] == ctx[s:e].strip() and ctx[s:e] for s, e in spans)
        assert all(e1 <= s2 for (_, e1), (s2, _) in zip(spans, spans[1:]))


def test_unknown_dataset_and_missing_file_are_one_line_errors(tmp_path):
    with pytest.raises(UserError, match="unknown dataset 'nope'"):
        load_dataset("nope", "dev")
    with pytest.raises(UserError) as e:
        load_dataset("reqa_squad", "dev", data_dir=tmp_path)
    # offline: the error names the file to put where
    assert "squad/dev-v1.1.json" in str(e.value) and "\n" not in str(e.value)
