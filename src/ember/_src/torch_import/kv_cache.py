"""Greedy generation with a key/value cache for imported ``transformers`` causal LMs.

:class:`CacheStep` wraps a causal LM as one step ``(input_ids, past) -> (logits, present)`` where
``past``/``present`` stack every layer's keys and values as ``[layers, 2, batch, kv_heads, past,
head_dim]``. Slot 0 of the cache is a padding slot masked out of attention, so the first step
(the prompt) and every later step (one token) run the same program: import it with
``dynamic_axes={"input_ids": ("batch", "seq"), "past": (None, None, "batch", None, "past", None)}``
and one compile serves all steps. :func:`greedy_generate` runs the loop on an InferenceSession
that keeps the cache as state (``state_inputs={"past": "present"}``; NumPy only).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def cache_step(model: Any) -> Any:
    """A ``torch.nn.Module`` computing one cached step of the ``transformers`` causal LM ``model``."""
    import torch
    from transformers import DynamicCache

    class CacheStep(torch.nn.Module):
        def __init__(self, lm: Any):
            super().__init__()
            self.lm = lm

        def forward(self, input_ids: torch.Tensor, past: torch.Tensor) -> dict:
            b, s = input_ids.shape
            n_past = past.shape[-2]
            cache = DynamicCache()
            for i in range(past.shape[0]):
                cache.update(past[i, 0], past[i, 1], i)
            mask = torch.cat([torch.zeros(b, 1, dtype=torch.long),
                              torch.ones(b, n_past - 1 + s, dtype=torch.long)], dim=1)
            pos = torch.arange(s).unsqueeze(0).expand(b, s) + (n_past - 1)
            # the last position's logits only (logits_to_keep, as transformers' generate asks):
            # the LM head of a prompt step is one row, not one per prompt token
            keep = {"logits_to_keep": 1} if _takes_logits_to_keep(self.lm) else {}
            out = self.lm(input_ids=input_ids, past_key_values=cache, attention_mask=mask,
                          position_ids=pos, use_cache=True, **keep)
            kv = out.past_key_values
            present = torch.stack([torch.stack([layer.keys, layer.values]) for layer in kv.layers])
            return {"logits": out.logits[:, -1, :], "present": present}

    return CacheStep(model).eval()


def _takes_logits_to_keep(lm: Any) -> bool:
    """Whether the causal LM's ``forward`` takes ``logits_to_keep`` (transformers >= 4.50)."""
    import inspect
    try:
        return "logits_to_keep" in inspect.signature(lm.forward).parameters
    except (TypeError, ValueError):
        return False


def empty_cache(n_layers: int, batch: int, kv_heads: int, head_dim: int,
                dtype: Any = np.float32) -> np.ndarray:
    """The starting cache: one (masked) padding slot."""
    return np.zeros((n_layers, 2, batch, kv_heads, 1, head_dim), dtype)


def greedy_generate(session: Any, prompt: np.ndarray, max_new_tokens: int) -> np.ndarray:
    """Greedy decoding on ``InferenceSession(import of cache_step(model), state_inputs={"past":
    "present"})`` whose cache was started with ``set_state("past", empty_cache(...))``: ``prompt``
    ``[batch, n]`` int64; returns ``[batch, n + max_new_tokens]`` tokens. The cache stays in the
    session between steps."""
    tokens = np.asarray(prompt, np.int64)
    feed = tokens
    for _ in range(max_new_tokens):
        nxt = np.argmax(session.run({"input_ids": feed})["logits"], axis=-1).astype(np.int64)[:, None]
        tokens = np.concatenate([tokens, nxt], axis=1)
        feed = nxt
    return tokens
