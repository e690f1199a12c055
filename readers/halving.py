"""Reading with CUDA out-of-memory recovery: halve the reader's batch and retry.

Shared by the local engine (:mod:`pipeline.engine`) and the Ray actors
(:mod:`pipeline.ray_engine`), so neither driver imports the other.
"""

from __future__ import annotations

from data.errors import UserError
from hardware.device import is_out_of_memory, release_accelerator_memory, warn_out_of_memory


def read_pairs_halving(reader, questions: list[str], passages: list[str], cache=None):
    """``reader.read_pairs``; on CUDA out-of-memory the batch is halved and the read retried.

    ``reader.batch_size`` (and ``max_batch_tokens``, kept >= ``max_length``)
    stay halved for the rest of the run; the run says so once.  With a cache,
    the chunks finished before the error are not read again.
    """
    while True:
        try:
            return reader.read_pairs(questions, passages, cache=cache)
        except Exception as err:
            if not is_out_of_memory(err):
                raise
            release_accelerator_memory()
            windows, tokens = reader.batch_shape(getattr(reader, "device_", reader.device))
            if windows <= 1:
                raise UserError(
                    "reader: out of accelerator memory with a batch of one window (use --device cpu or a smaller --max-length)"
                ) from None
            reader.batch_size = max(1, windows // 2)
            if tokens is not None:
                reader.max_batch_tokens = max(int(reader.max_length), tokens // 2)
            warn_out_of_memory("reader", reader.batch_size)
