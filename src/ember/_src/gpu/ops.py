"""The GPU backends' op table: what a device kernel computes per element, for each primitive.

One table for every device language (the renderers :mod:`.wgsl` and :mod:`.cuda` each map the
generic op names below to their syntax, as tinygrad's renderers do). An entry says how a primitive
is computed: ``infix`` (``a OP b``), ``prefix`` (``OP a``), ``cmp`` (a comparison giving bool),
``fn`` (a named function of the language's table, float operands only unless ``ints``), or
``special`` (rendered by a helper of :mod:`.kernels`: ``select_n``, ``convert_element_type``,
``integer_pow``). Movement, reductions and products are scheduled by :mod:`.kernels`, not here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ember._src.core import Primitive
from ember._src.rewrites.inline import INLINED  # calls spliced into the caller -> their sub-program's param


@dataclass(frozen=True)
class Op:
    """How one elementwise primitive is computed."""

    kind: str  # infix | prefix | cmp | fn | special
    sym: str  # the operator, or the generic function name a renderer's table maps
    ints: bool = False  # defined on integer operands too (fn entries)
    bools: bool = False  # defined on bool operands (infix/prefix entries)


_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
_BITS = {"and": "&", "or": "|", "xor": "^"}
_CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_FLOAT_FNS = ("exp", "exp2", "log", "log1p", "expm1", "tanh", "sin", "cos", "tan", "asin", "acos", "atan",
              "sinh", "cosh", "asinh", "acosh", "atanh", "sqrt", "rsqrt", "floor", "ceil", "logistic",
              "pow", "atan2", "is_finite", "round", "erf", "erfc")
_INT_FNS = ("max", "min", "abs", "sign", "rem")

OPS: dict[str, Op] = {
    **{k: Op("infix", v) for k, v in _INFIX.items()},
    **{k: Op("infix", v, bools=True) for k, v in _BITS.items()},
    **{k: Op("cmp", v) for k, v in _CMP.items()},
    **{k: Op("fn", k) for k in _FLOAT_FNS},
    **{k: Op("fn", k, ints=True) for k in _INT_FNS},
    "neg": Op("prefix", "-"),
    "not": Op("prefix", "!", bools=True),
    "select_n": Op("special", "select_n"),
    "convert_element_type": Op("special", "convert"),
    "integer_pow": Op("special", "integer_pow"),
}
"""Elementwise primitives by name."""

#: primitives that read their operand through an index map (no arithmetic)
MOVEMENT = frozenset({"broadcast_in_dim", "reshape", "transpose", "squeeze", "expand_dims", "slice", "rev",
                      "iota", "pad", "concatenate", "take"})
#: primitives that are their operand
IDENTITY = frozenset({"copy", "copy_p", "stop_gradient", "optimization_barrier", "ensure_shape"})
#: reductions -> the combining op (``sum``, ``max``, ``min``, ``prod``, ``and``, ``or``)
REDUCTIONS = {"reduce_sum": "sum", "reduce_max": "max", "reduce_min": "min", "reduce_prod": "prod",
              "reduce_and": "and", "reduce_or": "or", "argmax": "argmax", "argmin": "argmin"}
#: a named axis's size as a value (read from the kernel's size arguments)
SIZES = frozenset({"dim_as_value"})
#: matrix products (a tiled kernel with workgroup memory)
CONTRACTIONS = frozenset({"dot_general"})


def supported(name: str) -> bool:
    """Whether the GPU kernels compute primitive ``name``."""
    return (name in OPS or name in MOVEMENT or name in IDENTITY or name in REDUCTIONS or name in INLINED
            or name in CONTRACTIONS or name in SIZES)


class _Kinds:
    """The op kinds the shared ``simplify`` asks of the GPU backends (:mod:`ember._src.rewrites`):
    the elementwise ops of :data:`OPS`, and the movement that reads one operand through an index
    map (``iota`` and ``take`` compute or gather, as in the native backend)."""

    _MOVES = MOVEMENT - {"iota", "take"}

    def is_elementwise(self, p: Primitive) -> bool:
        return p.name in OPS

    def is_movement(self, p: Primitive) -> bool:
        return p.name in self._MOVES


KINDS = _Kinds()
"""The GPU backends' :class:`ember._src.rewrites.identities.OpKinds`."""
