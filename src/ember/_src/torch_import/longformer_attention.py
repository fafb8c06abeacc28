"""Longformer's sliding-window attention, written for an export with a symbolic sequence length.

transformers' ``LongformerSelfAttention`` computes the banded scores with ``torch.div`` of sizes
(a tensor whose value torch's export cannot read back as a size), ``as_strided`` views of
overlapping chunks and slice assignments whose sizes torch then records as long nested floor
divisions; ``LongformerEncoder`` branches on ``any()`` of the attention mask (global attention,
whose sizes depend on the mask's values); and ``LongformerModel`` pads the sequence to a multiple
of the window only where the padding is not 0 (a branch on the length). During an export the
importer replaces those four functions with these, which give the same values:

* the scores of query ``i`` against keys ``i - w .. i + w`` (``w``: half the window), with keys
  outside the sequence at ``-inf``: the queries cut into chunks of ``w``, each against the ``3 w``
  keys around it (three shifted slices of the keys cut into chunks), and the band of each row taken
  from the ``w x 3 w`` block by padding it to ``w x (3 w + 1)`` so each row starts one further on;
* the context the other way round: the band placed back into the ``w x 3 w`` block of each chunk
  and multiplied by the chunk's ``3 w`` values;
* the encoder without the global-attention path: where the attention mask marks a token global,
  the imported program raises ``CheckError`` (a ``torch._assert_async`` the import checks);
* no padding of the sequence to a multiple of the window (a branch on the length): the attention
  pads its chunks of ``w`` with zero rows itself, keys there are outside the sequence (``-inf``)
  and their query rows are cut off again. The original's padded tokens are masked keys and
  discarded queries, so neither way changes a real token's values.

The replacements serve static sizes too (the original encoder's branch on the mask's values fails
any export). ``export.py`` lists the modules that import torch.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ember._src.torch_import.patching import Patch

_MODULE = "transformers.models.longformer.modeling_longformer"
GLOBAL_MESSAGE = ("Longformer's global attention (a global_attention_mask, or an attention_mask value of 2) "
                  "has sizes that depend on the mask's values: the imported model runs local attention only")


def _chunks_around(x: Tensor, w: int) -> Tensor:
    """``x`` of shape ``[bh, n * w, d]`` as ``[bh, n, 3 w, d]``: for chunk ``c`` the rows
    ``(c - 1) w .. (c + 2) w`` with zero rows outside."""
    bh, length, d = x.shape
    n = length // w
    padded = torch.nn.functional.pad(x, (0, 0, w, w)).reshape(bh, n + 2, w, d)
    return torch.cat([padded[:, j:j + n] for j in range(3)], dim=2)


def _band(blocks: Tensor, w: int) -> Tensor:
    """The band ``blocks[..., a, a + k]`` (``k`` in ``0 .. 2 w``) of ``w x 3 w`` blocks, as
    ``[..., w, 2 w + 1]``: rows of ``3 w + 1`` over the flattened block start one further on."""
    lead = blocks.shape[:-2]
    flat = torch.nn.functional.pad(blocks.reshape(*lead, 3 * w * w), (0, w))
    return flat.reshape(*lead, w, 3 * w + 1)[..., :2 * w + 1]


def _unband(band: Tensor, w: int) -> Tensor:
    """The inverse of :func:`_band`: ``[..., w, 2 w + 1]`` placed into zero ``w x 3 w`` blocks."""
    lead = band.shape[:-2]
    rows = torch.nn.functional.pad(band, (0, w)).reshape(*lead, w * (3 * w + 1))
    return rows[..., :3 * w * w].reshape(*lead, w, 3 * w)


def _padded_chunks(x: Tensor, w: int) -> tuple[Tensor, Any]:
    """``x`` of shape ``[b, s, h, d]`` as ``[b h, n w, d]``, ``1 .. w`` zero rows appended up to
    the ``n``-th multiple of ``w``, and ``n``. (Never none: where the padding could be 0, torch's
    export would decide at the example's length whether it is and bake that in.)"""
    b, s, h, d = x.shape
    n = s // w + 1
    x = torch.nn.functional.pad(x.transpose(1, 2), (0, 0, 0, n * w - s))
    return x.reshape(b * h, n * w, d), n


def _first(x: Tensor, s: Any) -> Tensor:
    """The first ``s`` rows of axis 2, as a split: a slice ``[:s]`` would have torch's export decide
    whether ``s`` reaches the padded length and bake in the example's answer."""
    return torch.split(x, [s, x.shape[2] - s], dim=2)[0]


def query_key_scores(self: Any, query: Tensor, key: Tensor, window_overlap: int) -> Tensor:
    """``[b, s, h, 2 w + 1]``: query ``i`` against keys ``i - w .. i + w``, ``-inf`` outside the
    sequence (any length ``s``: the chunks are padded)."""
    w = window_overlap
    b, s, h, d = query.shape
    q, n = _padded_chunks(query, w)
    k, _ = _padded_chunks(key, w)
    blocks = torch.matmul(q.reshape(b * h, n, w, d), _chunks_around(k, w).transpose(-1, -2))
    scores = _first(_band(blocks, w).reshape(b, h, n * w, 2 * w + 1), s)
    pos = torch.arange(s, device=query.device)[:, None] + torch.arange(2 * w + 1, device=query.device) - w
    outside = (pos < 0) | (pos >= s)
    return scores.masked_fill(outside, float("-inf")).transpose(1, 2)


def probs_value_context(self: Any, attn_probs: Tensor, value: Tensor, window_overlap: int) -> Tensor:
    """``[b, s, h, d]``: each query's band of probabilities times the values ``i - w .. i + w``."""
    w = window_overlap
    b, s, h, d = value.shape
    v, n = _padded_chunks(value, w)
    p, _ = _padded_chunks(attn_probs, w)
    p = _unband(p.reshape(b * h, n, w, 2 * w + 1), w)
    return _first(torch.matmul(p, _chunks_around(v, w)).reshape(b, h, n * w, d), s).transpose(1, 2)


def _encoder_forward(self: Any, hidden_states: Tensor, attention_mask: Tensor | None = None,
                     padding_len: Any = 0, output_attentions: bool = False,
                     output_hidden_states: bool = False, return_dict: bool = True) -> Any:
    """``LongformerEncoder.forward`` with local attention only (global tokens raise at run time)."""
    from transformers.models.longformer.modeling_longformer import LongformerBaseModelOutput

    if output_attentions:
        raise NotImplementedError("Longformer with output_attentions: import it without")
    is_index_masked = attention_mask < 0
    is_index_global_attn = attention_mask > 0
    torch._assert_async(torch.logical_not(is_index_global_attn.any()), GLOBAL_MESSAGE)
    states = []
    for layer in self.layer:
        states.append(hidden_states)
        hidden_states = layer(hidden_states, attention_mask=attention_mask, is_index_masked=is_index_masked,
                              is_index_global_attn=is_index_global_attn, is_global_attn=False,
                              output_attentions=False)[0]
    states.append(hidden_states)
    every = tuple(states) if output_hidden_states else None
    if not return_dict:
        return tuple(v for v in (hidden_states, every) if v is not None)
    return LongformerBaseModelOutput(last_hidden_state=hidden_states, hidden_states=every)


def _no_padding(self: Any, input_ids: Tensor | None, attention_mask: Tensor, token_type_ids: Tensor,
                position_ids: Tensor | None, inputs_embeds: Tensor | None, pad_token_id: int) -> tuple:
    """``LongformerModel._pad_to_window_size`` without the padding: the replacement attention pads
    its chunks itself, and padded tokens (masked keys, queries cut off at the end) change no other
    token's values."""
    return 0, input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds


def _replaced_by(replacement: Any) -> Any:
    return lambda original: replacement


PATCHES: tuple[Patch, ...] = (
    (_MODULE, "LongformerSelfAttention._sliding_chunks_query_key_matmul", _replaced_by(query_key_scores)),
    (_MODULE, "LongformerSelfAttention._sliding_chunks_matmul_attn_probs_value",
     _replaced_by(probs_value_context)),
    (_MODULE, "LongformerEncoder.forward", _replaced_by(_encoder_forward)),
    (_MODULE, "LongformerModel._pad_to_window_size", _replaced_by(_no_padding)),
)
