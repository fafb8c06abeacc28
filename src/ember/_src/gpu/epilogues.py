"""GEMM epilogues: a bias add, bias+ReLU or bias+GELU after a CUDA GEMM step, folded into it.

A product ``c = dot_general(a, b)`` that is a GEMM step (:func:`.gemm_layouts.gemm_layout`) and whose
only reader is ``z = c + broadcast(bias)`` -- ``bias`` a vector along the result's last axis (the
GEMM's ``N``, one free dimension of the rhs), a program input or constant -- followed by nothing
or by an activation of ``z`` alone is computed by one step: cuBLASLt's ``cublasLtMatmul`` with the
epilogue ``CUBLASLT_EPILOGUE_BIAS``, ``_RELU_BIAS`` or ``_GELU_BIAS`` writes ``act(c + bias)``
directly (:mod:`.cuda_blaslt`); the tiled kernel, the fallback, applies the same expression to
its accumulator before storing. Neither ``c`` nor ``z`` gets a buffer or a kernel.

The activation is the region of elementwise equations between ``z`` and the one materialized
value ``y`` they compute (their other operands scalar constants; their intermediate values read
nowhere else). It is recognized by what it computes, not how it is written: the region is
evaluated with the primitives' NumPy implementations on a probe of values in [-30, 30] and
compared with ``max(x, 0)`` (ReLU: ``jnp.maximum(z, 0)``, ``nn.relu``'s ``select_n``) and
``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`` (GELU's tanh form, the one cuBLASLt
computes: ``nn.gelu(approximate=True)``, the default). Anything else (the erf form of GELU,
another function) keeps its own kernel.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ember._src.gpu import ops
from ember._src.program import Eqn, Literal, Var

KINDS = ("bias", "relu_bias", "gelu_bias")
DTYPES = ("float32", "float16", "bfloat16")  # results the fold takes (cuBLASLt's bias types)
MAX_REGION = 32  # equations an activation may take
_PROBE = np.concatenate([np.linspace(-8.0, 8.0, 161), [-30.0, -12.0, -1e-3, 1e-3, 12.0, 30.0]])
_TOL = {"float32": (1e-5, 1e-6), "float16": (2e-2, 2e-3), "bfloat16": (3e-2, 1e-2)}


@dataclass
class Epilogue:
    """What a GEMM step folds in: ``kind`` (:data:`KINDS`), the ``bias`` vector (a buffered
    value) and ``out``, the value the step writes (``act(product + bias)``)."""

    kind: str
    bias: Var
    out: Var


def _reference(kind: str, x: np.ndarray) -> np.ndarray:
    if kind == "relu_bias":
        return np.maximum(x, 0.0)
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


class _Program:
    """The equations of a flattened program with their producers and readers (aliases resolved by
    ``resolve``)."""

    def __init__(self, eqns: Sequence[Eqn], producer: dict, resolve: Any):
        self.eqns, self.producer, self.resolve = list(eqns), producer, resolve
        self.users: dict[Var, list[Eqn]] = {}
        for e in self.eqns:
            for a in e.inputs:
                a = resolve(a)
                if isinstance(a, Var) and e not in self.users.setdefault(a, []):
                    self.users[a].append(e)

    def scalar(self, a: Any) -> Any:
        """The value of ``a`` where it is a scalar constant (a literal, or a literal broadcast),
        else None."""
        a = self.resolve(a)
        if isinstance(a, Literal):
            return np.asarray(a.val, a.aval.dtype) if np.ndim(a.val) == 0 else None
        pe = self.producer.get(a)
        if pe is not None and pe.prim.name == "broadcast_in_dim" and not pe.params["broadcast_dimensions"]:
            return self.scalar(pe.inputs[0])
        return None


def _bias(p: _Program, add: Eqn, c: Var, buffered: set) -> Var | None:
    """The vector ``add`` adds to ``c`` along its last axis, where it is a buffered value."""
    ins = [p.resolve(a) for a in add.inputs]
    if ins.count(c) != 1:
        return None
    w = ins[1 - ins.index(c)]
    pe = p.producer.get(w) if isinstance(w, Var) else None
    if pe is None or pe.prim.name != "broadcast_in_dim":
        return None
    src = p.resolve(pe.inputs[0])
    rank = len(c.aval.shape)
    if not isinstance(src, Var) or src not in buffered or len(src.aval.shape) != 1:
        return None
    if tuple(pe.params["broadcast_dimensions"]) != (rank - 1,) or src.aval.dtype != c.aval.dtype:
        return None
    return src


def _region(p: _Program, z: Var, after: int, want: set) -> tuple[list[Eqn], Var] | None:
    """The elementwise equations from ``z`` to the one materialized value they compute (program
    order), and that value; None where they read anything else or compute more than one."""
    vals, region = {z}, []
    pending = {id(u) for u in p.users.get(z, [])}  # readers of the region's values not yet in it
    for e in p.eqns[after:]:
        if not pending:
            break
        if id(e) not in pending:
            continue
        pending.discard(id(e))
        ins = [p.resolve(a) for a in e.inputs]
        if e.prim.name not in ops.OPS or len(e.outvars) != 1 or len(region) == MAX_REGION:
            return None
        for a in ins:
            if not (isinstance(a, Var) and a in vals and a not in want) and p.scalar(a) is None:
                return None
        region.append(e)
        y = e.outvars[0]
        vals.add(y)
        if y not in want:
            pending.update(id(u) for u in p.users.get(y, []))
    sinks = [v for v in vals if v in want]
    if len(sinks) != 1 or sinks[0] is z:
        return None
    return region, sinks[0]


def classify(p: _Program, region: list[Eqn], z: Var, y: Var) -> str | None:
    """``relu_bias`` or ``gelu_bias`` where the region computes ReLU or GELU's tanh form of ``z``
    (evaluated on the probe), else None."""
    dt = np.dtype(z.aval.dtype)
    env: dict[Var, np.ndarray] = {z: _PROBE.astype(dt)}
    try:
        for e in region:
            args = [env[a] if isinstance(a, Var) and a in env else p.scalar(a)
                    for a in map(p.resolve, e.inputs)]
            out = e.prim.impl(*args, **e.params)
            env[e.outvars[0]] = np.asarray(out[0] if isinstance(out, (list, tuple)) else out)
        got = env[y].astype(np.float64)
    except Exception:  # noqa: BLE001 (an equation the probe cannot evaluate: no fold)
        return None
    x = env[z].astype(np.float64)
    rtol, atol = _TOL[dt.name]
    for kind in ("relu_bias", "gelu_bias"):
        if got.shape == x.shape and np.allclose(got, _reference(kind, x), rtol=rtol, atol=atol):
            return kind
    return None


def find(eqns: Sequence[Eqn], producer: dict, resolve: Any, products: Sequence[Var], want: set,
         outputs: set, buffered: set) -> dict[Var, Epilogue]:
    """The epilogue each GEMM step's result ``c`` of ``products`` folds in (module docstring), by
    ``c``. ``want``: the values that get buffers (the program's ``outputs`` among them);
    ``buffered``: the program inputs and constants."""
    p = _Program(eqns, producer, resolve)
    pos = {e.outvars[0]: i for i, e in enumerate(p.eqns) if e.outvars}
    out: dict[Var, Epilogue] = {}
    for c in products:
        pe = producer[c]
        (_, rc), (_, rb) = pe.params["dimension_numbers"]
        free_rhs = len(pe.inputs[1].aval.shape) - len(rc) - len(rb)
        users = p.users.get(c, [])
        if np.dtype(c.aval.dtype).name not in DTYPES or free_rhs != 1 or len(users) != 1 or c in outputs:
            continue
        add = users[0]
        if add.prim.name != "add" or (bias := _bias(p, add, c, buffered)) is None:
            continue
        z = add.outvars[0]
        if z in want:
            out[c] = Epilogue("bias", bias, z)
            continue
        found = _region(p, z, pos[z] + 1, want)
        if found is None:
            continue
        region, y = found
        kind = classify(p, region, z, y)
        if kind is not None and y.aval.dtype == c.aval.dtype and y.aval.shape == c.aval.shape:
            out[c] = Epilogue(kind, bias, y)
    return out
