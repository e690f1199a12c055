"""OpenVINO models converted from torch ones, cached per checkpoint, settings and CPU.

The machinery the OpenVINO backends share (the extractive reader's float and int8 models,
:mod:`readers.openvino_backend`, :mod:`readers.int8`; the dense encoders',
:mod:`retrievers.encoders.openvino`): converting a torch module (one clear line when it cannot be), cache
entries that appear whole or not at all with their weights' CRC-32 checked on every load, the CPU a measured
choice belongs to, and the held-out SQuAD *train* sample every conversion is checked on.
"""

from __future__ import annotations

import json
import os
import shutil
import zlib
from pathlib import Path
from typing import Callable

import numpy as np

from data.errors import UserError
from data.io import cache_dir, discard_directory, entry_lock, os_reason, warn

PRECISION_HINT = {"float32": "f32", "bfloat16": "bf16"}


def cpu_identity() -> str:
    """The CPU a measured choice belongs to: model name and the instruction-set flags that change a backend's speed."""
    import hardware

    return f"{hardware.cpu_model()}|{','.join(hardware.cpu_flags_of_interest())}"


def validation_source(recipe, data_dir=None) -> tuple[Path | None, str]:
    """(the SQuAD train file the validation sample is drawn from, the sample's digest); ``(None, "none")`` when
    there is none at hand or the recipe asks for no validation."""
    from data.io import remembered_sha256_file
    from data.locations import find_local
    from data.squad import SQUAD_FILES

    path = find_local(data_dir, SQUAD_FILES["train"]) if recipe.validation_questions else None
    if path is None:
        return None, "none"
    return path, f"{remembered_sha256_file(path)}:{recipe.validation_questions}:{recipe.seed}"


def validation_sample(path: Path | None, recipe):
    """(pairs, gold answers): ``recipe.validation_questions`` (question, paragraph) pairs of the SQuAD train file
    ``path``, drawn with ``recipe.seed`` (none without a file)."""
    from data.squad import load_squad_json

    if path is None:
        return [], []
    squad = load_squad_json(path)
    qas = [(qa, par["context"]) for art in squad["data"] for par in art["paragraphs"] for qa in par["qas"]]
    order = np.random.default_rng(recipe.seed).permutation(len(qas))[:recipe.validation_questions]
    return [(qas[i][0]["question"], qas[i][1]) for i in order], [[a["text"] for a in qas[i][0]["answers"]] for i in order]


def convert(torch_model, example_inputs: dict, label: str = "", what: str = "OpenVINO", hint: str = ""):
    """The OpenVINO model of a torch module traced with ``example_inputs`` (numpy arrays by input name); one clear
    line, ``what: cannot convert 'label' (Class) to OpenVINO: ...hint``, when it cannot be converted."""
    import openvino as ov
    import torch

    example = {k: torch.from_numpy(np.asarray(v)) for k, v in example_inputs.items()}
    try:
        return ov.convert_model(torch_model, example_input=example)
    except Exception as err:  # the converter raises many types; the first line names what it could not trace
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise UserError(f"{what}: cannot convert '{label}' ({type(torch_model).__name__}) to OpenVINO: "
                        f"{first}{hint}") from None


def cached_entry(root: str, key: str, what: str, build: Callable[[Path], None], load: Callable[[Path], object]):
    """``load(entry)`` of the cache entry ``root/key``, built first by ``build(staging)`` when missing or damaged
    (``load`` raises :class:`DamagedEntry` for a damaged one: removed, rebuilt, one warning line).  The entry
    appears whole or not at all (built in a staging directory, then renamed), under a lock between processes."""
    entry = cache_dir(root) / key
    with entry_lock(entry, what):
        if entry.is_dir():
            try:
                return load(entry)
            except DamagedEntry as err:
                warn(f"{entry}: cached {what} is damaged ({err}); removed and rebuilt")
                discard_directory(entry, what)
        staging = entry.parent / f".staging-{key}-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        try:
            staging.mkdir(parents=True)
            build(staging)
            os.replace(staging, entry)
        except OSError as err:
            shutil.rmtree(staging, ignore_errors=True)
            raise UserError(f"{entry}: cannot write the {what} ({os_reason(err)})") from None
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return load(entry)


class DamagedEntry(Exception):
    pass


def read_entry(entry: Path) -> tuple[dict, object | None]:
    """(info.json, the OpenVINO model or None when the entry holds none) of an entry, its weights' CRC-32 checked."""
    import openvino as ov

    try:
        info = json.loads((entry / "info.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise DamagedEntry(f"info.json unreadable: {type(err).__name__}") from None
    if not (entry / "model.xml").exists() and "weights_bytes" not in info:
        return info, None
    try:
        weights = (entry / "model.bin").read_bytes()
    except OSError as err:
        raise DamagedEntry(f"model.bin unreadable: {type(err).__name__}") from None
    crc = zlib.crc32(weights)
    if len(weights) != info.get("weights_bytes") or crc != info.get("weights_crc32"):
        raise DamagedEntry(f"model.bin has {len(weights)} bytes, CRC-32 {crc:08x}; its build recorded "
                           f"{info.get('weights_bytes')} bytes, {info.get('weights_crc32', 0):08x}")
    try:
        model = ov.Core().read_model(str(entry / "model.xml"), str(entry / "model.bin"))
    except RuntimeError as err:
        raise DamagedEntry(f"model.xml unreadable: {str(err).splitlines()[0][:120]}") from None
    return info, model


def build_checked(staging: Path, info: dict, module, example_inputs: dict, label: str, what: str, fallback: str,
                  measure: Callable[[object], dict]) -> None:
    """Convert ``module``, measure it (``measure(converted)``: the check and the choice, merged into ``info``) and save
    both in ``staging``.  A module the converter cannot trace is saved as a torch choice after one line,
    ``note: <why>; <fallback>``."""
    import sys

    try:
        converted = convert(module, example_inputs, label, what=what)
    except UserError as err:
        print(f"note: {err}; {fallback}", file=sys.stderr)
        save_entry(staging, None, {**info, "chosen": "torch", "reason": str(err)})
        return
    info.update(measure(converted))
    save_entry(staging, converted, info)


def save_entry(staging: Path, model, info: dict) -> None:
    """Write ``model`` (when not None) and ``info`` into a staging directory, the weights' size and CRC-32 recorded."""
    import openvino as ov

    if model is not None:
        ov.save_model(model, str(staging / "model.xml"), compress_to_fp16=False)
        weights = (staging / "model.bin").read_bytes()
        info = {**info, "weights_bytes": len(weights), "weights_crc32": zlib.crc32(weights)}
    (staging / "info.json").write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")


EXECUTION = "throughput-streams-v1"  # how compiled models run; part of every cache key of what they compute


def compile_for_cpu(model, precision: str, threads: int, activation_group_size: int = 0):
    """``model`` compiled for this CPU at ``precision`` (``float32`` or ``bfloat16``) on ``threads`` threads, split
    into the streams OpenVINO's throughput hint picks (on 2 threads: two single-thread streams, which
    :class:`BatchRunner` keeps busy at once: 1.28x one two-thread stream on the reader's batches on the 2-core
    Intel Xeon, ``bench/reader_int8.py``'s "one stream" sides), ``activation_group_size``: OpenVINO's dynamic int8 quantization of activations (0: products
    in float)."""
    import openvino as ov

    return ov.Core().compile_model(model, "CPU", {
        "INFERENCE_NUM_THREADS": int(threads), "PERFORMANCE_HINT": "THROUGHPUT",
        "INFERENCE_PRECISION_HINT": PRECISION_HINT[precision], "DYNAMIC_QUANTIZATION_GROUP_SIZE": int(activation_group_size),
    })


class BatchRunner:
    """Runs batches on every stream of a compiled model at once and hands back each batch's outputs as it finishes.

    ``run(batches)`` takes ``(tag, inputs)`` pairs (``inputs``: name -> numpy array) and yields ``(tag, outputs)``
    (the model's outputs as numpy arrays, copied) in the order they finish: while the caller works on one batch's
    outputs (Python between forward passes), the streams compute the batches queued.  A failed inference is raised
    in the caller.
    """

    def __init__(self, compiled):
        import openvino as ov

        self.compiled = compiled
        self.names = [port.get_any_name() for port in compiled.inputs]
        self.outputs = len(compiled.outputs)
        # two requests per stream: a stream that finishes finds the next batch queued instead of waiting for the
        # caller to decode the last one (reading 3,000 questions: 22.2 s against 23.1 s with one per stream)
        requests = 2 * max(1, int(compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")))
        self._queue = ov.AsyncInferQueue(compiled, requests)
        self._queue.set_callback(self._finished)
        self._done: list = []
        self._error: BaseException | None = None

    def _finished(self, request, tag) -> None:
        try:
            self._done.append((tag, [np.array(request.get_output_tensor(i).data) for i in range(self.outputs)]))
        except BaseException as err:  # raised in the caller's thread
            self._error = err

    def _drain(self):
        if self._error is not None:
            err, self._error = self._error, None
            raise err
        while self._done:
            yield self._done.pop(0)

    def run(self, batches):
        try:
            for tag, inputs in batches:
                feed = {name: np.ascontiguousarray(inputs[name]) for name in self.names if name in inputs}
                self._queue.start_async(feed, tag)  # waits for a free request
                yield from self._drain()
            self._queue.wait_all()
            yield from self._drain()
        finally:
            self._queue.wait_all()
            self._done.clear()
