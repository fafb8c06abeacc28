"""Recurrences of state space and linear-attention models kept whole through ``torch.export``.

transformers' Mamba, Falcon-Mamba, Jamba and Zamba run their reference selective scan (the path
without the ``mamba_ssm`` kernels), and RWKV its CPU attention, as a Python loop over the sequence,
so torch's export fixes the example's length. While :func:`whole_ssm_scans` is active, those
modules' ``mamba_selective_scan`` discretizes as the reference does and calls the custom op
``ember::ssm_scan`` for the recurrence alone, and RWKV's ``rwkv_linear_attention`` (without a
state passed in) calls ``ember::wkv_scan``: one graph node each, whose shapes torch derives without
looping. ``ops_recurrent.py`` lowers them to a ``lax.scan`` over the sequence axis, which may be a
named dynamic axis.

``export.py`` lists the modules that import torch.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ember._src.torch_import.patching import Patch, patched_functions

# the transformers modules whose reference scan loops over the sequence (patched only when the
# model's code already imported them)
MODULES = tuple(f"transformers.models.{m}.modeling_{m}" for m in ("mamba", "falcon_mamba", "jamba", "zamba"))


@torch.library.custom_op("ember::ssm_scan", mutates_args=())
def ssm_scan(decay: Tensor, inflow: Tensor, readout: Tensor) -> list[Tensor]:
    """``[y, s_last]``: ``y[b, d, t] = sum_n s_t[b, d, n] readout[b, t, n]`` with ``s_t =
    decay[:, :, t] s_(t-1) + inflow[:, :, t]`` from ``s_(-1) = 0`` (``decay``, ``inflow``:
    ``[b, d, L, n]``), and the last state ``[b, d, n]``."""
    s = decay.new_zeros((decay.shape[0], decay.shape[1], decay.shape[3]))
    out = decay.new_empty(decay.shape[:3])
    for t in range(decay.shape[2]):
        s = decay[:, :, t] * s + inflow[:, :, t]
        out[:, :, t] = (s * readout[:, None, t, :]).sum(-1)
    return [out, s]


@ssm_scan.register_fake
def _ssm_scan_fake(decay: Tensor, inflow: Tensor, readout: Tensor) -> list[Tensor]:
    b, d, _, n = decay.shape
    return [decay.new_empty(decay.shape[:3]), decay.new_empty((b, d, n))]


def _selective_scan(original: Any) -> Any:
    """A replacement for transformers' ``mamba_selective_scan`` (``original``) with the same
    arguments and results."""

    def scan(hidden_states: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Tensor | None = None,
             z: Tensor | None = None, delta_bias: Tensor | None = None, delta_softplus: bool = False,
             return_last_state: bool = False, **kwargs: Any) -> Any:
        if delta_bias is not None:
            dt = dt + delta_bias.to(dt.dtype)[..., None]
        if delta_softplus:
            dt = F.softplus(dt)
        B, C = B.transpose(1, 2), C.transpose(1, 2)  # [b, L, n]
        decay = torch.exp(A[None, :, None, :] * dt[:, :, :, None])
        inflow = dt[:, :, :, None] * B[:, None, :, :].float() * hidden_states[:, :, :, None].float()
        out, last = torch.ops.ember.ssm_scan(decay, inflow, C.to(decay.dtype))
        out = out.to(hidden_states.dtype)
        if D is not None:
            out = out + hidden_states * D[None, :, None]
        if z is not None:
            out = out * F.silu(z)
        return (out, last) if return_last_state else out  # (the state stays float32, as the loop keeps it)

    scan.__wrapped__ = original
    return scan


@torch.library.custom_op("ember::wkv_scan", mutates_args=())
def wkv_scan(time_decay: Tensor, time_first: Tensor, key: Tensor, value: Tensor) -> list[Tensor]:
    """RWKV's attention over ``key``/``value`` (``[b, L, d]``) from an empty state: ``[output,
    numerator, denominator, running max]``, the last three the state after the sequence (float32;
    the sums are kept scaled by ``exp(-max)`` so no exponential overflows)."""
    w = -torch.exp(time_decay.float())
    u = time_first.float()
    num = key.new_zeros(key[:, 0].shape, dtype=torch.float32)
    den = torch.zeros_like(num)
    top = torch.full_like(num, -1e38)
    out = torch.empty_like(key)
    for t in range(key.shape[1]):
        k, v = key[:, t].float(), value[:, t].float()
        m = torch.maximum(top, k + u)
        a, b = torch.exp(top - m), torch.exp(k + u - m)
        out[:, t] = ((a * num + b * v) / (a * den + b)).to(out.dtype)
        m = torch.maximum(top + w, k)
        a, b = torch.exp(top + w - m), torch.exp(k - m)
        num, den, top = a * num + b * v, a * den + b, m
    return [out, num, den, top]


@wkv_scan.register_fake
def _wkv_scan_fake(time_decay: Tensor, time_first: Tensor, key: Tensor, value: Tensor) -> list[Tensor]:
    state = key.new_empty(key[:, 0].shape, dtype=torch.float32)
    return [torch.empty_like(key), state, torch.empty_like(state), torch.empty_like(state)]


def _linear_attention(original: Any) -> Any:
    """A replacement for RWKV's ``rwkv_linear_attention`` (``original``): without a state passed
    in, one ``ember::wkv_scan``; with one, ``original``."""

    def attention(time_decay: Tensor, time_first: Tensor, key: Tensor, value: Tensor, state: Any = None,
                  return_state: bool = False) -> Any:
        if state is not None:
            return original(time_decay, time_first, key, value, state=state, return_state=return_state)
        out, num, den, top = torch.ops.ember.wkv_scan(time_decay, time_first, key, value)
        return out, ([num, den, top] if return_state else None)

    attention.__wrapped__ = original
    return attention


# module, function name, replacement factory
_PATCHES: tuple[Patch, ...] = tuple((m, "mamba_selective_scan", _selective_scan) for m in MODULES) + (
    ("transformers.models.rwkv.modeling_rwkv", "rwkv_linear_attention", _linear_attention),)


def whole_ssm_scans() -> contextlib.AbstractContextManager[int]:
    """Within the block, the imported transformers state space models run their selective scan as
    one ``ember::ssm_scan`` op and RWKV its attention as one ``ember::wkv_scan``; yields how many
    functions were patched (only in modules the model's code already imported)."""
    return patched_functions(_PATCHES)
