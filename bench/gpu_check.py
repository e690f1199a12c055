"""One table of what this code does on a device: reader, encoder, FAISS and a main job.

Run through ``bench/gpu_check.sh`` (which first runs the CUDA tests of
tests/test_device.py).  On a GPU machine (``--device cuda``, the default when
CUDA is present) it measures, in one run and with no network:

* reader passages/s on SQuAD dev gold paragraphs at float32, bf16 and fp16
  autocast, against ``transformers.pipeline("question-answering")`` on the same
  device at its best batch size when a transformers 4.x is importable (the
  QA pipeline is gone from 5.x; gpu_check.sh builds a venv from carried wheels
  in ``bench/wheels/`` when they are there), EM/F1 beside each;
* dense encoder sentences/s, ours (``retrievers.encoder.encode_texts``:
  length-sorted token-budget batches) vs ``SentenceTransformer.encode``;
* FAISS flat inner-product search on the GPU (when ``faiss`` has GPUs) vs CPU;
* a generative reader (SmolLM2-135M-Instruct, bf16 on CUDA): prompts/s, prompt and generated tokens/s and
  peak GPU memory at n = 5 and n = 10 passages (each question's gold paragraph first, then other questions'),
  and every n = 0..10 from the shared prompt prefix against the single n = 10 read;
* a main job through ``pipeline.run`` (dense retrieval, top-5, the reader) with
  its wall time, peak RSS and peak GPU memory from the run's manifest.

``--device cpu --quick`` runs the same stages at small sizes so CI keeps the
script working on machines without a GPU.  Every stage that cannot run says why
in the table instead of failing the whole check.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import _machine  # noqa: E402

SHARED = ROOT.parent / "shared"
READER = SHARED / "models" / "minilm-squad-reader"
QUICK_QUESTIONS = 10  # the CI form's main job: enough to run every stage of pipeline.run, not a figure to quote


def squad_items(data_dir: Path, n: int):
    from data.squad import load_squad_json

    squad = load_squad_json(data_dir / "squad" / "dev-v1.1.json.zip")
    rows = [(qa["question"], p["context"], [a["text"] for a in qa["answers"]])
            for a in squad["data"] for p in a["paragraphs"] for qa in p["qas"]]
    return rows[:: max(1, len(rows) // n)][:n]


def score(answers, items):
    from eval.answer_metrics import exact_match, f1

    em = 100 * sum(exact_match(a, g) for a, (_, _, g) in zip(answers, items)) / len(items)
    return em, 100 * sum(f1(a, g) for a, (_, _, g) in zip(answers, items)) / len(items)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def timed_passes(device: str, fn):
    """((first, second) seconds, result) of two runs of ``fn``: the first pays one-off costs (kernel loading,
    per-shape set-up), the second is what a long run sees."""
    secs = []
    for _ in range(2):
        sync(device)
        t0 = time.perf_counter()
        out = fn()
        sync(device)
        secs.append(time.perf_counter() - t0)
    return tuple(secs), out


def reader_rows(device: str, items, dtypes, pipeline_python: str | None, pipeline_batches):
    from readers.extractive import ExtractiveReader

    qs, ps = [i[0] for i in items], [i[1] for i in items]
    rows = []
    for dtype in dtypes:
        try:
            reader = ExtractiveReader(str(READER), device=device, dtype=dtype, progress=False).load()
            (first, sec), reads = timed_passes(device, lambda: reader.read_pairs(qs, ps))
            em, f = score(reads.text, items)
            rows.append((f"reader ours {dtype}", f"{len(qs) / sec:.1f} passages/s",
                         f"EM {em:.2f} F1 {f:.2f}; first pass {len(qs) / first:.1f}/s"))
        except Exception as err:  # noqa: BLE001 - a stage that cannot run says why
            rows.append((f"reader ours {dtype}", "skipped", f"{type(err).__name__}: {str(err)[:80]}"))
    if pipeline_python is None:
        rows.append(("reader HF pipeline", "skipped", "no transformers 4.x (5.x has no QA pipeline; see bench/gpu_check.sh)"))
        return rows
    request = {"questions": qs, "contexts": ps, "batches": pipeline_batches, "device": device}
    proc = subprocess.run([pipeline_python, __file__, "--serve-pipeline"], input=json.dumps(request), capture_output=True,
                          text=True, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    if proc.returncode != 0:
        rows.append(("reader HF pipeline", "skipped", proc.stderr.strip().splitlines()[-1][:100] if proc.stderr.strip() else "failed"))
        return rows
    for b, (sec, answers) in json.loads(proc.stdout.strip().splitlines()[-1]).items():
        em, f = score(answers, items)
        rows.append((f"reader HF pipeline b{b}", f"{len(qs) / sec:.1f} passages/s", f"EM {em:.2f} F1 {f:.2f}"))
    return rows


def serve_pipeline() -> None:
    """(bench venv with transformers 4.x) time the QA pipeline at each batch size; print {batch: [seconds, answers]}."""
    import torch
    import transformers

    req = json.loads(sys.stdin.read())
    dev = 0 if req["device"].startswith("cuda") else -1
    qa = transformers.pipeline("question-answering", model=str(READER), tokenizer=str(READER), device=dev)
    out = {}
    for b in req["batches"]:
        qa(question=req["questions"][:8], context=req["contexts"][:8], batch_size=b)
        if dev >= 0:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        res = qa(question=req["questions"], context=req["contexts"], batch_size=b, max_answer_len=30, max_question_len=64)
        if dev >= 0:
            torch.cuda.synchronize()
        res = [res] if isinstance(res, dict) else res
        out[str(b)] = [time.perf_counter() - t0, [r["answer"] for r in res]]
    print(json.dumps(out))


def encoder_rows(device: str, n: int):
    import numpy as np

    from retrievers.encoder import encode_texts, load_sentence_encoder

    try:
        model = load_sentence_encoder(None, device)
    except Exception as err:  # noqa: BLE001
        return [("encoder", "skipped", f"{type(err).__name__}: {str(err)[:80]}")]
    items = squad_items(Path(os.environ["QA_DATA_DIR"]), n)
    texts = [s for _, c, _ in items for s in c.split(". ")][:n]
    (_, t_ours), ours = timed_passes(device, lambda: encode_texts(model, texts, show_progress=False))
    (_, t_ref), ref = timed_passes(device, lambda: model.encode(texts, batch_size=64, normalize_embeddings=True,
                                                                convert_to_numpy=True))
    diff = float(np.abs(ours - ref).max())
    return [("encoder ours (token budget)", f"{len(texts) / t_ours:.1f} sentences/s", f"max |diff| vs ST {diff:.1e}"),
            ("encoder SentenceTransformer b64", f"{len(texts) / t_ref:.1f} sentences/s", f"ours / ST {t_ref / t_ours:.2f}x")]


def faiss_rows(n: int, d: int = 384, q: int = 1000, k: int = 100):
    try:
        import faiss
        import numpy as np
    except ImportError as err:
        return [("FAISS", "skipped", str(err))]
    rng = np.random.default_rng(0)
    xb = rng.standard_normal((n, d), dtype=np.float32)
    xq = rng.standard_normal((q, d), dtype=np.float32)
    cpu = faiss.IndexFlatIP(d)
    cpu.add(xb)
    t0 = time.perf_counter()
    _, ids_cpu = cpu.search(xq, k)
    rows = [("FAISS flat CPU", f"{q / (time.perf_counter() - t0):.0f} queries/s", f"{n:,} x {d} vectors, k={k}")]
    gpus = faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0
    if not gpus:
        rows.append(("FAISS flat GPU", "skipped", "faiss has no GPU support here (install faiss-gpu)"))
        return rows
    gpu = faiss.index_cpu_to_all_gpus(cpu)
    gpu.search(xq[:10], k)
    t0 = time.perf_counter()
    _, ids_gpu = gpu.search(xq, k)
    agree = float((ids_gpu[:, :10] == ids_cpu[:, :10]).mean())
    rows.append(("FAISS flat GPU", f"{q / (time.perf_counter() - t0):.0f} queries/s", f"top-10 agreement with CPU {agree:.3f}"))
    return rows


GENERATIVE_MODEL = "smollm2-135m-instruct"


def generative_rows(device: str, items, ns: tuple[int, int] = (5, 10), max_new_tokens: int = 16):
    """A generative reader's throughput at ``ns`` passages (the gold paragraph first, then the next questions'), and
    the n-sweep 0..ns[-1] against the ns[-1] read; each timed on its second pass, peak GPU memory reset before each."""
    import numpy as np
    import torch

    from eval.answer_metrics import has_answer
    from readers.generative import GenerativeReader

    try:
        reader = GenerativeReader(GENERATIVE_MODEL, max_new_tokens=max_new_tokens, device=device, progress=False).load()
    except Exception as err:  # noqa: BLE001 - a stage that cannot run says why
        return [("generative", "skipped", f"{type(err).__name__}: {str(err)[:80]}")]
    cuda = device.startswith("cuda")
    qs, golds = [i[0] for i in items], [i[2] for i in items]
    contexts = [i[1] for i in items]

    def passages(n):
        return [[contexts[(q + k) % len(contexts)] for k in range(n)] for q in range(len(qs))]

    def peak_gpu() -> str:
        return f"peak GPU {torch.cuda.max_memory_allocated() / 2**20:,.0f} MiB" if cuda else "CPU"

    rows, seconds = [], {}
    label = f"generative {reader.dtype_}"
    for n in ns:
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        (_, sec), out = timed_passes(device, lambda: reader.generate(qs, passages(n)))
        seconds[n] = sec
        hit = 100 * np.mean([has_answer(a, g) for a, g in zip(out.text, golds)])
        rows.append((f"{label} n={n}", f"{len(qs) / sec:.1f} prompts/s",
                     f"{out.prompt_tokens.sum() / sec:,.0f} prompt + {out.generated_tokens.sum() / sec:,.0f} generated "
                     f"tokens/s; has answer {hit:.1f}%; {peak_gpu()}"))
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    top = ns[-1]
    (_, sec), grid = timed_passes(device, lambda: reader.generate_every_n(qs, passages(top), top))
    same = np.mean([a == b for a, b in zip(grid[top].text, out.text)])
    rows.append((f"{label} every n=0..{top}", f"{sec / seconds[top]:.2f}x the n={top} read",
                 f"{(top + 1) * len(qs) / sec:.1f} prompts/s; n={top} answers identical {100 * same:.0f}%; {peak_gpu()}"))
    return rows


def main_job_rows(device: str, quick: bool):
    data = Path(os.environ["QA_DATA_DIR"])
    with tempfile.TemporaryDirectory() as tmp:
        if quick:  # the first 2 of XQuAD's 48 articles: a 10-paragraph corpus, so CI does not wait on encoding all 240
            xquad = json.loads((data / "xquad" / "xquad.en.json").read_text(encoding="utf-8"))
            part = Path(tmp) / "xquad.en.first2.json"
            part.write_text(json.dumps({**xquad, "data": xquad["data"][:2]}), encoding="utf-8")
            dataset = ["--dataset", f"squad_file:{part}", "--limit", str(QUICK_QUESTIONS)]
        else:
            dataset = ["--dataset", "reqa_squad", "--split", "dev", "--limit", "1000"]
        cmd = [sys.executable, "-m", "pipeline.run", *dataset, "--retriever", "dense", "--depth", "100", "--selector", "top:5",
               "--reader", str(READER), "--device", device, "--out", str(Path(tmp) / "run")]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["failed"])[-1]
            return [("main job", "failed", last[:100])]
        manifest = json.loads((Path(tmp) / "run" / "manifest.json").read_text())
        metrics = json.loads((Path(tmp) / "run" / "metrics.json").read_text())
    answers = metrics.get("reading", metrics)
    em, f = answers.get("em"), answers.get("f1")
    scale = 100 if (em is not None and em <= 1.0) else 1  # fractions since issue 14; percent before
    gpu = manifest.get("host", {}).get("peak_gpu_mb")
    what = f"xquad en 2 articles, {QUICK_QUESTIONS} q" if quick else "ReQA SQuAD dev, 1,000 q"
    return [("main job " + what, f"{wall:.0f} s wall", f"EM {em * scale:.2f} F1 {f * scale:.2f}; peak RSS "
             f"{manifest.get('peak_rss_mb', 0):.0f} MB; peak GPU {'-' if gpu is None else f'{gpu:.0f} MB'}")]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default=None, help="cuda (default when present) or cpu")
    parser.add_argument("--quick", action="store_true", help="CI-sized stages (implied by --device cpu)")
    parser.add_argument("--pipeline-python", default=None, help="a python with transformers 4.x for the HF pipeline side")
    parser.add_argument("--serve-pipeline", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--allow-busy", action="store_true")
    args = parser.parse_args(argv)
    if args.serve_pipeline:
        serve_pipeline()
        return 0
    os.environ.setdefault("QA_DATA_DIR", str(SHARED / "data"))
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    quick = args.quick or device == "cpu"
    guard = _machine.start(torch.get_num_threads())
    if device.startswith("cuda"):
        dtypes = ["float32", "bfloat16", "float16"]
        n_read, n_enc, n_vec = 2000, 20000, 1_000_000
    else:
        dtypes = ["float32"] + (["bfloat16"] if _machine.hardware.cpu_has_native_bf16() else [])
        n_read, n_enc, n_vec = 8, 48, 20_000
    items = squad_items(Path(os.environ["QA_DATA_DIR"]), n_read)
    rows = []
    for name, stage in (
        ("reader", lambda: reader_rows(device, items, dtypes, args.pipeline_python, [1, 8, 32] if not quick else [1, 4])),
        ("encoder", lambda: encoder_rows(device, n_enc)),
        ("faiss", lambda: faiss_rows(n_vec)),
        ("generative", lambda: generative_rows(device, items[:2], (1, 2)) if quick else generative_rows(device, items[:512])),
        ("main job", lambda: main_job_rows(device, quick)),
    ):
        try:
            rows += stage()
        except Exception:  # noqa: BLE001
            rows.append((name, "failed", traceback.format_exc().strip().splitlines()[-1][:100]))
    gpu = torch.cuda.get_device_name(0) if device.startswith("cuda") else "none"
    print(f"\ngpu_check: device {device} (GPU: {gpu}), torch {torch.__version__}, {'quick' if quick else 'full'} sizes; "
          f"{len(items)} reader passages")
    print(f"| {'stage':<34} | {'result':<22} | {'detail':<60} |")
    print(f"|{'-' * 36}|{'-' * 24}|{'-' * 62}|")
    for stage, result, detail in rows:
        print(f"| {stage:<34} | {result:<22} | {detail:<60} |")
    failed = [r for r in rows if r[1] == "failed"]
    rc = _machine.finish(guard, allow_busy=args.allow_busy or quick)
    return 1 if failed else rc


if __name__ == "__main__":
    sys.exit(main())
