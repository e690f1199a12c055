"""The re-ranking stage (--rerank) and its training command, on real SQuAD slices with real BM25.

Tiny randomly initialised cross-encoders (BertForSequenceClassification, 2 layers of 32 units) with the
tokenizer of the installed all-MiniLM-L6-v2 package stand in for trained ones: they score fast and differently
per seed, which is all the stage's plumbing needs; training is tested on the real MiniLM encoder.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from data.errors import UserError
from tests.conftest import ROOT

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def minilm_path() -> str:
    from retrievers.encoder import default_encoder_path

    return default_encoder_path()


def tiny_cross_encoder(path: Path, seed: int, labels: int = 1) -> Path:
    """A randomly initialised tiny cross-encoder saved at ``path`` (the same seed gives the same weights)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    tok = AutoTokenizer.from_pretrained(minilm_path())
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, num_labels=labels, max_position_embeddings=512)
    BertForSequenceClassification(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("cross-encoders")
    return tiny_cross_encoder(root / "a", 1), tiny_cross_encoder(root / "b", 2)


@pytest.fixture(scope="module")
def ds():
    from pipeline import api

    return api.load_dataset("reqa_squad", "dev", limit=6)


def scorer(model, **kw):
    from retrievers.cross_encoder import CrossEncoderScorer

    return CrossEncoderScorer(str(model), dtype=kw.pop("dtype", "float32"), device="cpu", progress=False, **kw)


def trec(path: Path) -> dict[str, list[tuple[str, float]]]:
    out: dict[str, list[tuple[str, float]]] = {}
    for line in path.read_text().splitlines():
        qid, _, doc, rank, score, _ = line.split()
        out.setdefault(qid, []).append((doc, float(score)))
        assert len(out[qid]) == int(rank)
    return out


def run_cli(*args) -> int:
    from pipeline.run import main

    return main([str(a) for a in args])


# ------------------------------------------------------------------ the stage through the command
def test_run_writes_the_ranking_before_and_after_and_the_reranker_facts(models, tmp_path, ds, capsys):
    out = tmp_path / "run"
    rc = run_cli("--dataset", "reqa_squad", "--limit", 6, "--depth", 10, "--rerank", f"{models[0]}[dtype=float32]",
                 "--rerank-depth", 5, "--rerank-cache", tmp_path / "scores", "--out", out)
    assert rc == 0, capsys.readouterr().err
    after, before = trec(out / "run.trec"), trec(out / "run.first-stage.trec")
    assert list(after) == list(before) and len(after) == len(set(ds.queries.question_ids))
    first = api_bm25(ds)
    id_of = {str(cid): i for i, cid in enumerate(ds.corpus.ids)}
    for q, qid in enumerate(after):
        assert [d for d, _ in before[qid]] == [str(ds.corpus.ids[i]) for i in first.ids[q][:10]]  # BM25's top 10
        docs = [d for d, _ in after[qid]]
        assert len(docs) == 5 and set(docs) == {d for d, _ in before[qid][:5]}  # its top 5, re-ordered
        expected = scorer(models[0]).score_pairs([ds.queries.texts[q]] * 5, [ds.corpus.texts[id_of[d]] for d in docs])
        np.testing.assert_allclose([s for _, s in after[qid]], expected, atol=1e-5)
        assert all(a >= b for (_, a), (_, b) in zip(after[qid], after[qid][1:]))
    manifest = json.loads((out / "manifest.json").read_text())
    facts = manifest["rerankers"][0]
    assert facts["depth"] == 5 and facts["dtype"] == "float32" and facts["max_length"] == 256
    assert facts["model_identity"].startswith("dir:") and facts["pairs_scored"] == 30
    assert manifest["config"]["retriever"]["rerank"].startswith(str(models[0]))


def api_bm25(ds):
    from pipeline import api

    return api.retrieve("bm25", ds, depth=10)


def test_the_api_reranks_as_the_command_does(models, tmp_path, ds):
    from pipeline import api
    from retrievers.rerank import RerankRetriever

    cache = tmp_path / "scores"
    retriever = api.make_retriever("bm25", rerank={"spec": str(models[1]), "depth": 4, "dtype": "float32",
                                                   "cache_dir": str(cache)})
    assert isinstance(retriever, RerankRetriever)
    ranking = api.retrieve(retriever, ds, depth=8)
    assert ranking.ids.shape == (len(ds.queries), 8) and (ranking.ids[:, 4:] == -1).all()
    first = api_bm25(ds)
    for q in range(len(ds.queries)):
        assert set(ranking.ids[q, :4]) == set(first.ids[q, :4])
    result = api.run({"data": {"dataset": "reqa_squad", "limit": 6},
                      "retriever": {"depth": 8, "rerank": str(models[1]), "rerank_depth": 4, "rerank_dtype": "float32",
                                    "rerank_cache": str(cache)}}, out=str(tmp_path / "run"))
    after = trec(result.out / "run.trec")
    for q, qid in enumerate(after):
        assert [d for d, _ in after[qid]] == [str(ds.corpus.ids[i]) for i in ranking.ids[q, :4]]
    assert result.manifest["rerankers"][0]["pairs_reused"] == 24  # every pair from the API's scores
    with pytest.raises(UserError, match="without a spec"):
        api.make_retriever("bm25", rerank={"depth": 4})


def test_a_config_file_sets_the_stage_by_field_path_or_flag_name(models, tmp_path, capsys):
    config = tmp_path / "run.yaml"
    config.write_text(f"retriever:\n  rerank: {models[1]}\n  rerank_dtype: float32\nrerank-depth: 3\n"
                      f"rerank-cache: {tmp_path / 'scores'}\ndataset: reqa_squad\nlimit: 3\ndepth: 6\n")
    assert run_cli("--config", config, "--out", tmp_path / "run") == 0, capsys.readouterr().err
    facts = json.loads((tmp_path / "run" / "manifest.json").read_text())["rerankers"][0]
    assert (facts["spec"], facts["depth"], facts["dtype"]) == (str(models[1]), 3, "float32")
    assert all(len(rows) == 3 for rows in trec(tmp_path / "run" / "run.trec").values())


def test_cached_scores_never_cross_models(models, tmp_path, ds):
    from retrievers.rerank import ScoreCache, score_cached

    questions = [ds.queries.texts[q] for q in range(6) for _ in range(3)]
    passages = [ds.corpus.texts[j] for _ in range(6) for j in range(3)]
    a, b = scorer(models[0]), scorer(models[1])
    fresh_a, fresh_b = a.score_pairs(questions, passages), b.score_pairs(questions, passages)
    assert not np.allclose(fresh_a, fresh_b)
    directory = tmp_path / "shared"
    got_a, scored, reused = score_cached(a, questions, passages, ScoreCache(directory, a.identity()))
    assert (scored, reused) == (18, 0)
    got_b, scored, reused = score_cached(b, questions, passages, ScoreCache(directory, b.identity()))
    assert (scored, reused) == (18, 0)  # model a's scores in the same directory are not model b's
    np.testing.assert_array_equal(got_a, fresh_a)
    np.testing.assert_array_equal(got_b, fresh_b)
    again, scored, reused = score_cached(a, questions, passages, ScoreCache(directory, a.identity()))
    assert (scored, reused) == (0, 18)
    np.testing.assert_array_equal(again, fresh_a)
    # other keys of the same model: max length and precision
    assert len({a.identity(), scorer(models[0], max_length=64).identity(), scorer(models[0], dtype="bfloat16").identity()}) == 3


def test_the_model_identity_is_its_content(models, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(models[0], copy)
    assert scorer(copy).identity() == scorer(models[0]).identity()  # same files elsewhere: the same scores
    config = json.loads((copy / "tokenizer_config.json").read_text())
    config["do_lower_case"] = not config.get("do_lower_case", True)
    (copy / "tokenizer_config.json").write_text(json.dumps(config))
    assert scorer(copy).identity() != scorer(models[0]).identity()  # another tokenizer, the same weights


def test_sentence_plus_context_reads_each_sentence_in_its_paragraph(models, tmp_path, ds, capsys):
    cache = tmp_path / "scores"
    base = ["--dataset", "reqa_squad", "--limit", 6, "--depth", 10, "--rerank", models[0], "--rerank-dtype", "float32",
            "--rerank-depth", 5, "--rerank-cache", cache]
    assert run_cli(*base, "--out", tmp_path / "plain") == 0, capsys.readouterr().err
    assert run_cli(*base, "--rerank-field", "sentence+context", "--out", tmp_path / "ctx") == 0, capsys.readouterr().err
    manifest = json.loads((tmp_path / "ctx" / "manifest.json").read_text())
    facts = manifest["rerankers"][0]
    assert facts["field"] == "sentence+context" and facts["pairs_scored"] + facts["pairs_reused"] == 30
    assert json.loads((tmp_path / "plain" / "manifest.json").read_text())["rerankers"][0]["field"] == "sentence"
    after, plain = trec(tmp_path / "ctx" / "run.trec"), trec(tmp_path / "plain" / "run.trec")
    id_of = {str(cid): i for i, cid in enumerate(ds.corpus.ids)}
    moved = whole = 0
    for q, qid in enumerate(after):
        docs = [d for d, _ in after[qid]]
        assert set(docs) == {d for d, _ in plain[qid]}  # the same five, scored otherwise
        rows = [id_of[d] for d in docs]
        passages = [f"{ds.corpus.texts[r]} [SEP] {ds.corpus.contexts[r]}"  # MiniLM's separator
                    if ds.corpus.texts[r] != ds.corpus.contexts[r] else ds.corpus.texts[r] for r in rows]
        whole += sum(ds.corpus.texts[r] == ds.corpus.contexts[r] for r in rows)  # its own paragraph: read once
        expected = scorer(models[0]).score_pairs([ds.queries.texts[q]] * 5, passages)
        np.testing.assert_allclose([s for _, s in after[qid]], expected, atol=1e-5)
        moved += docs != [d for d, _ in plain[qid]]
    assert moved  # the paragraph changes the order somewhere
    assert facts["pairs_reused"] == whole  # only a sentence that is its whole paragraph keeps its score
    # a spec's field= wins over the flag; a bad one is refused
    assert run_cli(*base[:7], f"{models[0]}[field=sentence]", *base[8:], "--rerank-field", "sentence+context",
                   "--out", tmp_path / "spec") == 0
    assert json.loads((tmp_path / "spec" / "manifest.json").read_text())["rerankers"][0]["field"] == "sentence"


def test_mix_ranks_by_z_scores_of_the_cross_encoder_and_the_first_stage(models, tmp_path, ds, capsys):
    cache = tmp_path / "scores"
    base = ["--dataset", "reqa_squad", "--limit", 6, "--depth", 10, "--rerank", models[0], "--rerank-dtype", "float32",
            "--rerank-depth", 8, "--rerank-cache", cache]
    assert run_cli(*base, "--out", tmp_path / "alone") == 0, capsys.readouterr().err
    assert run_cli(*base, "--rerank-mix", 0.4, "--out", tmp_path / "mixed") == 0, capsys.readouterr().err
    facts = json.loads((tmp_path / "mixed" / "manifest.json").read_text())["rerankers"][0]
    assert facts["mix"] == 0.4 and facts["pairs_reused"] == 48  # the cross-encoder's scores are the same ones
    alone, mixed, first = (trec(tmp_path / name / file) for name, file in
                           (("alone", "run.trec"), ("mixed", "run.trec"), ("mixed", "run.first-stage.trec")))
    changed = 0
    id_of = {str(cid): i for i, cid in enumerate(ds.corpus.ids)}
    text_of = dict(zip(ds.queries.question_ids, ds.queries.texts))
    for qid in mixed:
        bm25 = dict(first[qid][:8])
        docs = list(bm25)
        ce = scorer(models[0]).score_pairs([text_of[qid]] * 8, [ds.corpus.texts[id_of[d]] for d in docs])
        z = [np.asarray(ce, np.float64), np.array([bm25[d] for d in docs])]
        z = [(v - v.mean()) / v.std() for v in z]
        expected = dict(zip(docs, 0.6 * z[0] + 0.4 * z[1]))
        got = dict(mixed[qid])
        assert set(got) == set(docs)
        np.testing.assert_allclose([got[d] for d in docs], [expected[d] for d in docs], atol=1e-4)
        assert all(a >= b for (_, a), (_, b) in zip(mixed[qid], mixed[qid][1:]))
        changed += [d for d, _ in mixed[qid]] != [d for d, _ in alone[qid]]
    assert changed
    capsys.readouterr()
    assert run_cli(*base, "--rerank-mix", 1, "--out", tmp_path / "bad") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "rerank-mix" in err.replace("_", "-") and "\n" not in err, err
    assert not (tmp_path / "bad").exists()


def test_a_model_trained_on_sentences_in_context_is_read_that_way_by_default(models, tmp_path, capsys):
    import shutil

    model = tmp_path / "ctx-model"
    shutil.copytree(models[1], model)
    (model / "recipe.json").write_text(json.dumps({"recipe": {"passage": "sentence+context"}}))
    assert run_cli("--dataset", "reqa_squad", "--limit", 3, "--depth", 5, "--rerank", model,
                   "--rerank-cache", tmp_path / "scores", "--out", tmp_path / "run") == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "run" / "manifest.json").read_text())["rerankers"][0]["field"] == "sentence+context"
    assert run_cli("--dataset", "reqa_squad", "--limit", 3, "--depth", 5, "--rerank", model, "--rerank-field", "sentence",
                   "--rerank-cache", tmp_path / "scores", "--out", tmp_path / "asked") == 0
    assert json.loads((tmp_path / "asked" / "manifest.json").read_text())["rerankers"][0]["field"] == "sentence"


def test_a_two_label_head_scores_by_its_log_odds(tmp_path, ds):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    path = tiny_cross_encoder(tmp_path / "two", 3, labels=2)
    q, p = [ds.queries.texts[0]] * 2, list(ds.corpus.texts[:2])
    tok, model = AutoTokenizer.from_pretrained(path), AutoModelForSequenceClassification.from_pretrained(path).eval()
    with torch.no_grad():
        logits = model(**tok(q, p, padding=True, return_tensors="pt")).logits
    np.testing.assert_allclose(scorer(path).score_pairs(q, p), (logits[:, 1] - logits[:, 0]).numpy(), atol=1e-5)


@pytest.mark.parametrize("spec, needle", [
    ("/no/such/cross-encoder", "no such directory"),
    ("{reader}", "no sequence-classification head"),
    ("nosuchkind:x", "unknown reranker kind 'nosuchkind'"),
    ("{a}[depth=0]", "depth must be >= 1"),
    ("{a}[dtype=float16]", "dtype='float16'"),
    ("{a}[colour=red]", "unknown option 'colour'"),
    ("{a}[field=paragraph]", "field 'paragraph' unknown"),
    ("{a}[mix=1.5]", "mix must be in [0, 1)"),
    ("{a}[mix=much]", "mix 'much' is not a number"),
    ("", "--rerank"),
])
def test_a_bad_spec_is_one_line(models, tmp_path, capsys, spec, needle):
    from tests.conftest import READER

    out = tmp_path / "run"
    rc = run_cli("--dataset", "reqa_squad", "--limit", 3, "--depth", 5, "--rerank",
                 spec.format(a=models[0], reader=READER), "--out", out)
    err = capsys.readouterr().err.strip()
    assert rc != 0 and err.startswith("error: ") and "\n" not in err and needle in err, err
    assert not out.exists()


def test_a_score_cache_that_is_a_file_is_one_line(models, tmp_path, capsys):
    (tmp_path / "scores").write_text("not a directory")
    rc = run_cli("--limit", 3, "--depth", 5, "--rerank", models[0], "--rerank-cache", tmp_path / "scores",
                 "--out", tmp_path / "run")
    err = capsys.readouterr().err.strip()
    assert rc != 0 and err == f"error: --rerank-cache {tmp_path / 'scores'}: not a directory"
    assert not (tmp_path / "run").exists()


def test_a_reranker_plugin_works_through_the_command(plugin_package, tmp_path, capsys):
    from retrievers.rerank import RERANKERS

    plugin_package(RERANKERS)
    out = tmp_path / "run"
    assert run_cli("--dataset", "reqa_squad", "--limit", 4, "--depth", 6, "--rerank", "shared-words:any[min_length=4]",
                   "--rerank-cache", tmp_path / "scores", "--out", out) == 0, capsys.readouterr().err
    facts = json.loads((out / "manifest.json").read_text())["rerankers"][0]
    assert facts["kind"] == "SharedWordsScorer" and facts["min_length"] == 4
    scores = [s for rows in trec(out / "run.trec").values() for _, s in rows]
    assert all(float(s).is_integer() for s in scores) and max(scores) >= 1


@pytest.mark.slow
@pytest.mark.parametrize("selector", ["threshold:0.9,5", "gap:5"])
def test_the_selector_and_the_reader_see_the_reranked_list_and_scores(models, tmp_path, capsys, selector):
    from tests.conftest import READER

    out = tmp_path / "run"
    assert run_cli("--dataset", "reqa_squad", "--limit", 4, "--depth", 10, "--rerank", models[0], "--rerank-depth", 5,
                   "--rerank-cache", tmp_path / "scores", "--reader", READER, "--selector", selector,
                   "--metrics", "em,f1", "--out", out) == 0, capsys.readouterr().err
    ranked = trec(out / "run.trec")
    for row in map(json.loads, (out / "details.jsonl").read_text().splitlines()):
        hits = ranked[row["id"]]
        assert row["passages"] == [d for d, _ in hits[: row["n"]]]
        np.testing.assert_allclose([r["retriever_score"] for r in row["read"]], [s for _, s in hits[: len(row["read"])]],
                                   atol=1e-6)  # run.trec keeps 6 decimals


# ------------------------------------------------------------------ kill and resume
KILLED_SCORING = """
import sys
from retrievers.cross_encoder import CrossEncoderScorer
from retrievers.rerank import ScoreCache, score_cached
from data.registry import load_dataset
from data.types import limit_queries
model, cache = sys.argv[1], sys.argv[2]
ds = limit_queries(load_dataset("reqa_squad", "dev"), 60)
q = [t for t in ds.queries.texts for _ in range(8)]
p = [ds.corpus.texts[j] for _ in ds.queries.texts for j in range(8)]
s = CrossEncoderScorer(model, dtype="float32", device="cpu", num_threads=1, progress=False)
print("start", flush=True)
score_cached(s, q, p, ScoreCache(cache, s.identity()), chunk=4)
print("done", flush=True)
"""


@pytest.mark.slow
def test_a_killed_scoring_resumes_with_identical_scores(models, tmp_path):
    from data.registry import load_dataset
    from data.types import limit_queries
    from retrievers.rerank import ScoreCache, score_cached

    cache = tmp_path / "scores"
    proc = subprocess.Popen([sys.executable, "-c", KILLED_SCORING, str(models[0]), str(cache)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and len(list(cache.glob("reads-*.npz"))) < 5 and proc.poll() is None:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read()
    ds = limit_queries(load_dataset("reqa_squad", "dev"), 60)
    q = [t for t in ds.queries.texts for _ in range(8)]
    p = [ds.corpus.texts[j] for _ in ds.queries.texts for j in range(8)]
    s = scorer(models[0], num_threads=1)
    resumed, scored, reused = score_cached(s, q, p, ScoreCache(cache, s.identity()), chunk=4)
    assert reused >= 20 and scored > 0 and scored + reused == len(set(zip(q, p)))
    fresh, _, _ = score_cached(s, q, p, None, chunk=4)
    np.testing.assert_array_equal(resumed, fresh)


# ------------------------------------------------------------------ training
@pytest.mark.parametrize("args, needle", [
    (["--split", "dev"], "--split dev is an evaluation split"),
    (["--split", "test"], "evaluation split"),
    (["--epochs", "0"], "--epochs 0.0: must be > 0"),
    (["--negatives", "0"], "--negatives 0"),
    (["--base", "/no/such/encoder"], "no such directory"),
    (["--colour", "red"], "unrecognized arguments"),
    (["--precision", "int8"], "--precision: invalid choice: 'int8'"),
    (["--loss", "ranknet"], "--loss: invalid choice: 'ranknet'"),
    (["--negative-pick", "random"], "--negative-pick: invalid choice: 'random'"),
    (["--passage", "paragraph"], "--passage: invalid choice: 'paragraph'"),
])
def test_training_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, args, needle):
    from retrievers.train_reranker import main

    assert main([*args, "--limit", "8", "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and needle in err and "\n" not in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_training_ranks_gold_above_negatives_more_often_than_the_initial_model(tmp_path, capsys):
    from retrievers.train_reranker import (Recipe, initial_model, load_tokenizer, load_training_split, main,
                                           pair_accuracy, training_pairs)

    out = tmp_path / "trained"
    from retrievers.train_reranker import training_precision

    args = ["--limit", "64", "--negatives", "2", "--epochs", "1", "--max-length", "96", "--lr", "1e-4", "--seed", "7"]
    assert main([*args, "--precision", "auto", "--out", str(out), "--no-progress"]) == 0, capsys.readouterr().err
    recipe = json.loads((out / "recipe.json").read_text())
    assert recipe["recipe"]["precision"] == training_precision("auto")  # bf16 autocast where the CPU has it
    assert recipe["recipe"]["limit"] == 64 and recipe["data"]["pairs"] == recipe["data"]["positives"] + 128
    assert recipe["recipe"]["split"] == "train" and recipe["versions"]["transformers"]
    settings = Recipe(limit=64, negatives=2, epochs=1, max_length=96, lr=1e-4, seed=7)
    pairs = training_pairs(load_training_split("reqa_squad", "train"), settings)
    assert recipe["data"]["question_ids_sha256"] == pairs.facts()["question_ids_sha256"]
    initial = tmp_path / "initial"
    initial_model(minilm_path(), 7).save_pretrained(initial)
    load_tokenizer(minilm_path()).save_pretrained(initial)
    before = pair_accuracy(scorer(initial, max_length=96).score_pairs(pairs.questions, pairs.passages), pairs)
    after = pair_accuracy(scorer(out, max_length=96).score_pairs(pairs.questions, pairs.passages), pairs)
    assert after > before, (before, after)
    # the trained model works as a --rerank model
    assert run_cli("--dataset", "reqa_squad", "--limit", 3, "--depth", 5, "--rerank", out,
                   "--rerank-cache", tmp_path / "scores", "--out", tmp_path / "run") == 0


def test_the_loss_and_the_negative_pick_are_in_the_recipe_and_its_key():
    from dataclasses import asdict

    from retrievers.train_reranker import Recipe, recipe_key

    keys = {recipe_key(Recipe(loss=loss, negative_pick=pick), "hub:x")
            for loss in ("pointwise", "listwise") for pick in ("top", "sample")}
    assert len(keys) == 4
    assert asdict(Recipe())["loss"] == "pointwise" and asdict(Recipe())["negative_pick"] == "top"
    assert recipe_key(Recipe(passage="sentence+context"), "hub:x") != recipe_key(Recipe(), "hub:x")
    with pytest.raises(UserError, match="--loss 'margin'"):
        Recipe(loss="margin").check()


def test_the_listwise_loss_is_softmax_cross_entropy_of_each_groups_first_pair():
    import torch

    from retrievers.train_reranker import listwise_loss

    logits = torch.tensor([2.0, 0.5, -1.0, 0.0, 3.0], requires_grad=True)  # groups [2, .5, -1] and [0, 3]
    loss = listwise_loss(logits, torch.tensor([3, 2]))
    expected = (-torch.log_softmax(torch.tensor([2.0, 0.5, -1.0]), 0)[0]
                - torch.log_softmax(torch.tensor([0.0, 3.0]), 0)[0]) / 2
    assert torch.isclose(loss, expected)
    loss.backward()  # the gold pair is pushed up, the negatives down
    assert logits.grad[0] < 0 and logits.grad[3] < 0 and (logits.grad[[1, 2, 4]] > 0).all()
    # a gold pair far above its negatives costs next to nothing, far below a lot
    assert listwise_loss(torch.tensor([9.0, 0.0, 0.0]), torch.tensor([3])) < 1e-3
    assert listwise_loss(torch.tensor([0.0, 9.0, 0.0]), torch.tensor([3])) > 8


def test_listwise_batches_keep_each_question_s_group_whole():
    from transformers import AutoTokenizer

    from retrievers.train_reranker import GroupCollator, TrainingPairs, _Groups

    # question 0: gold, 2 negatives; question 1: two gold sentences, 1 negative (short of negatives)
    pairs = TrainingPairs(["q0"] * 3 + ["q1"] * 3, ["g0", "n0a", "n0b", "g1a", "n1", "g1b"],
                          np.asarray([1, 0, 0, 1, 0, 1], np.float32), np.asarray([0, 0, 0, 1, 1, 1]), ["a", "b"], 1)
    assert pairs.groups() == [[0, 1, 2], [3, 4], [5, 4]]
    tok = AutoTokenizer.from_pretrained(minilm_path())
    data = _Groups(tok, pairs, 32)
    assert len(data) == 3 and [len(data[i]) for i in range(3)] == [3, 2, 2]
    batch = GroupCollator(tok)([data[0], data[2]])
    assert batch["group_sizes"].tolist() == [3, 2] and batch["input_ids"].shape[0] == 5
    texts = tok.batch_decode(batch["input_ids"], skip_special_tokens=True)
    assert [t.split()[-1] for t in texts] == ["g0", "n0a", "n0b", "g1b", "n1"]


@pytest.mark.slow
def test_listwise_training_ranks_gold_above_negatives_on_its_training_slice(tmp_path, capsys):
    from retrievers.train_reranker import Recipe, load_training_split, main, pair_accuracy, training_pairs

    out = tmp_path / "listwise"
    args = ["--limit", "48", "--negatives", "3", "--epochs", "2", "--max-length", "96", "--lr", "1e-4", "--seed", "7",
            "--batch-size", "4", "--loss", "listwise", "--negative-pick", "sample", "--bm25-depth", "30"]
    assert main([*args, "--out", str(out), "--no-progress"]) == 0, capsys.readouterr().err
    recipe = json.loads((out / "recipe.json").read_text())
    assert recipe["recipe"]["loss"] == "listwise" and recipe["recipe"]["negative_pick"] == "sample"
    assert recipe["data"]["groups"] == recipe["data"]["positives"] and recipe["steps"] == 2 * -(-recipe["data"]["groups"] // 4)
    settings = Recipe(limit=48, negatives=3, epochs=2, max_length=96, lr=1e-4, seed=7, batch_size=4, loss="listwise",
                      negative_pick="sample", bm25_depth=30)
    dataset = load_training_split("reqa_squad", "train")
    pairs = training_pairs(dataset, settings)
    assert recipe["data"]["question_ids_sha256"] == pairs.facts()["question_ids_sha256"]
    # sampled from deeper than the top 3: not BM25's first eligible hits for every question
    top = training_pairs(dataset, Recipe(**{**settings.__dict__, "negative_pick": "top"}))
    assert top.question_ids == pairs.question_ids and top.passages != pairs.passages
    assert set(pairs.passages[i] for i in np.flatnonzero(pairs.labels == 1)) == \
        set(top.passages[i] for i in np.flatnonzero(top.labels == 1))
    after = pair_accuracy(scorer(out, max_length=96).score_pairs(pairs.questions, pairs.passages), pairs)
    assert after >= 0.9, after


@pytest.mark.slow
def test_training_on_sentences_in_their_paragraphs_and_reranking_them_so(tmp_path, capsys):
    from retrievers.train_reranker import Recipe, load_training_split, main, pair_accuracy, training_pairs

    out = tmp_path / "ctx"
    args = ["--limit", "48", "--negatives", "3", "--epochs", "2", "--max-length", "160", "--lr", "1e-4", "--seed", "7",
            "--batch-size", "4", "--loss", "listwise", "--passage", "sentence+context"]
    assert main([*args, "--out", str(out), "--no-progress"]) == 0, capsys.readouterr().err
    assert json.loads((out / "recipe.json").read_text())["recipe"]["passage"] == "sentence+context"
    dataset = load_training_split("reqa_squad", "train")
    settings = Recipe(limit=48, negatives=3, epochs=2, max_length=160, lr=1e-4, seed=7, batch_size=4, loss="listwise")
    alone = training_pairs(dataset, settings)
    pairs = training_pairs(dataset, Recipe(**{**settings.__dict__, "passage": "sentence+context"}), " [SEP] ")
    paragraphs: dict[str, set[str]] = {}
    for sentence, context in zip(dataset.corpus.texts, dataset.corpus.contexts):
        paragraphs.setdefault(str(sentence), set()).add(str(context))
    assert pairs.question_ids == alone.question_ids and list(pairs.labels) == list(alone.labels)
    for sentence, passage in zip(alone.passages, pairs.passages):  # the same sentences, each before its paragraph
        if paragraphs[sentence] == {sentence}:  # a sentence that is its whole paragraph is read once
            assert passage == sentence
            continue
        head, sep, paragraph = passage.partition(" [SEP] ")
        assert head == sentence and sep and paragraph in paragraphs[sentence] and sentence in paragraph
    assert pair_accuracy(scorer(out, max_length=160).score_pairs(pairs.questions, pairs.passages), pairs) >= 0.9
    # re-ranking reads sentences in their paragraphs, as the model's recipe says, without being told
    assert run_cli("--dataset", "reqa_squad", "--limit", 3, "--depth", 5, "--rerank", out,
                   "--rerank-cache", tmp_path / "scores", "--out", tmp_path / "run") == 0
    assert json.loads((tmp_path / "run" / "manifest.json").read_text())["rerankers"][0]["field"] == "sentence+context"


@pytest.mark.slow
def test_the_sweep_reranks_and_records_the_reranker(models, tmp_path, capsys):
    from pipeline.sweep import main
    from tests.conftest import READER

    out, scores = tmp_path / "sweep", tmp_path / "scores"
    assert main(["--dataset", "squad_open", "--reader", str(READER), "--n", "1-3", "--corpus-sizes", "x1", "--limit", "6",
                 "--thetas", "0.8", "--no-ordinal", "--no-plots", "--bootstrap", "20", "--rerank", str(models[0]),
                 "--rerank-depth", "5", "--rerank-dtype", "float32", "--rerank-cache", str(scores),
                 "--out", str(out)]) == 0, capsys.readouterr().err
    facts = json.loads((out / "manifest.json").read_text())["rerankers"][0]
    assert facts["depth"] == 5 and facts["dtype"] == "float32" and facts["model_identity"].startswith("dir:")
    assert list(scores.glob("reads-*.npz")) and (out / "results.csv").is_file()
