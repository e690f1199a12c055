"""The answer-metric stage made fast without changing what it scores: METEOR's remembered stems and synsets give
NLTK's own values, per-answer metrics in a forked process beside BERT-F1 give the sequential values, and BERT-F1 on
OpenVINO stays within its documented distance of torch's, is recorded and is cached apart."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest

import eval.answer_metrics as am
from data.errors import UserError
from eval.registry import ANSWER_METRICS, AnswerMetric
from tests.conftest import ROOT

SQUAD_DEV = ROOT.parent / "shared" / "data" / "squad" / "dev-v1.1.json.zip"


@pytest.fixture(scope="module")
def dev_answers() -> tuple[list[str], list[list[str]]]:
    """600 SQuAD dev questions' gold answers as 'predictions' (their first answer, or a word of their question)
    against all their gold answers: real answer text, many distinct words."""
    with zipfile.ZipFile(SQUAD_DEV) as z:
        squad = json.loads(z.read(next(n for n in z.namelist() if n.endswith(".json"))))
    preds, golds = [], []
    for article in squad["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                answers = [a["text"] for a in qa["answers"]]
                k = len(preds)
                preds.append(answers[-1] if k % 3 else qa["question"].split()[k % len(qa["question"].split())])
                golds.append(answers)
    return preds[:600], golds[:600]


def test_meteor_with_remembered_stems_and_synsets_equals_nltk(dev_answers):
    from nltk.translate.meteor_score import meteor_score

    from eval.wordnet import wordnet_reader

    preds, golds = dev_answers
    ours = [am.meteor(p, g) for p, g in zip(preds[:200], golds[:200])]
    plain = [meteor_score([am.meteor_tokens(x) for x in g], am.meteor_tokens(p), wordnet=wordnet_reader())
             for p, g in zip(preds[:200], golds[:200])]
    assert ours == plain and max(ours) > 0.5 and min(ours) == 0.0


def test_per_answer_metrics_beside_a_batch_metric_equal_the_sequential_ones(dev_answers, monkeypatch):
    """With a batch metric asked for, em/f1/rouge_l/meteor run in a forked process: the same arrays, the same order."""
    preds, golds = dev_answers
    def lengths(predictions, references_list, language="en"):
        return np.array([len(p) for p in predictions], dtype=np.float64), {"what": "characters"}

    # registered as a plugin registers (the registry's entries; removed after the test)
    monkeypatch.setitem(ANSWER_METRICS._items, "answer_length",
                        AnswerMetric("answer_length", lambda p, g, language="en": float(len(p))))
    monkeypatch.setitem(ANSWER_METRICS._items, "answer_chars", AnswerMetric("answer_chars", lengths, batch=True))
    monkeypatch.setitem(ANSWER_METRICS._items, "scored_by", AnswerMetric(
        "scored_by", lambda p, g, language="en": float(os.getpid())))
    names = ("em", "f1", "rouge_l", "meteor", "answer_length", "scored_by", "answer_chars")
    monkeypatch.setattr(am, "PARALLEL_FROM", 10 ** 9)
    sequential = am.answer_metrics(preds, golds, metrics=names, progress=False)
    monkeypatch.setattr(am, "PARALLEL_FROM", 100)
    beside = am.answer_metrics(preds, golds, metrics=names, progress=False)
    assert list(beside) == list(names) == list(sequential)
    for name in names:
        if name != "scored_by":
            np.testing.assert_array_equal(beside[name], sequential[name])
    assert set(sequential["scored_by"]) == {os.getpid()}
    import hardware

    if hardware.available_cores() >= 2:  # scored in the forked process
        assert os.getpid() not in set(beside["scored_by"]) and len(set(beside["scored_by"])) == 1
    else:  # one core: in turn, in this process
        assert set(beside["scored_by"]) == {os.getpid()}
    assert beside.info["answer_chars"] == {"what": "characters"}


def test_a_per_answer_metric_failing_in_the_forked_process_fails_the_call(dev_answers, monkeypatch):
    preds, golds = dev_answers

    def broken(prediction, golds, language="en"):
        raise UserError("answer metric 'broken': cannot score")

    monkeypatch.setitem(ANSWER_METRICS._items, "broken", AnswerMetric("broken", broken))
    monkeypatch.setitem(ANSWER_METRICS._items, "answer_chars", AnswerMetric(
        "answer_chars", lambda p, r, language="en": (np.zeros(len(p)), {}), batch=True))
    monkeypatch.setattr(am, "PARALLEL_FROM", 100)
    with pytest.raises(UserError, match="answer metric 'broken': cannot score"):
        am.answer_metrics(preds, golds, metrics=("em", "broken", "answer_chars"), progress=False)


@pytest.mark.slow
def test_bert_f1_on_openvino_is_within_its_distance_of_torch_recorded_and_cached_apart(dev_answers, tmp_path,
                                                                                       monkeypatch):
    from eval.bertscore import bert_f1
    from eval.bertscore_openvino import MIN_COSINE

    monkeypatch.setenv("QA_CACHE_DIR", str(tmp_path / "cache"))
    preds, golds = dev_answers
    torch_scores, torch_info = bert_f1(preds, golds, cache=tmp_path / "pairs", backend="torch")
    assert torch_info["backend"] == "torch" and "openvino" not in torch_info
    ov_scores, ov_info = bert_f1(preds, golds, cache=tmp_path / "pairs", backend="openvino")
    assert ov_info["backend"].startswith("openvino-") and ov_info["pairs_cached"] == 0  # never torch's scores
    ok = ~np.isnan(torch_scores)
    assert np.abs(ov_scores[ok] - torch_scores[ok]).max() <= 0.005  # documented: at most 0.003 on the main job
    auto_scores, auto_info = bert_f1(preds, golds, cache=tmp_path / "pairs", backend="auto")
    check = auto_info["openvino"]["check"]
    assert check["split"] == "squad train" and check["openvino"]["float32"]["min_cosine"] >= 0.9999
    if auto_info["backend"] == "torch":
        np.testing.assert_array_equal(auto_scores, torch_scores)
    else:
        side = check["openvino"][auto_info["backend"].split("-", 1)[1]]
        assert side["min_cosine"] >= MIN_COSINE and side["speedup"] >= 1.05
    with pytest.raises(UserError, match="BERTScore backend='gpu'"):
        bert_f1(preds[:2], golds[:2], backend="gpu")
    entries = [p for p in (Path(tmp_path) / "cache" / "bertscore-openvino").iterdir() if p.is_dir()]
    assert len(entries) == 1  # measured once, for every later call of the same model
    # bert_f1 embeds every sentence first without padding (prepare) and bert-score's padded batches are served from
    # those: a batch mixing served and computed rows gives each real token the embedding a padded batch gives it
    import eval.bertscore as bs

    scorer, name, layers, _ = bs._load_scorer(None, None, None, False, "en", True)
    model, _ = bs._backend_model(scorer, "openvino", name, layers)
    tokenizer, texts = scorer._tokenizer, [p for p in preds[:48] if p.strip()]
    batch = tokenizer(texts, padding=True, truncation=True, return_tensors="pt")
    padded = model(batch["input_ids"], attention_mask=batch["attention_mask"])[0].numpy()
    model.prepare(tokenizer, texts[::2])
    assert len(model._ready) == len({tuple(tokenizer(t)["input_ids"]) for t in texts[::2]})
    mixed = model(batch["input_ids"], attention_mask=batch["attention_mask"])[0].numpy()
    assert mixed.shape == padded.shape and not model._ready  # every prepared embedding was handed over
    real = batch["attention_mask"].numpy().astype(bool)
    a, b = padded[real], mixed[real]
    cosine = np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    assert cosine.min() >= MIN_COSINE
