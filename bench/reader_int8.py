"""The int8 reader against float32, bf16, other int8 recipes and the peers a user would pick, in one run.

Every side reads the same SQuAD v1.1 dev questions, each with its own (gold)
paragraph, with the same checkpoint, window length, stride, longest answer and
question, on the same CPU threads.  The sides that are ours share the reader's
tokenization, length-sorted batching and span decoding and differ only in the
model that runs the forward passes:

* ``torch float32``, ``torch bf16`` (autocast; only where the CPU has native bf16: ``auto``'s choice there);
* ``int8 (ours)``: ``--reader-dtype int8`` as users get it (readers/int8.py, its default recipe, from the cache);
* other int8 recipes: the default with its FFN output projections in int8 too, or with only the first layer in
  float; activation groups of 32 and 128, none at all (int8 weights, float products), asymmetric weights; NNCF static
  post-training quantization of every layer (activation ranges calibrated on SQuAD train reader windows, the
  TRANSFORMER preset); torch's ``quantize_dynamic`` on every ``nn.Linear`` (per-tensor, the naive recipe);
* OpenVINO float32 and bf16 without quantization (where the backend alone takes us), each as the backends run it
  (the throughput hint's streams, batches handed back as they finish) and as one stream of every thread read
  batch after batch (``..., one stream``).

``--sides REGEX`` keeps only our sides whose names match (torch float32, the reference, always runs), e.g.
``--sides 'torch|OpenVINO' --peers '' --no-static`` for the backends alone.  The run ends with the per-CPU choice
of ``--reader-backend auto`` and the check it rests on.

The peers run in the bench-only venv (transformers 4.57.x, optimum-onnx with ONNX Runtime; bench/README.md):
transformers' question-answering pipeline, and the same pipeline over Optimum's ONNX Runtime model quantized
with Optimum's dynamic int8 configuration for this CPU (``AutoQuantizationConfig.avx512_vnni`` or ``.avx2``,
per-tensor as in its documentation, and per-channel), each at the pipeline batch sizes given.

The questions are cut into blocks and every side reads each block in turn, the order rotating per block, so
load from elsewhere hits all sides alike.  Model loading, building and a warm-up are not timed.

    python bench/reader_int8.py --limit 2000 --plot docs/img/int8_frontier.png
    python bench/reader_int8.py --main-job 500

``--sensitivity N`` instead reads N SQuAD train questions (outside the recipe's validation sample;
``--sensitivity-split dev`` for dev) with every layer in int8 and with one group of layers left in float32 at
a time (each kind of projection across all layers, each layer whole, a few pairs): which layers carry the int8
error, and what keeping them in float costs.  The default recipe's float group was chosen on this table.

``--main-job N`` instead runs the main job (``python -m pipeline.run --dataset reqa_squad --split dev
--limit N``, the shared reader, default retriever and metrics) with ``--reader-dtype float32`` and ``int8``,
in the order float32, int8, int8, float32, each with its own output and read cache, and prints the reading
stage's seconds (``timings_s.read`` of the manifest) of each, their ratio and the largest metric difference.

Prints per side: EM, F1, passages/s, the paired EM and F1 difference to float32 with its 95% bootstrap
interval, and the share of answers identical to float32's; then the goals and the speed-accuracy frontier
(EM loss against passages/s; ``--plot`` draws it).  A run on a busy machine is marked NOT A RESULT (exit 3).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
DEFAULT_VENV = ROOT / ".venv-bench"
from reader_vs_pipeline import ChildProcess, _reply, add_reading_arguments  # noqa: E402  (bench/ is on the path: both sides import it)

PEER_LABELS = {"torch": "HF pipeline", "ort-int8": "Optimum ORT int8", "ort-int8-per-channel": "Optimum ORT int8 per-channel"}


# ---------------------------------------------------------------- peer side (runs in the bench venv)


def serve_peer(kind: str, model: str, threads: int, work: str) -> None:
    """Answer JSON requests on stdin with transformers' pipeline over ``kind``: torch, or Optimum's ORT int8 model."""
    import torch
    import transformers

    torch.set_num_threads(threads)
    transformers.logging.set_verbosity_error()
    tokenizer = transformers.AutoTokenizer.from_pretrained(model)
    if kind == "torch":
        qa = transformers.pipeline("question-answering", model=model, tokenizer=model, device=-1)
        versions = {"transformers": transformers.__version__}
    else:
        import onnxruntime
        import optimum.onnxruntime as ort
        from optimum.onnxruntime.configuration import AutoQuantizationConfig

        exported = Path(work) / "onnx"
        if not (exported / "model.onnx").exists():
            ort.ORTModelForQuestionAnswering.from_pretrained(model, export=True).save_pretrained(exported)
        flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
        make = AutoQuantizationConfig.avx512_vnni if "avx512_vnni" in flags else AutoQuantizationConfig.avx2
        per_channel = kind == "ort-int8-per-channel"
        target = Path(work) / kind
        if not (target / "model_quantized.onnx").exists():
            quantizer = ort.ORTQuantizer.from_pretrained(exported)
            quantizer.quantize(save_dir=target, quantization_config=make(is_static=False, per_channel=per_channel))
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        onnx_model = ort.ORTModelForQuestionAnswering.from_pretrained(target, file_name="model_quantized.onnx",
                                                                     session_options=options)
        qa = transformers.pipeline("question-answering", model=onnx_model, tokenizer=tokenizer, device=-1)
        versions = {"transformers": transformers.__version__, "onnxruntime": onnxruntime.__version__,
                    "config": f"{make.__name__}(is_static=False, per_channel={per_channel})"}
    _reply({"versions": versions, "threads": torch.get_num_threads()})
    for line in sys.stdin:
        request = json.loads(line)
        started = time.perf_counter()
        outputs = qa(question=request["questions"], context=request["contexts"], max_seq_len=request["max_length"],
                     doc_stride=request["stride"], max_answer_len=request["max_answer_tokens"],
                     max_question_len=request["max_question_tokens"], batch_size=request["batch_size"])
        seconds = time.perf_counter() - started
        if isinstance(outputs, dict):
            outputs = [outputs]
        _reply({"answers": [o["answer"] for o in outputs], "seconds": seconds})


class PeerProcess(ChildProcess):
    def __init__(self, python: Path, kind: str, model: str, threads: int, work: str):
        super().__init__([str(python), __file__, "--serve-peer", kind, "--model", model, "--threads", str(threads),
                          "--work", work], f"peer {kind}")


# ---------------------------------------------------------------- our sides


def train_windows(reader, pairs):
    """One-window model inputs of SQuAD train (question, paragraph) pairs: the static recipe's calibration."""
    import numpy as np

    tok = reader.tokenizer_
    enc = tok([q for q, _ in pairs], [p for _, p in pairs], truncation="only_second", max_length=reader.max_length,
              stride=reader.stride, return_overflowing_tokens=True)
    names = [k for k in tok.model_input_names if k in enc]
    return [{k: np.asarray([enc[k][w]], dtype=np.int64) for k in names} for w in range(len(enc["input_ids"]))]


def our_sides(args, threads, settings):
    """{name: (reader, description)}: every side that runs through our reader."""
    import numpy as np
    import openvino as ov
    import torch

    import hardware
    from hardware.openvino import PRECISION_HINT, compile_for_cpu
    from readers import int8
    from readers.extractive import ExtractiveReader
    from readers.int8 import Int8Model, Int8Recipe

    def reader(dtype, recipe=None):
        return ExtractiveReader(args.model, dtype=dtype, int8_recipe=recipe, num_threads=threads, progress=False,
                                **settings).load()

    import re

    def wanted(name: str) -> bool:  # --sides: a regular expression of side names (the float32 reference always)
        return args.sides is None or re.search(args.sides, name) is not None

    base = reader("float32")
    sides = {"torch float32": (base, "torch, float32 (the reference)")}
    if hardware.cpu_has_native_bf16() and wanted("torch bf16"):
        sides["torch bf16"] = (reader("bfloat16"), "torch, bf16 autocast (auto's choice on this CPU)")
    if wanted("int8 (ours)"):
        sides["int8 (ours)"] = (reader("int8"), "int8 weights per channel, activations per 64-group, FFN output "
                                               "projections float32 (default recipe)")
    for name, recipe, what in (
        ("int8 every layer", Int8Recipe(float_ffn_output=False, validation_questions=0),
         "the default recipe with the FFN output projections in int8 too"),
        ("int8 first layer float", Int8Recipe(float_ffn_output=False, float_layers=(0,), validation_questions=0),
         "every layer int8 but the first"),
        ("int8 group 32", Int8Recipe(activation_group_size=32, validation_questions=0), "activations per 32-group"),
        ("int8 group 128", Int8Recipe(activation_group_size=128, validation_questions=0), "activations per 128-group"),
        ("int8 asym weights", Int8Recipe(weights="int8_asym", validation_questions=0), "asymmetric weights, 64-group"),
        ("int8 weights only", Int8Recipe(activation_group_size=0, validation_questions=0), "int8 weights, float products"),
    ):
        if wanted(name):
            sides[name] = (reader("int8", recipe), what)

    example = {k: np.asarray(v, dtype=np.int64) for k, v in base.tokenizer_(
        ["Which model reads?"] * 2, ["The reader reads this passage."] * 2, return_tensors="np").items()
        if k in base.tokenizer_.model_input_names}
    float_ov = int8.convert(base.model_, example, "bench")

    def ov_side(model, precision, group=0, one_stream=False):
        """Our reader on an OpenVINO model, compiled as the backends compile it (``compile_for_cpu``: the throughput
        hint's streams, each batch's outputs taken as it finishes) or, ``one_stream``, as one stream of every
        thread read batch after batch (the backends' execution before ``hardware.openvino.EXECUTION`` v1)."""
        side = copy.copy(base)
        if one_stream:
            compiled = ov.Core().compile_model(model, "CPU", {
                "INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY",
                "INFERENCE_PRECISION_HINT": PRECISION_HINT[precision], "DYNAMIC_QUANTIZATION_GROUP_SIZE": group})
        else:
            compiled = compile_for_cpu(model, precision, threads, group)
        side.model_, side.dtype_ = Int8Model(compiled, {}), "int8"
        return side

    if args.static and wanted("int8 static (NNCF PTQ)"):
        import logging

        import nncf

        logging.getLogger("nncf").setLevel(logging.WARNING)
        calibration, _ = int8.validation_sample(int8.validation_source(Int8Recipe(validation_questions=300, seed=7))[0],
                                                Int8Recipe(validation_questions=300, seed=7))
        windows = train_windows(base, calibration)
        static = nncf.quantize(float_ov, nncf.Dataset(windows), model_type=nncf.ModelType.TRANSFORMER,
                               subset_size=len(windows))
        sides["int8 static (NNCF PTQ)"] = (ov_side(static, "float32"), f"every layer, ranges from {len(windows)} train windows")
    if wanted("torch dynamic int8"):
        dynamic = copy.copy(base)
        dynamic.model_ = torch.ao.quantization.quantize_dynamic(copy.deepcopy(base.model_), {torch.nn.Linear},
                                                                dtype=torch.qint8)
        sides["torch dynamic int8"] = (dynamic, "torch quantize_dynamic on every nn.Linear, per tensor")
    ov_sides = {"OpenVINO float32": ("float32", False, "no quantization"),
                "OpenVINO float32, one stream": ("float32", True, "no quantization, one stream of every thread, batch "
                                                                  "after batch")}
    if hardware.cpu_has_native_bf16():
        ov_sides.update({"OpenVINO bf16": ("bfloat16", False, "no quantization, bf16 inference precision"),
                         "OpenVINO bf16, one stream": ("bfloat16", True, "no quantization, bf16, one stream of every "
                                                                         "thread, batch after batch")})
    for name, (precision, one_stream, what) in ov_sides.items():
        if wanted(name):
            sides[name] = (ov_side(float_ov, precision, one_stream=one_stream), what)
    return sides


def print_backend_choice(model: str, threads: int) -> None:
    """What ``--reader-backend auto`` reads with on this CPU at ``auto``'s precision, and the check it rests on
    (measured now when this CPU has no record yet; not part of the table's timings)."""
    from readers.extractive import ExtractiveReader

    reader = ExtractiveReader(model, num_threads=threads, progress=False, backend="auto").load()
    info = reader.facts().get("reader_openvino") or {}
    check = info.get("check") or {}
    detail = (f"OpenVINO {check.get('speedup', 0):.2f}x torch on {check.get('questions')} SQuAD train check questions, "
              f"{check.get('identical_percent')}% answers identical to torch float32's" if check else info.get("reason", ""))
    print(f"\nper-CPU choice: --reader-backend auto reads with {reader.backend_} in {reader.dtype_} on this CPU ({detail})")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_reading_arguments(parser, limit=2000, blocks=4)
    parser.add_argument("--peer-batch-sizes", default="1,8", help="the pipelines' batch_size values; each peer's best is kept")
    parser.add_argument("--peers", default="torch,ort-int8,ort-int8-per-channel",
                        help="peers in the bench venv (comma-separated; '' for none)")
    parser.add_argument("--no-static", dest="static", action="store_false", help="leave out the NNCF static recipe")
    parser.add_argument("--sides", default=None, metavar="REGEX",
                        help="only our sides whose names match (torch float32, the reference, always runs)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads, every side (default: all cores)")
    parser.add_argument("--venv", default=str(DEFAULT_VENV), help="bench venv with transformers 4.57.x and optimum-onnx")
    parser.add_argument("--data-dir", default=os.environ.get("QA_DATA_DIR") or str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--plot", default=None, help="PNG of the speed-accuracy frontier")
    parser.add_argument("--json", default=None, help="every side's figures as JSON")
    parser.add_argument("--replot", default=None, metavar="JSON", help="instead: draw --plot from a run's --json")
    parser.add_argument("--sensitivity", type=int, default=None, metavar="N",
                        help="instead: which layers carry the int8 error, on N SQuAD questions (--sensitivity-split)")
    parser.add_argument("--sensitivity-split", choices=("train", "dev"), default="train",
                        help="--sensitivity's questions: SQuAD train outside the int8 validation sample, or dev")
    parser.add_argument("--sensitivity-groups", default=None, metavar="REGEX",
                        help="--sensitivity: only the groups whose label matches (and every layer int8)")
    parser.add_argument("--main-job", type=int, default=None, metavar="N",
                        help="instead: the main job on N ReQA SQuAD dev questions in float32 and int8")
    parser.add_argument("--serve-peer", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--work", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--allow-busy", action="store_true", help="exit 0 on a busy machine (still marked NOT A RESULT)")
    args = parser.parse_args(argv)

    threads = args.threads or len(os.sched_getaffinity(0))
    if args.serve_peer:
        serve_peer(args.serve_peer, args.model, threads, args.work)
        return 0
    if args.replot:
        run = json.loads(Path(args.replot).read_text())
        plot(run["rows"], frontier(run["rows"]), args.plot, f"{run['questions']} SQuAD dev questions, {run['cpu']}, "
             f"{run['threads']} threads")
        return 0

    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("QA_DATA_DIR", args.data_dir)
    if args.main_job:
        return main_job(args, threads)
    if args.sensitivity:
        return sensitivity(args, threads)
    import numpy as np
    import torch

    import _machine
    import hardware
    from eval.answer_metrics import exact_match, f1
    from eval.significance import bootstrap_ci
    from reader_vs_pipeline import load_squad_dev

    torch.set_num_threads(threads)
    guard = _machine.start(threads)
    questions, contexts, golds = load_squad_dev(Path(args.data_dir), args.limit)
    settings = dict(max_length=args.max_length, stride=args.stride, max_answer_tokens=args.max_answer_tokens,
                    max_question_tokens=args.max_question_tokens)
    sides = our_sides(args, threads, settings)
    peers, work = {}, tempfile.mkdtemp(prefix="int8-bench-")
    python = Path(args.venv) / "bin" / "python"
    for kind in [k for k in args.peers.split(",") if k]:
        if not python.exists():
            raise SystemExit(f"error: {python} not found; create the bench venv as bench/README.md says")
        peers[kind] = PeerProcess(python, kind, args.model, threads, work)
    sizes = [int(b) for b in args.peer_batch_sizes.split(",")]
    label = {kind: PEER_LABELS.get(kind, kind) for kind in peers}
    kind_of = {v: k for k, v in label.items()}
    names = list(sides) + [f"{label[kind]} b{b}" for kind in peers for b in sizes]

    warm = slice(0, 16)
    for reader, _ in sides.values():
        reader.read_pairs(questions[warm], contexts[warm])
    for kind, peer in peers.items():
        for b in sizes:
            peer.ask(questions=questions[warm], contexts=contexts[warm], batch_size=b, **settings)

    answers = {name: [""] * len(questions) for name in names}
    seconds = {name: 0.0 for name in names}
    bounds = np.linspace(0, len(questions), args.blocks + 1).astype(int)
    for blk, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
        shift = blk % len(names)
        for name in names[shift:] + names[:shift]:
            if name in sides:
                started = time.perf_counter()
                answers[name][lo:hi] = sides[name][0].read_pairs(questions[lo:hi], contexts[lo:hi]).text
                seconds[name] += time.perf_counter() - started
            else:
                peer_label, b = name.rsplit(" b", 1)
                reply = peers[kind_of[peer_label]].ask(questions=questions[lo:hi], contexts=contexts[lo:hi], batch_size=int(b), **settings)
                seconds[name] += reply["seconds"]
                answers[name][lo:hi] = reply["answers"]
        print(f"block {blk + 1}/{args.blocks}: {hi} questions", file=sys.stderr, flush=True)
    versions = {label[kind]: peer.hello["versions"] for kind, peer in peers.items()}
    for peer in peers.values():
        peer.close()
    for kind in peers:  # each peer at its best batch size
        best = max((f"{label[kind]} b{b}" for b in sizes), key=lambda name: len(questions) / seconds[name])
        for b in sizes:
            if f"{label[kind]} b{b}" != best:
                names.remove(f"{label[kind]} b{b}")

    n = len(questions)
    em = {k: np.array([exact_match(a, g) for a, g in zip(answers[k], golds)], dtype=np.float64) for k in names}
    fs = {k: np.array([f1(a, g) for a, g in zip(answers[k], golds)], dtype=np.float64) for k in names}
    rate = {k: n / seconds[k] for k in names}
    ref = "torch float32"
    rows = []
    for k in names:
        d_em, d_f1 = 100 * (em[k] - em[ref]), 100 * (fs[k] - fs[ref])
        rows.append({"side": k, "peer": k not in sides, "what": sides[k][1] if k in sides else json.dumps(versions[k.rsplit(" b", 1)[0]]),
                     "em": 100 * em[k].mean(), "f1": 100 * fs[k].mean(), "passages_per_s": rate[k],
                     "seconds": seconds[k], "d_em": d_em.mean(), "d_em_ci": bootstrap_ci(d_em, 2000, 13),
                     "d_f1": d_f1.mean(), "d_f1_ci": bootstrap_ci(d_f1, 2000, 13),
                     "identical": 100 * float(np.mean([a.strip() == b.strip() for a, b in zip(answers[k], answers[ref])]))})

    print(f"\nSQuAD v1.1 dev, gold paragraph, {n} questions; model {args.model}; {threads} CPU threads; "
          f"{hardware.cpu_model()}; native bf16: {hardware.cpu_has_native_bf16()}; torch {torch.__version__}; "
          f"peers: {json.dumps(versions)}\n")
    print(f"{'side':<26}{'EM':>7}{'F1':>7}{'p/s':>8}{'x f32':>7}{'dEM [95% CI]':>22}{'dF1 [95% CI]':>22}{'same':>7}")
    for r in rows:
        print(f"{r['side']:<26}{r['em']:>7.2f}{r['f1']:>7.2f}{r['passages_per_s']:>8.1f}"
              f"{r['passages_per_s'] / rate[ref]:>7.2f}{_ci(r['d_em'], r['d_em_ci']):>22}{_ci(r['d_f1'], r['d_f1_ci']):>22}"
              f"{r['identical']:>6.1f}%")
    for r in rows:
        print(f"  {r['side']}: {r['what']}")

    ours = next((r for r in rows if r["side"] == "int8 (ours)"), None)
    if ours is not None:
        bf16 = next((r for r in rows if r["side"] == "torch bf16"), None)
        ort = [r for r in rows if r["side"].startswith("Optimum") and r["em"] >= ours["em"] - 1e-9]
        print("\ngoals (int8 (ours)):")
        print(f"  EM and F1 within 0.5 of float32 (interval inside +-0.5): "
              f"{_yes(max(map(abs, ours['d_em_ci'] + ours['d_f1_ci'])) <= 0.5)} "
              f"(dEM {_ci(ours['d_em'], ours['d_em_ci'])}, dF1 {_ci(ours['d_f1'], ours['d_f1_ci'])})")
        print(f"  >= 97% answers identical to float32: {_yes(ours['identical'] >= 97)} ({ours['identical']:.1f}%)")
        if bf16:
            print(f"  >= 1.3x torch bf16 autocast (native bf16 here): {_yes(ours['passages_per_s'] >= 1.3 * bf16['passages_per_s'])} "
                  f"({ours['passages_per_s'] / bf16['passages_per_s']:.2f}x)")
        else:
            print(f"  >= 1.8x torch float32 (no native bf16 here): {_yes(ours['passages_per_s'] >= 1.8 * rate[ref])} "
                  f"({ours['passages_per_s'] / rate[ref]:.2f}x)")
        for r in [r for r in rows if r["side"].startswith("Optimum")]:
            tag = "" if r in ort else " (its EM is lower than ours: the goal compares at equal or better EM)"
            print(f"  >= 1.3x {r['side']}: {_yes(ours['passages_per_s'] >= 1.3 * r['passages_per_s'])} "
                  f"({ours['passages_per_s'] / r['passages_per_s']:.2f}x){tag}")
    for r in rows:
        one = next((o for o in rows if o["side"] == f"{r['side']}, one stream"), None)
        if one is not None:
            print(f"  {r['side']} on the streams against one stream: {r['passages_per_s'] / one['passages_per_s']:.2f}x "
                  f"({r['passages_per_s']:.1f} against {one['passages_per_s']:.1f} passages/s)")

    front = frontier(rows)
    print("\nspeed-accuracy frontier (no other side is both faster and loses less EM): " + ", ".join(front))
    print_backend_choice(args.model, threads)
    if args.plot:
        plot(rows, front, args.plot, f"{n} SQuAD dev questions, {hardware.cpu_model()}, {threads} threads")
        print(f"plot: {args.plot}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "questions": n, "threads": threads,
                                               "cpu": hardware.cpu_model(), "peers": versions}, indent=1) + "\n")
    return _machine.finish(guard, allow_busy=args.allow_busy)


SENSITIVITY_GROUPS = {
    "embeddings": r".*embeddings.*", "query": r".*attention\.self\.query.*", "key": r".*attention\.self\.key.*",
    "value": r".*attention\.self\.value.*", "attention output": r".*attention\.output\.dense.*",
    "FFN in": r".*intermediate\.dense.*", "FFN out": r".*layer\.\d+\.output\.dense.*", "span head": r".*qa_outputs.*",
}


def sensitivity(args, threads: int) -> int:
    """Identical answers and EM with one group of layers left in float32, everything else int8 (the default
    recipe's weights and activation groups), on SQuAD *train* questions outside the recipe's validation sample
    (``--sensitivity-split dev``: spread over dev instead)."""
    import re

    import nncf
    import numpy as np

    import _machine
    import hardware
    from eval.answer_metrics import exact_match
    from reader_vs_pipeline import load_squad_dev
    from readers import int8
    from readers.extractive import ExtractiveReader
    from readers.int8 import Int8Model, Int8Recipe

    guard = _machine.start(threads)
    recipe = Int8Recipe()
    if args.sensitivity_split == "train":
        held = Int8Recipe(validation_questions=recipe.validation_questions + args.sensitivity, seed=recipe.seed)
        pairs, golds = int8.validation_sample(int8.validation_source(held, args.data_dir)[0], held)
        pairs, golds = pairs[recipe.validation_questions:], golds[recipe.validation_questions:]
        questions, contexts = [q for q, _ in pairs], [c for _, c in pairs]
        where = f"{len(questions)} SQuAD train questions outside the int8 validation sample"
    else:
        questions, contexts, golds = load_squad_dev(Path(args.data_dir), args.sensitivity)
        where = f"{len(questions)} SQuAD dev questions"
    base = ExtractiveReader(args.model, dtype="float32", num_threads=threads, progress=False).load()
    reference = base.read_pairs(questions, contexts).text
    example = {k: np.asarray(v, dtype=np.int64) for k, v in base.tokenizer_(
        ["Which model reads?"] * 2, ["The reader reads this passage."] * 2, return_tensors="np").items()
        if k in base.tokenizer_.model_input_names}
    float_ov = int8.convert(base.model_, example, "bench")
    names = [op.get_friendly_name() for op in float_ov.get_ordered_ops()]
    layers = sorted({int(m.group(1)) for n in names for m in [re.search(r"\.layer\.(\d+)\.", n)] if m})
    groups = {"none (every layer int8)": [], **{k: [v] for k, v in SENSITIVITY_GROUPS.items()},
              **{f"layer {i}": [int8.layer_pattern(i)] for i in layers},
              **{f"FFN out of layer {i}": [rf".*\.layer\.{i}\.output\.dense.*"] for i in layers},
              "layers 0 and 1": [int8.layer_pattern(0), int8.layer_pattern(1)],
              f"layers 0 and {layers[-1]}": [int8.layer_pattern(0), int8.layer_pattern(layers[-1])],
              "layer 0 + span head": [int8.layer_pattern(0), SENSITIVITY_GROUPS["span head"]]}
    if args.sensitivity_groups:
        groups = {k: v for k, v in groups.items() if not v or re.search(args.sensitivity_groups, k)}
    rows = []
    for label, patterns in groups.items():
        scope = nncf.IgnoredScope(patterns=patterns, validate=False) if patterns else nncf.IgnoredScope()
        model = nncf.compress_weights(float_ov.clone(), mode=nncf.CompressWeightsMode.INT8_SYM, ignored_scope=scope)
        side = copy.copy(base)
        side.model_, side.dtype_ = Int8Model(int8.compile_model(model, recipe, threads), {}), "int8"
        side.read_pairs(questions[:8], contexts[:8])
        started = time.perf_counter()
        answers = side.read_pairs(questions, contexts).text
        seconds = time.perf_counter() - started
        kept = sum(1 for n in names if any(re.fullmatch(p, n) for p in patterns) and n.endswith(("MatMul", "Gather")))
        same = 100 * float(np.mean([a == b for a, b in zip(answers, reference)]))
        em = 100 * float(np.mean([exact_match(a, g) for a, g in zip(answers, golds)]))
        rows.append((label, kept, same, em, len(questions) / seconds))
        print(f"{label}: {same:.1f}% identical", file=sys.stderr, flush=True)
    em32 = 100 * float(np.mean([exact_match(a, g) for a, g in zip(reference, golds)]))
    print(f"\nwhich layers carry the int8 error: {where} (gold paragraphs), every layer int8 but one group left in "
          f"float32; float32 EM {em32:.2f}; {hardware.cpu_model()}, {threads} threads\n")
    print(f"{'left in float32':<28}{'ops':>5}{'identical':>11}{'EM':>8}{'p/s':>8}")
    for label, kept, same, em, rate in rows:
        print(f"{label:<28}{kept:>5}{same:>10.1f}%{em:>8.2f}{rate:>8.1f}")
    return _machine.finish(guard, allow_busy=args.allow_busy)


def main_job(args, threads: int) -> int:
    """The main job in float32 and int8 (ABBA order); the reading stage's seconds and the metrics of each."""
    import _machine
    import hardware

    guard = _machine.start(threads)
    work = Path(tempfile.mkdtemp(prefix="int8-main-job-"))
    runs: dict[str, list[dict]] = {"float32": [], "int8": []}
    for i, dtype in enumerate(["float32", "int8", "int8", "float32"]):
        out = work / f"{i}-{dtype}"
        command = [sys.executable, "-m", "pipeline.run", "--dataset", "reqa_squad", "--split", "dev", "--limit",
                   str(args.main_job), "--reader", args.model, "--reader-dtype", dtype, "--out", str(out)]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"error: {' '.join(command)} failed:\n{done.stderr[-2000:]}")
        manifest = json.loads((out / "manifest.json").read_text())
        metrics = json.loads((out / "metrics.json").read_text())["reading"]
        runs[dtype].append({"read_s": manifest["timings_s"]["read"], "wall_s": sum(manifest["timings_s"].values()),
                            "metrics": {k: v for k, v in metrics.items() if isinstance(v, float)},
                            "passages_read": manifest["reading"].get("passages_read")})
        print(f"{dtype}: reading {runs[dtype][-1]['read_s']:.1f} s", file=sys.stderr, flush=True)
    read = {d: sum(r["read_s"] for r in rs) / len(rs) for d, rs in runs.items()}
    print(f"\nmain job: python -m pipeline.run --dataset reqa_squad --split dev --limit {args.main_job} --reader "
          f"{args.model} --reader-dtype float32|int8; {hardware.cpu_model()}, {threads} threads\n")
    print(f"{'dtype':<10}{'reading s (2 runs)':>24}{'mean':>8}{'passages read':>15}")
    for d, rs in runs.items():
        seconds = ", ".join(f"{r['read_s']:.1f}" for r in rs)
        print(f"{d:<10}{seconds:>24}{read[d]:>8.1f}{rs[0]['passages_read']:>15}")
    m32, m8 = runs["float32"][0]["metrics"], runs["int8"][0]["metrics"]
    deltas = {k: m8[k] - m32[k] for k in m32 if k in m8}
    worst = max(deltas, key=lambda k: abs(deltas[k]))
    ratio = read["int8"] / read["float32"]
    print(f"\nreading int8 / float32: {ratio:.2f} (goal <= 0.55: {_yes(ratio <= 0.55)})")
    print("metric differences (int8 - float32): " + ", ".join(f"{k} {v:+.4f}" for k, v in deltas.items()))
    print(f"largest |difference| {abs(deltas[worst]):.4f} ({worst}; goal <= 0.01: {_yes(abs(deltas[worst]) <= 0.01 + 1e-9)})")
    return _machine.finish(guard, allow_busy=args.allow_busy)


def _ci(mean, ci) -> str:
    return f"{mean:+.2f} [{ci[0]:+.2f}, {ci[1]:+.2f}]"


def _yes(ok: bool) -> str:
    return "yes" if ok else "NO"


def frontier(rows) -> list[str]:
    """Sides no other side beats on both speed and EM loss (ties kept)."""
    return [r["side"] for r in rows if not any(
        o["passages_per_s"] > r["passages_per_s"] and o["d_em"] >= r["d_em"]
        or o["passages_per_s"] >= r["passages_per_s"] and o["d_em"] > r["d_em"] for o in rows)]


def plot(rows, front, path, title) -> None:
    """Passages/s against EM loss (95% CI) and against the share of answers identical to float32's; our sides
    as circles (ours in red), peers as grey squares, the frontier dashed; points numbered, names in the legend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7.5), sharex=True)
    handles = []
    for i, r in enumerate(rows, 1):
        color = "tab:red" if r["side"] == "int8 (ours)" else ("tab:gray" if r.get("peer") else "tab:blue")
        marker = "s" if r.get("peer") else "o"
        top.errorbar(r["passages_per_s"], -r["d_em"], yerr=[[max(r["d_em_ci"][1] - r["d_em"], 0)],
                     [max(r["d_em"] - r["d_em_ci"][0], 0)]], fmt=marker, color=color, capsize=2, markersize=5)
        bottom.plot(r["passages_per_s"], r["identical"], marker, color=color, markersize=5)
        for ax, y in ((top, -r["d_em"]), (bottom, r["identical"])):
            ax.annotate(str(i), (r["passages_per_s"], y), textcoords="offset points", xytext=(3, 3), fontsize=7)
        handles.append(Line2D([], [], marker=marker, color=color, linestyle="", label=f"{i} {r['side']}"))
    pts = sorted((r["passages_per_s"], -r["d_em"]) for r in rows if r["side"] in front)
    top.plot([p[0] for p in pts], [p[1] for p in pts], "--", color="black", linewidth=0.8, alpha=0.6)
    top.axhline(0.5, color="tab:red", linewidth=0.6, linestyle=":")
    bottom.axhline(97, color="tab:red", linewidth=0.6, linestyle=":")
    top.set_ylabel("EM loss vs torch float32\n(points, 95% CI; dotted: 0.5)")
    bottom.set_ylabel("answers identical to float32 (%)\n(dotted: 97%)")
    bottom.set_xlabel("passages per second (gold paragraphs)")
    top.set_title(title, fontsize=9)
    fig.legend(handles=handles, loc="center right", fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0, 0.74, 1))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)


if __name__ == "__main__":
    sys.exit(main())
