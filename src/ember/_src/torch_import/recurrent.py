"""Recurrent layers (``nn.LSTM``, ``nn.GRU``, ``nn.RNN``) kept whole through ``torch.export``.

torch's own kernels for these layers loop over the sequence in Python while tracing, so the exported
graph fixes the example's length. While :func:`whole_recurrent_layers` is active, each recurrent
module of the model calls the custom op ``ember::rnn`` instead: one graph node with the input, the
initial states and the module's weights (still its parameters, so the state-dict names are kept),
whose shapes torch derives without looping. ``ops_recurrent.py`` lowers the node to a
``lax.scan`` over the sequence axis, which may be a named dynamic axis.

``export.py`` lists the modules that import torch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

MODES = {"LSTM": "lstm", "GRU": "gru", "RNN_TANH": "rnn_tanh", "RNN_RELU": "rnn_relu"}


@torch.library.custom_op("ember::rnn", mutates_args=())
def rnn(input: Tensor, hx: list[Tensor], params: list[Tensor], mode: str, has_biases: bool,
        num_layers: int, bidirectional: bool, batch_first: bool) -> list[Tensor]:
    """A whole recurrent layer (torch's ``_VF.lstm`` / ``gru`` / ``rnn_tanh`` / ``rnn_relu``, eval
    mode): ``[output, h_n]`` (``[output, h_n, c_n]`` for an LSTM)."""
    fn = getattr(torch._VF, mode)
    if mode == "lstm":
        out = fn(input, hx, params, has_biases, num_layers, 0.0, False, bidirectional, batch_first)
    else:
        out = fn(input, hx[0], params, has_biases, num_layers, 0.0, False, bidirectional, batch_first)
    return [t.clone() for t in out]


@rnn.register_fake
def _rnn_fake(input: Tensor, hx: list[Tensor], params: list[Tensor], mode: str, has_biases: bool,
              num_layers: int, bidirectional: bool, batch_first: bool) -> list[Tensor]:
    hidden = hx[0].shape[-1]
    dirs = 2 if bidirectional else 1
    t, b = (input.shape[1], input.shape[0]) if batch_first else (input.shape[0], input.shape[1])
    out_shape = (b, t, dirs * hidden) if batch_first else (t, b, dirs * hidden)
    outs = [input.new_empty(out_shape), hx[0].new_empty(hx[0].shape)]
    if mode == "lstm":
        outs.append(hx[1].new_empty(hx[1].shape))
    return outs


def _supported(m: torch.nn.RNNBase) -> bool:
    return m.mode in MODES and not getattr(m, "proj_size", 0)


def _forward(m: torch.nn.RNNBase) -> Any:
    """A replacement for ``m.forward`` with the same inputs and outputs (a padded tensor, not a
    ``PackedSequence``; eval mode) that calls ``ember::rnn``."""
    mode = MODES[m.mode]
    original = m.forward

    def forward(input: Any, hx: Any = None) -> Any:
        if not isinstance(input, Tensor):  # a PackedSequence: torch's own path
            return original(input, hx)
        batched = input.dim() == 3
        bdim = 0 if m.batch_first else 1
        if not batched:
            input = input.unsqueeze(bdim)
        dirs = 2 if m.bidirectional else 1
        if hx is None:
            z = input.new_zeros((m.num_layers * dirs, input.shape[bdim], m.hidden_size))
            states = [z, z] if mode == "lstm" else [z]
        else:
            states = list(hx) if mode == "lstm" else [hx]
            if not batched:
                states = [s.unsqueeze(1) for s in states]
        weights = [getattr(m, n) for n in m._flat_weights_names]
        outs = torch.ops.ember.rnn(input, states, weights, mode, m.bias, m.num_layers, m.bidirectional,
                                   m.batch_first)
        out, states = outs[0], outs[1:]
        if not batched:
            out, states = out.squeeze(bdim), [s.squeeze(1) for s in states]
        return out, (states[0], states[1]) if mode == "lstm" else states[0]
    return forward


@contextlib.contextmanager
def whole_recurrent_layers(model: torch.nn.Module) -> Iterator[int]:
    """Within the block, every supported recurrent submodule of ``model`` (not an LSTM with
    ``proj_size``) runs as one ``ember::rnn`` op; yields how many were replaced."""
    patched = [m for m in model.modules() if isinstance(m, torch.nn.RNNBase) and _supported(m)]
    own = {id(m): vars(m)["forward"] for m in patched if "forward" in vars(m)}  # set on the instance
    for m in patched:
        m.forward = _forward(m)
    try:
        yield len(patched)
    finally:
        for m in patched:
            if id(m) in own:
                m.forward = own[id(m)]
            else:
                del m.forward
