"""Key-value caches for the generative reader's decoding: room reserved up front instead of a copy per token.

transformers' :class:`~transformers.DynamicCache` grows each layer's keys and values by ``torch.cat`` at every
generated token, so a step copies the whole cache (rows x prompt length x layers).  At the reader's shapes
(SmolLM2-135M, 11 rows of ~2,100 tokens in an n-sweep) those copies were 28% of the decoding time on the CPU.
:class:`RoomyLayer` keeps each layer in a buffer with room for the tokens still to come and writes new positions
in place; attention reads a view of the filled part.  The values are the same tensors ``DynamicCache`` would
hold, so answers do not change (tests: prefix reuse and fresh prompts equal in float32).

Only full-attention layers are made this way (a checkpoint with sliding-window layers keeps transformers' own
cache for fresh prompts).
"""

from __future__ import annotations


def _layer_class():
    from transformers.cache_utils import DynamicLayer

    class RoomyLayer(DynamicLayer):
        """A :class:`~transformers.cache_utils.DynamicLayer` whose keys and values are views of a buffer with
        ``room`` positions to spare; ``update`` writes in place, and grows the buffer (doubling the room) only when
        it is full."""

        def __init__(self, room: int):
            super().__init__()
            self.room = int(room)
            self._keys = self._values = None

        def _allocate(self, keys, values, extra: int) -> None:
            rows, heads, length, dim = keys.shape
            self._keys = keys.new_empty((rows, heads, length + extra, dim))
            self._values = values.new_empty((rows, heads, length + extra, values.shape[-1]))
            self._keys[:, :, :length] = keys
            self._values[:, :, :length] = values
            self.keys, self.values = self._keys[:, :, :length], self._values[:, :, :length]

        def adopt(self, keys, values, length: int) -> "RoomyLayer":
            """Take ``keys`` / ``values`` buffers whose first ``length`` positions are filled (no copy)."""
            self.device, self.dtype = keys.device, keys.dtype
            self.is_initialized = True
            self._keys, self._values = keys, values
            self.keys, self.values = keys[:, :, :length], values[:, :, :length]
            return self

        def lazy_initialization(self, key_states, value_states) -> None:
            self.device, self.dtype = key_states.device, key_states.dtype
            self.is_initialized = True
            self._allocate(key_states[:, :, :0], value_states[:, :, :0], key_states.shape[-2] + self.room)

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            length, new = self.keys.shape[-2], key_states.shape[-2]
            if length + new > self._keys.shape[-2]:
                self.room = max(2 * self.room, new)
                self._allocate(self.keys, self.values, new + self.room)
            self._keys[:, :, length: length + new] = key_states
            self._values[:, :, length: length + new] = value_states
            self.keys, self.values = self._keys[:, :, : length + new], self._values[:, :, : length + new]
            return self.keys, self.values

    return RoomyLayer


_ROOMY = None


def roomy_layer(room: int):
    """A new, empty :class:`RoomyLayer` (the class is made on first use: transformers is imported lazily)."""
    global _ROOMY
    if _ROOMY is None:
        _ROOMY = _layer_class()
    return _ROOMY(room)


def decoder_config(config):
    """The decoder's part of a model config (a multimodal or encoder-decoder config holds it inside)."""
    return config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config


def num_layers(config) -> int:
    """Decoder layers of ``config`` (``num_hidden_layers``, or GPT-2's ``n_layer``)."""
    text = decoder_config(config)
    return int(getattr(text, "num_hidden_layers", None) or getattr(text, "n_layer", 0))


def kv_bytes_per_token(config, itemsize: int) -> int:
    """Bytes of key-value cache one token of one row takes: every layer's keys and values."""
    text = decoder_config(config)
    heads = int(getattr(text, "num_attention_heads", None) or getattr(text, "n_head", 1))
    kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(text, "head_dim", None) or int(getattr(text, "hidden_size", None) or getattr(text, "n_embd")) // heads)
    return max(num_layers(config), 1) * 2 * kv_heads * head_dim * int(itemsize)


def full_attention_only(config) -> bool:
    """Whether every decoder layer of ``config`` attends over the whole sequence (no sliding window)."""
    text = decoder_config(config)
    types = getattr(text, "layer_types", None)
    if types:
        return all(t == "full_attention" for t in types)
    return not getattr(text, "sliding_window", None) or not getattr(text, "use_sliding_window", True)


def roomy_cache(num_layers: int, room: int):
    """An empty :class:`~transformers.DynamicCache` of ``num_layers`` roomy layers (filled by the first forward)."""
    from transformers import DynamicCache

    cache = DynamicCache()
    cache.layers = [roomy_layer(room) for _ in range(num_layers)]
    return cache


def padded_cache(sources, lengths: list[int], width: int, room: int):
    """A batch cache for decoding: row r holds the first ``lengths[r]`` positions of the one-row cache
    ``sources[r]``, left-padded with zeros to ``width``, with ``room`` positions to spare in every layer."""
    from transformers import DynamicCache

    batched = DynamicCache()
    layers = []
    for index in range(len(sources[0].layers)):
        like_k, like_v = sources[0].layers[index].keys, sources[0].layers[index].values
        keys = like_k.new_zeros((len(lengths), like_k.shape[1], width + room, like_k.shape[3]))
        values = like_v.new_zeros((len(lengths), like_v.shape[1], width + room, like_v.shape[3]))
        for r, (source, length) in enumerate(zip(sources, lengths)):
            keys[r, :, width - length: width] = source.layers[index].keys[0, :, :length]
            values[r, :, width - length: width] = source.layers[index].values[0, :, :length]
        layers.append(roomy_layer(room).adopt(keys, values, width))
    batched.layers = layers
    return batched


def extended_copy(source, length: int, room: int):
    """A new one-row cache holding the first ``length`` positions of ``source`` (copied: ``source`` is left as it
    is) with ``room`` positions to spare in every layer, for a forward pass that continues it."""
    from transformers import DynamicCache

    cache = DynamicCache()
    layers = []
    for layer in source.layers:
        keys, values = layer.keys[:, :, :length], layer.values[:, :, :length]
        grown = roomy_layer(room)
        grown.device, grown.dtype, grown.is_initialized = keys.device, keys.dtype, True
        grown._allocate(keys, values, room)
        layers.append(grown)
    cache.layers = layers
    return cache
