"""Funnel Transformer's relative position embeddings, kept symbolic in the sequence length.

transformers' ``FunnelAttentionStructure.get_position_embeds`` (the default ``relative_shift``
attention) lists the token positions as Python ints (``list(range(seq_len))``), pools that list
block by block and measures each block's relative distances from its ends and its length. torch's
export then fixes the sequence length to the example's (``range`` of a symbolic size), so Funnel
had no dynamic sequence. The positions are an arithmetic progression at every block (with
``separate_cls`` the <cls> token is placed one stride before the first pooled position, which
continues the progression backwards), so three numbers describe them: the first position, the
stride, and the count, which stays a symbolic size. The replacement computes the same embeddings
from those. The factorized attention (``attention_type="factorized"``) already builds its tables
with ``arange`` of the length and keeps the original method. ``export.py`` lists the modules that
import torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ember._src.torch_import.patching import Patch


@dataclass(frozen=True)
class Progression:
    """The positions ``first, first + step, ..., first + (count - 1) step`` (``count`` may be a
    torch ``SymInt``; it is at least 1 wherever :func:`distances` reads the last one)."""

    first: Any
    step: int
    count: Any

    @property
    def last(self) -> Any:
        return self.first + (self.count - 1) * self.step

    def pooled(self, separate_cls: bool, truncate_seq: bool, block: int) -> Progression:
        """The positions after pooling block ``block`` (>= 1): every other position; with
        ``separate_cls``, the first (the <cls> token) kept aside, the last dropped when
        ``truncate_seq``, and the <cls> token placed at ``1 - 2 ** block``."""
        if not separate_cls:
            return Progression(self.first, 2 * self.step, (self.count + 1) // 2)
        # every other one of the count - 2 (count - 1) positions after the first: (count - 1) // 2
        # (count // 2) of them, also where the count is 1 or 2 and none is left
        drop = 2 if truncate_seq else 1
        body = Progression(self.first + self.step, 2 * self.step, (self.count - drop + 1) // 2)
        cls = 1 - 2 ** block
        if body.first - body.step != cls:  # (the <cls> token does not continue the progression)
            raise ValueError(f"Funnel positions: <cls> at {cls} does not precede {body.first} by {body.step}")
        return Progression(cls, body.step, body.count + 1)


def distances(pos: Progression, stride: int, pooled: Progression | None = None, shift: int = 1) -> Tensor:
    """The relative distances between the positions ``pooled`` (default ``pos``) and ``pos``, from
    the largest down in steps of ``stride``: ``shift * len(pooled) * stride`` past the offset of the
    first positions, down to the first pooled position minus the last of ``pos``."""
    pooled = pos if pooled is None else pooled
    top = pooled.first - pos.first + shift * pooled.count * stride
    bottom = pooled.first - pos.last
    return torch.arange(top, bottom - 1, -stride, dtype=torch.long)


def _position_embeds(original: Any) -> Any:
    def get_position_embeds(self: Any, seq_len: Any, dtype: torch.dtype, device: torch.device) -> Any:
        config = self.config
        if config.attention_type == "factorized":
            return original(self, seq_len, dtype, device)
        half = config.d_model // 2
        inv_freq = 1 / (10000 ** (torch.arange(half, dtype=torch.int64, device=device).to(dtype) / half))
        # every distance the blocks measure lies in [-2 seq_len, 2 seq_len)
        offsets = torch.arange(-2 * seq_len, 2 * seq_len, dtype=torch.int64, device=device).to(dtype)
        angles = offsets[:, None] * inv_freq[None]
        table = torch.cat([self.sin_dropout(torch.sin(angles)), self.cos_dropout(torch.cos(angles))], dim=-1)

        def rows(d: Tensor) -> Tensor:
            index = (d.to(device) + 2 * seq_len)[:, None]
            return torch.gather(table, 0, index.expand(index.size(0), config.d_model))

        pos = Progression(0, 1, seq_len)
        out = []
        for block in range(config.num_blocks):
            across = None
            if block > 0:
                pooled = pos.pooled(config.separate_cls, config.truncate_seq, block)
                across = rows(distances(pos, 2 ** (block - 1), pooled, shift=2))
                pos = pooled
            out.append([rows(distances(pos, 2 ** block)), across])
        return out

    get_position_embeds.__wrapped__ = original
    return get_position_embeds


PATCHES: tuple[Patch, ...] = (
    ("transformers.models.funnel.modeling_funnel", "FunnelAttentionStructure.get_position_embeds",
     _position_embeds),
)
