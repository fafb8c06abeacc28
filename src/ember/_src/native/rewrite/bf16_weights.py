"""Products with bfloat16 weights: the ``bf16_weights`` pass and the ``native_gemm_bf16`` primitive
it rewrites into.

A weight kept in bfloat16 is a ``uint16`` program constant holding the bits (half a float32's
bytes), widened where it is read by this chain (``ember._src.torch_import.bf16.decode`` writes it)::

    bitcast_convert_type[float32](shift_left(convert_element_type[uint32](w), 16))

That chain is exact (a bfloat16 is the top half of a float32) and runs on every backend. The pass
finds it where it feeds a matrix product as the ``B`` operand (possibly through 2-D transposes)
and makes the product one ``native_gemm_bf16(x, w)`` (``x`` float32 ``[M, K]``), which the native
backend runs on ``csrc/gemm_bf16.h`` from the bfloat16 bits themselves (packed once; the float32
weight never exists). A ``take`` of rows of a decoded table (an embedding sharing the weight of
the output layer) gathers the ``uint16`` rows first and decodes only those. The decoded float32
copy is then dead and the constant stays ``uint16`` in the PARAMS arena. Uses the pass does not
recognize keep the chain (correct, computed where it is read).

``native_gemm_bf16`` appears only in programs produced by the passes, so it has a NumPy
implementation and abstract evaluation (the products of the float32-widened weights, as the
AVX-512 and AVX2 paths compute them) but no JVP, transpose or batching rule.
"""

from __future__ import annotations

import functools
import operator

import numpy as np

from ember._src.core import Primitive, ShapedArray
from ember._src.native.base import prim_refs as pr
from ember._src.native.rewrite.passes import Builder, dce, register, splat_value
from ember._src.program import Atom, Eqn, Program, Var
from ember.errors import ShapeError

gemm_bf16_p = Primitive("native_gemm_bf16")
_F32 = np.dtype(np.float32)
_U16 = np.dtype(np.uint16)
_U32 = np.dtype(np.uint32)


def decode_numpy(bits: np.ndarray) -> np.ndarray:
    """float32 values of bfloat16 ``bits`` (``uint16``): what the chain above computes."""
    return (np.asarray(bits, _U16).astype(_U32) << 16).view(_F32)


def _abstract(x: ShapedArray, w: ShapedArray, *bias: ShapedArray, trans_b: bool) -> ShapedArray:
    if x.ndim != 2 or w.ndim != 2 or np.dtype(x.dtype) != _F32 or np.dtype(w.dtype) != _U16:
        raise ShapeError(f"native_gemm_bf16: takes float32 [M, K] and uint16 [K, N] (or [N, K]), got "
                         f"{x.str_short()} and {w.str_short()}")
    k, n = (w.shape[1], w.shape[0]) if trans_b else w.shape
    if x.shape[1] != k:
        raise ShapeError(f"native_gemm_bf16: contraction sizes differ: {x.shape[1]} vs {k}")
    if bias and tuple(bias[0].shape) != (n,):
        raise ShapeError(f"native_gemm_bf16: the bias must have shape ({n},), got {bias[0].shape}")
    return ShapedArray((x.shape[0], n), _F32, False)


def _impl(x: np.ndarray, w: np.ndarray, *bias: np.ndarray, trans_b: bool) -> np.ndarray:
    b = decode_numpy(w)
    out = np.matmul(x, b.T if trans_b else b)
    if bias:
        out = out + bias[0]
    return out.astype(_F32, copy=False)


gemm_bf16_p.abstract_eval = _abstract
gemm_bf16_p.impl = _impl
for _kind in ("jvp", "transpose", "batch"):
    gemm_bf16_p.na(_kind, "native_gemm_bf16 is created by the native backend's passes after all "
                          "transformations ran")


def _decoded(a: Atom, prod: dict[int, Eqn], consts: set[int]) -> tuple[Var, int] | None:
    """(the ``uint16`` 2-D constant whose decoded value ``a`` is, the number of 2-D transposes
    between them mod 2), or None."""
    parity = 0
    e = prod.get(a.id) if isinstance(a, Var) else None
    while e is not None and e.prim is pr.TRANSPOSE and tuple(e.params["permutation"]) == (1, 0):
        parity ^= 1
        e = prod.get(e.inputs[0].id) if isinstance(e.inputs[0], Var) else None
    if e is None or e.prim is not pr.BITCAST_CONVERT_TYPE or np.dtype(e.outvars[0].aval.dtype) != _F32:
        return None
    s = prod.get(e.inputs[0].id) if isinstance(e.inputs[0], Var) else None
    if s is None or s.prim is not pr.SHIFT_LEFT or splat_value(s.inputs[1], prod) != 16:
        return None
    c = prod.get(s.inputs[0].id) if isinstance(s.inputs[0], Var) else None
    if c is None or c.prim is not pr.CONVERT_ELEMENT_TYPE or np.dtype(c.outvars[0].aval.dtype) != _U32:
        return None
    w = c.inputs[0]
    if not isinstance(w, Var) or w.id not in consts or np.dtype(w.aval.dtype) != _U16 or w.aval.ndim != 2:
        return None
    return w, parity


def _product(e: Eqn, prod: dict[int, Eqn], consts: set[int]) -> tuple[Var, bool] | None:
    """(the constant, ``trans_b``) when ``e`` is a float32 product of ``x`` and decoded ``w`` contracting
    ``x``'s last axis with no batch axes, else None."""
    if e.prim is not pr.DOT_GENERAL:
        return None
    (xc, bc), (xb, bb) = e.params["dimension_numbers"]
    x, b = e.inputs
    pet = e.params.get("preferred_element_type")
    if xb or bb or len(xc) != 1 or len(bc) != 1 or np.dtype(x.aval.dtype) != _F32 or x.aval.ndim < 1 \
            or xc[0] != x.aval.ndim - 1 or (pet is not None and np.dtype(pet) != _F32):
        return None
    found = _decoded(b, prod, consts)
    if found is None:
        return None
    w, parity = found
    return w, bool(bc[0] ^ parity)  # contracting the stored constant's axis 1: it is [N, K]


def _decode_rows(b: Builder, rows: Var, outvars: list[Var]) -> None:
    """Emit the decoding chain on ``rows`` (``uint16``) into ``outvars``."""
    wide = b.emit1(pr.CONVERT_ELEMENT_TYPE, [rows], {"new_dtype": _U32, "weak_type": False})
    sixteen = b.splat(16, wide.aval)
    shifted = b.emit1(pr.SHIFT_LEFT, [wide, sixteen], {})
    b.emit(pr.BITCAST_CONVERT_TYPE, [shifted], {"new_dtype": _F32}, outvars)


@register
def bf16_weights(p: Program) -> Program:
    """Products whose ``B`` is a decoded bfloat16 constant become ``native_gemm_bf16`` on the bits;
    row gathers of such a table gather the bits (see the module docstring)."""
    consts = {v.id for v in p.constvars if np.dtype(v.aval.dtype) == _U16 and v.aval.ndim == 2}
    if not consts:
        return p
    prod = {v.id: e for e in p.eqns for v in e.outvars}
    b = Builder(p)
    changed = False
    for e in p.eqns:
        ins = [b.read(a) for a in e.inputs]
        found = _product(e, prod, consts)
        if found is not None:
            w, trans_b = found
            x = ins[0]
            shape = tuple(x.aval.shape)
            m = functools.reduce(operator.mul, shape[:-1], 1)
            x2 = b.reshape(x, (m, shape[-1]))
            if len(shape) == 2:
                b.emit(gemm_bf16_p, [x2, w], {"trans_b": trans_b}, e.outvars)
            else:
                out = b.emit1(gemm_bf16_p, [x2, w], {"trans_b": trans_b})
                b.emit(pr.RESHAPE, [out], {"new_sizes": tuple(e.outvars[0].aval.shape)}, e.outvars)
            changed = True
            continue
        if e.prim is pr.TAKE and e.params["axis"] == 0:
            table = _decoded(e.inputs[0], prod, consts)
            if table is not None and table[1] == 0:
                rows = b.emit1(pr.TAKE, [table[0], ins[1]], dict(e.params))
                _decode_rows(b, rows, list(e.outvars))
                changed = True
                continue
        b.emit(e.prim, ins, e.params, e.outvars)
    return dce(b.finish()) if changed else p
