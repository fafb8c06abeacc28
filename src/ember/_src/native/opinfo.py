"""The native backend's op-info registry: what the backend knows about each primitive, in one place.

:data:`REGISTRY` maps a :class:`~ember._src.core.Primitive` object to its :class:`OpInfo`: the
:class:`OpCategory` (how the scheduler treats it), the C renderer of an elementwise op (real and
complex), the call lowering of a native call step (emitter, acceptance test, workspace request,
complex support), the operand a call may overwrite in place, whether the result may alias its
operand's storage, the reduction kind, the parameter naming an inlined sub-program, and a short
detail for the feature table. Each lowering module registers the entries it implements beside its
code (:mod:`.c_ops` and :mod:`.c_complex` the elementwise renderers, :mod:`.kernel` movement,
:mod:`.calls`/:mod:`.lapack`/:mod:`.fft` the calls, :mod:`.loops` control flow, ...); the groups
the passes and the scheduler test (:func:`is_elementwise`, :func:`is_fusible`, :func:`group`, ...)
are derived from the registry, never listed by hand. The questions the earlier stages ask of the
lowerings (:func:`has_lowering`, :func:`lowerable`, :func:`workspace_bytes`,
:func:`inplace_operand`, :func:`reduce_kind`, :func:`op_cost`) are answered here, from the
registry, so the scheduler and the planner never import an emitter.

A primitive the native backend does not lower has no entry; it declares
``prim.na("lowering", reason)`` beside its other rules instead (``tests/test_registry.py`` checks
that every primitive has one or the other). ``Primitive.lowering`` is filled from the entry
(:func:`declare`), so the rule table and ``docs/FEATURES.md`` read this registry.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# the primitives the entries name are declared by prims (lax), control_flow (scan, while, cond)
# and custom_derivatives (checkpoint, custom_jvp_call, custom_vjp_call)
from ember._src import control_flow, core, custom_derivatives, prims  # noqa: F401
from ember._src import shapes as sh
from ember._src.core import Primitive
from ember._src.native.base.c_types import SUPPORTED_DTYPES, is_bool, is_complex
from ember._src.program import Eqn

#: ``render(args, in_dtypes, out_dtype, params) -> C expression`` of an elementwise op
Renderer = Callable[[Sequence[str], Sequence[np.dtype], np.dtype, dict], str]


class OpCategory(enum.Enum):
    """How the native backend runs a primitive."""

    ELEMENTWISE = "elementwise"  # a C expression per element (c_ops / c_complex)
    MOVEMENT = "movement"  # read through an index expression, no copy (kernel.py)
    INDEXED = "indexed"  # a value computed from the index or gathered (iota, take)
    REDUCTION = "reduction"  # a reduction loop with fused prologue/epilogue (kernel.py)
    CONTRACTION = "contraction"  # a matrix product (BLAS or ember's GEMM kernel)
    CALL = "call"  # one block of C in the program (calls.py, lapack.py, fft.py)
    CONTROL = "control flow"  # scan / while / cond bodies compiled into the entry point (loops.py)
    INLINED = "inlined"  # a call of a sub-program spliced into its caller (passes.inline_calls)
    IDENTITY = "identity"  # the operand itself (passes.simplify)

    @property
    def label(self) -> str:
        """The feature table's summary (all kernel categories share one, all calls another)."""
        return _LABEL[self]


#: the categories whose equations the scheduler may fuse into one kernel
FUSIBLE_CATEGORIES = frozenset({OpCategory.ELEMENTWISE, OpCategory.MOVEMENT, OpCategory.INDEXED,
                                OpCategory.REDUCTION, OpCategory.IDENTITY})

_KERNEL, _CALL = ("fused kernel", "native kernel"), ("native call", "native call")
# category -> (feature-table label, prefix of ``Primitive.lowering``)
_TEXT = {OpCategory.ELEMENTWISE: _KERNEL, OpCategory.MOVEMENT: _KERNEL, OpCategory.INDEXED: _KERNEL,
         OpCategory.REDUCTION: _KERNEL, OpCategory.CONTRACTION: _CALL, OpCategory.CALL: _CALL,
         OpCategory.CONTROL: ("native loop", "native loop"),
         OpCategory.INLINED: ("inlined", "native: inlined"),
         OpCategory.IDENTITY: ("removed (identity)", "native: identity")}
_LABEL = {c: t[0] for c, t in _TEXT.items()}
_PREFIX = {c: t[1] for c, t in _TEXT.items()}


@dataclass(frozen=True)
class CallLowering:
    """A native call step's lowering (see :mod:`.calls`): ``emit(eqn, cc) -> C lines``,
    ``accepts(eqn)`` (otherwise the equation stays a fallback step), ``workspace(eqn)`` bytes of
    arena scratch (an int, or a ``DimExpr`` for symbolic sizes), whether the emitter handles complex
    operands, whether it handles symbolic (runtime) sizes, and ``epilogue(eqn)``: whether it applies
    a per-feature bias and ReLU that follow the step in its own stores (the schedule then fuses them
    into the step: :mod:`.scheduling.conv_epilogue`)."""

    emit: Callable[[Eqn, Any], list[str]]
    accepts: Callable[[Eqn], bool] = lambda e: True
    workspace: Callable[[Eqn], Any] = lambda e: 0
    complex_ok: bool = False
    symbolic_ok: bool = False
    epilogue: Callable[[Eqn], bool] = lambda e: False


@dataclass
class OpInfo:
    """What the native backend knows about one primitive."""

    primitive: Primitive
    category: OpCategory
    detail: str  # what the lowering does and where it lives, e.g. "reduction loop ... (kernel.py)"
    render: Renderer | None = None  # elementwise C expression on real/bool/int values
    complex_render: Renderer | None = None  # the same on complex operands or results
    call: CallLowering | None = None  # CALL: the block of C
    inplace: int | None = None  # operand whose buffer the result may reuse (the planner decides)
    alias: bool = False  # the result may share its operand's storage (a reshape)
    reduce_kind: str | None = None  # REDUCTION: sum prod max min and or argmax argmin
    inline_param: str | None = None  # INLINED: the parameter holding the sub-program

    @property
    def description(self) -> str:
        """The text stored in ``Primitive.lowering``."""
        return f"{_PREFIX[self.category]}: {self.detail}"


REGISTRY: dict[Primitive, OpInfo] = {}


def primitive(p: Primitive | str) -> Primitive:
    """``p`` itself, or the declared primitive named ``p``."""
    if isinstance(p, Primitive):
        return p
    if p not in core.PRIMITIVES:
        raise KeyError(f"op-info entry for {p!r}: no primitive of that name is declared")
    return core.PRIMITIVES[p]


def register(p: Primitive | str, category: OpCategory, detail: str, **fields: Any) -> OpInfo:
    """Add (or extend) the entry of ``p``; ``fields`` are :class:`OpInfo` fields. Registering a
    second renderer (the complex one) keeps the first; a different category is an error."""
    prim = primitive(p)
    info = REGISTRY.get(prim)
    if info is None:
        info = REGISTRY[prim] = OpInfo(prim, category, detail)
    elif info.category is not category:
        raise ValueError(f"{prim.name}: registered as {info.category.name}, not {category.name}")
    for k, v in fields.items():
        if not hasattr(info, k):
            raise TypeError(f"OpInfo has no field {k!r}")
        setattr(info, k, v)
    return info


def info(p: Primitive) -> OpInfo | None:
    """The entry of ``p``, or None when the native backend has no lowering for it."""
    return REGISTRY.get(p)


def category(p: Primitive) -> OpCategory | None:
    i = REGISTRY.get(p)
    return i.category if i is not None else None


def is_elementwise(p: Primitive) -> bool:
    return category(p) is OpCategory.ELEMENTWISE


def is_movement(p: Primitive) -> bool:
    return category(p) is OpCategory.MOVEMENT


def is_reduction(p: Primitive) -> bool:
    return category(p) is OpCategory.REDUCTION


def is_fusible(p: Primitive) -> bool:
    """Whether the scheduler may put ``p``'s equations in a fused kernel."""
    return category(p) in FUSIBLE_CATEGORIES


def call_lowering(p: Primitive) -> CallLowering | None:
    i = REGISTRY.get(p)
    return i.call if i is not None else None


def group(cat: OpCategory) -> frozenset[Primitive]:
    """Every registered primitive of category ``cat``."""
    return frozenset(p for p, i in REGISTRY.items() if i.category is cat)


def names(cat: OpCategory) -> frozenset[str]:
    """The names of :func:`group` ``(cat)``."""
    return frozenset(p.name for p in group(cat))


def native_kind(p: Primitive) -> str:
    """A one-word summary of how the native backend runs ``p``: fused kernel, native call, native
    loop, inlined, removed (identity), fallback step, or never lowered."""
    i = REGISTRY.get(p)
    if i is not None:
        return i.category.label
    return "fallback step" if "fallback step" in p.not_applicable.get("lowering", "") else "never lowered"


def declare() -> None:
    """Fill ``Primitive.lowering`` from the registry (a primitive that declared
    ``na("lowering", ...)`` keeps its reason; an entry for one is an error)."""
    for p, i in REGISTRY.items():
        if "lowering" in p.not_applicable:
            raise ValueError(f"{p.name}: has an op-info entry and declares no lowering "
                             f"({p.not_applicable['lowering']})")
        p.lowering = i.description


class RendererTable(MutableMapping[str, Renderer]):
    """The elementwise C renderers of one kind (``field``: ``"render"`` or ``"complex_render"``) as
    a name-keyed view of :data:`REGISTRY`: ``table["exp"] = fn`` registers ``fn`` on the entry of
    the ``exp`` primitive (an :attr:`OpCategory.ELEMENTWISE` entry with ``detail`` when it has
    none yet); deleting the last renderer of an elementwise entry removes the entry (the op then
    runs as a fallback step). Nothing is stored here."""

    def __init__(self, field: str, detail: str):
        self.field, self.detail = field, detail

    def __getitem__(self, name: str) -> Renderer:
        i = REGISTRY.get(core.PRIMITIVES.get(name))  # type: ignore[arg-type]
        fn = getattr(i, self.field) if i is not None else None
        if fn is None:
            raise KeyError(name)
        return fn

    def __setitem__(self, name: str, fn: Renderer) -> None:
        prim = primitive(name)
        cat = REGISTRY[prim].category if prim in REGISTRY else OpCategory.ELEMENTWISE
        register(prim, cat, self.detail, **{self.field: fn})

    def __delitem__(self, name: str) -> None:
        self[name]  # noqa: B018 - KeyError when absent
        i = REGISTRY[core.PRIMITIVES[name]]
        setattr(i, self.field, None)
        if i.category is OpCategory.ELEMENTWISE and i.render is None and i.complex_render is None:
            del REGISTRY[i.primitive]

    def __iter__(self) -> Iterator[str]:
        return iter([p.name for p, i in REGISTRY.items() if getattr(i, self.field) is not None])

    def __len__(self) -> int:
        return sum(getattr(i, self.field) is not None for i in REGISTRY.values())


# ---------------------------------------------------------------------------------------------
# Costs (rough cycles per element): what fusion may recompute
# ---------------------------------------------------------------------------------------------

EXPENSIVE = 20
COSTS: dict[Primitive, int] = {}  # primitives not listed cost 1


def set_cost(p: Primitive | str, cost: int) -> None:
    """Set the fusion cost of ``p`` (a name must be a declared primitive: a typo is an error)."""
    COSTS[primitive(p)] = cost


def op_cost(p: Primitive | str) -> int:
    """Rough cycles per element of ``p`` (1 unless set)."""
    prim = core.PRIMITIVES.get(p) if isinstance(p, str) else p
    return COSTS.get(prim, 1) if prim is not None else 1


for _name, _cost in (("div", 4), ("rem", 6), ("sqrt", 4), ("rsqrt", 5), ("integer_pow", 2), ("select_n", 1)):
    set_cost(_name, _cost)
for _name in ("pow", "exp", "exp2", "log", "log1p", "expm1", "tanh", "logistic", "sin", "cos", "tan", "asin",
              "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "cbrt", "erf", "erfc", "lgamma",
              "atan2", "nextafter"):
    set_cost(_name, EXPENSIVE)


# ---------------------------------------------------------------------------------------------
# What the lowerings accept (asked by the scheduler and the planner)
# ---------------------------------------------------------------------------------------------


def has_lowering(name: str, in_dtypes: Sequence[np.dtype], out_dtype: np.dtype) -> bool:
    """Whether the elementwise primitive ``name`` has a C renderer for these dtypes (the complex
    renderer when any of them is complex)."""
    dts = [np.dtype(d) for d in (*in_dtypes, out_dtype)]
    if any(d not in SUPPORTED_DTYPES for d in dts):
        return False
    i = REGISTRY.get(core.PRIMITIVES.get(name))  # type: ignore[arg-type]
    if i is None:
        return False
    return (i.complex_render if any(is_complex(d) for d in dts) else i.render) is not None


def reduce_kind(prim: Primitive, dtype: np.dtype) -> str | None:
    """Canonical reduction kind; bool sum/max are ``or`` and bool prod/min are ``and``. None when
    the reduction has no C lowering for ``dtype`` (complex values: only sums lower)."""
    k = REGISTRY[prim].reduce_kind
    assert k is not None, prim.name
    if is_complex(dtype):
        return k if k == "sum" else None
    if is_bool(dtype):
        k = {"sum": "or", "max": "or", "prod": "and", "min": "and"}.get(k, k)
    return k


def lowerable(e: Eqn) -> bool:
    """Whether equation ``e`` runs as a native call step."""
    low = call_lowering(e.prim)
    if low is None:
        return False
    avals = [a.aval for a in e.inputs] + [v.aval for v in e.outvars]
    if any(np.dtype(a.dtype) not in SUPPORTED_DTYPES for a in avals):
        return False
    if not low.complex_ok and any(is_complex(np.dtype(a.dtype)) for a in avals):
        return False
    if not low.symbolic_ok and any(not isinstance(d, int) for a in avals for d in a.shape):
        return False
    return bool(low.accepts(e))


def inplace_operand(e: Eqn) -> int | None:
    """The operand whose buffer ``e``'s result may reuse (the planner decides), or None."""
    i = info(e.prim)
    return i.inplace if i is not None and i.call is not None else None


def workspace_bytes(e: Eqn) -> Any:
    """Bytes of arena scratch the call step of ``e`` needs (0: none; a ``DimExpr`` when symbolic)."""
    low = call_lowering(e.prim)
    if low is None:
        return 0
    ws = low.workspace(e)
    return ws if isinstance(ws, sh.DimExpr) else int(ws)
