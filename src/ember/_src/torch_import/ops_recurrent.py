"""The handler of ``ember::rnn`` (``recurrent.py``): a whole ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` as
``lax.scan`` over the sequence axis, one scan per layer and direction.

The input projection of every step is one matrix product over the whole sequence before the scan;
the scan body holds the recurrent product and the gates. The sequence length may be a named dynamic
axis (one compile serves every length); a reverse direction is a ``reverse=True`` scan, whose
outputs stay in sequence order.
"""

from __future__ import annotations

from typing import Any

import ember.lax as lax
import ember.numpy as jnp
from ember._src.torch_import.ops import handler

_GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


def _sigmoid(x: Any) -> Any:
    return 1.0 / (1.0 + jnp.exp(-x))


def _cell(mode: str, w_hh: Any, b_hh: Any) -> Any:
    """The scan body ``(carry, projected input) -> (carry, h)`` of one layer and direction."""
    w_t = w_hh.T

    def lstm(carry: Any, xp: Any) -> Any:
        h, c = carry
        g = xp + h @ w_t
        if b_hh is not None:
            g = g + b_hh
        i, f, gg, o = jnp.split(g, 4, axis=-1)
        c = _sigmoid(f) * c + _sigmoid(i) * jnp.tanh(gg)
        h = _sigmoid(o) * jnp.tanh(c)
        return (h, c), h

    def gru(carry: Any, xp: Any) -> Any:
        (h,) = carry
        hp = h @ w_t
        if b_hh is not None:
            hp = hp + b_hh
        xr, xz, xn = jnp.split(xp, 3, axis=-1)
        hr, hz, hn = jnp.split(hp, 3, axis=-1)
        r, z = _sigmoid(xr + hr), _sigmoid(xz + hz)
        n = jnp.tanh(xn + r * hn)
        h = (1.0 - z) * n + z * h
        return (h,), h

    def simple(carry: Any, xp: Any) -> Any:
        (h,) = carry
        a = xp + h @ w_t
        if b_hh is not None:
            a = a + b_hh
        h = jnp.tanh(a) if mode == "rnn_tanh" else jnp.maximum(a, 0.0)
        return (h,), h

    return {"lstm": lstm, "gru": gru}.get(mode, simple)


@handler("ember.rnn.default", doc="nn.LSTM / nn.GRU / nn.RNN (eval mode) as a scan over the sequence")
def _rnn(ctx, x, hx, params, mode, has_biases, num_layers, bidirectional, batch_first):
    """A whole recurrent layer: ``[output, h_n]`` (``[output, h_n, c_n]`` for an LSTM)."""
    if mode not in _GATES:
        raise NotImplementedError(f"ember::rnn: unknown mode {mode!r}")
    dirs = 2 if bidirectional else 1
    per = 4 if has_biases else 2
    if len(params) != num_layers * dirs * per:
        raise ValueError(f"ember::rnn: {len(params)} weights for {num_layers} layer(s) x {dirs} "
                         f"direction(s)")
    seq = jnp.swapaxes(x, 0, 1) if batch_first else x  # (T, B, features)
    h_out, c_out = [], []
    for layer in range(num_layers):
        ys = []
        for d in range(dirs):
            k = layer * dirs + d
            w = params[k * per:(k + 1) * per]
            w_ih, w_hh = w[0], w[1]
            b_ih, b_hh = (w[2], w[3]) if has_biases else (None, None)
            bias = b_ih
            if b_hh is not None and mode != "gru":  # outside the loop (GRU's gates need it apart)
                # one bias vector: the product's store adds it (the GEMM epilogue), where two
                # broadcast adds were a pass over the whole (T, B, gates) projection
                bias, b_hh = b_ih + b_hh, None
            xp = seq @ w_ih.T
            if bias is not None:
                xp = xp + bias
            carry = (hx[0][k], hx[1][k]) if mode == "lstm" else (hx[0][k],)
            carry, y = lax.scan(_cell(mode, w_hh, b_hh), carry, xp, reverse=d == 1)
            ys.append(y)
            h_out.append(carry[0])
            if mode == "lstm":
                c_out.append(carry[1])
        seq = ys[0] if dirs == 1 else jnp.concatenate(ys, axis=-1)
    out = jnp.swapaxes(seq, 0, 1) if batch_first else seq
    outs = [out, jnp.stack(h_out)]
    if mode == "lstm":
        outs.append(jnp.stack(c_out))
    return outs


@handler("ember.ssm_scan.default",
         doc="a state space model's selective scan (transformers' Mamba family) as a scan over the sequence")
def _ssm_scan(ctx, decay, inflow, readout):
    """``ssm.py``'s recurrence: the state ``[b, d, n]`` carried over the sequence axis (2 of
    ``decay``/``inflow``, 1 of ``readout``), each step's output its contraction with the readout;
    returns the outputs and the last state."""
    s0 = jnp.zeros((decay.shape[0], decay.shape[1], decay.shape[3]), decay.dtype)

    def step(s, xs):
        a, u, c = xs
        s = a * s + u
        return s, jnp.sum(s * c[:, None, :], axis=-1)

    xs = (jnp.moveaxis(decay, 2, 0), jnp.moveaxis(inflow, 2, 0), jnp.moveaxis(readout, 1, 0))
    last, ys = lax.scan(step, s0, xs)
    return [jnp.moveaxis(ys, 0, 2), last]


@handler("ember.wkv_scan.default", doc="RWKV's attention as a scan over the sequence (from an empty state)")
def _wkv_scan(ctx, time_decay, time_first, key, value):
    """``ssm.py``'s ``wkv_scan``: numerator, denominator and running maximum ``[b, d]`` (float32)
    carried over the sequence axis 1; returns the outputs (``key``'s dtype) and the last state."""
    w = -jnp.exp(time_decay.astype(jnp.float32))
    u = time_first.astype(jnp.float32)
    zeros = jnp.zeros((key.shape[0], key.shape[2]), jnp.float32)

    def step(carry, kv):
        num, den, top = carry
        k, v = kv[0].astype(jnp.float32), kv[1].astype(jnp.float32)
        m = jnp.maximum(top, k + u)
        a, b = jnp.exp(top - m), jnp.exp(k + u - m)
        out = ((a * num + b * v) / (a * den + b)).astype(key.dtype)
        m = jnp.maximum(top + w, k)
        a, b = jnp.exp(top + w - m), jnp.exp(k - m)
        return (a * num + b * v, a * den + b, m), out

    init = (zeros, zeros, jnp.full(zeros.shape, -1e38, jnp.float32))
    (num, den, top), ys = lax.scan(step, init, (jnp.moveaxis(key, 1, 0), jnp.moveaxis(value, 1, 0)))
    return [jnp.moveaxis(ys, 0, 1), num, den, top]
