"""The eager fast path of elementwise NumPy-level functions: a cached plan per operand signature.

Outside any trace, ``ember.numpy.add(x, 1)`` (and ``x + 1``) used to promote, convert and
broadcast through one primitive ``bind`` each, re-running abstract evaluation every time: tens of
microseconds for a 4-element add. Here the first call with a given *operand signature* (for each
operand: an Array's dtype, weak type and shape, or a Python scalar's type) traces the function's
lax-level body once on abstract values into a small Program, and keeps a plan: the promoted dtype,
how each operand becomes an input (scalar cast with the same overflow check, array conversion with
``convert_element_type``'s semantics, broadcasting as a NumPy view) and the Program, whose
equations then run straight from their NumPy implementations. Later calls with that signature
skip tracing, abstract evaluation and the intermediate Arrays.

The results are those of the general path, bit for bit: the same promotion, the same primitive
implementations, the same result dtypes and weak types (``tests/numpy/test_eager_fast.py``
compares the two over dtype/shape/scalar combinations). Anything the plan does not cover (a
tracer, a NumPy array or list operand, an active trace, a body with sub-programs) takes the
general path.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from ember._src import core
from ember._src import dtypes as dt
from ember._src import jit as _jit
from ember._src import shapes as sh
from ember._src.array import SMALL_MAX, Array, aligned_copy, small_buffer
from ember._src.core import ShapedArray
from ember._src.prims import elementwise as ew
from ember._src.program import Literal, Program, trace_to_program

ENABLED = core.EAGER_FAST_PATH
_SCALARS = frozenset((bool, int, float, complex))
_MAX_PLANS = 4096
_UNSUPPORTED = object()
_convert = ew.convert_element_type_p.impl
# the primitives declared in prims/elementwise.py: NumPy-broadcasting implementations, one
# output element per input element
_ELEMENTWISE = frozenset(v for v in vars(ew).values() if isinstance(v, core.Primitive))


class _Plan:
    """How to run one elementwise function for one operand signature."""

    __slots__ = ("name", "dtype", "weak", "shape", "prep", "program", "out_aval", "fix_shape", "direct",
                 "into")

    def __init__(self, name: str, dtype: np.dtype, weak: bool, shape: tuple, prep: list,
                 program: Program):
        self.name, self.dtype, self.weak, self.shape = name, dtype, weak, shape
        # per operand: (is_scalar, convert: bool, broadcast: bool); a body of elementwise
        # primitives broadcasts as NumPy does, so its operands need no materialized broadcast
        elementwise = all(e.prim in _ELEMENTWISE for e in program.eqns)
        self.prep = [(sc, cv, bc and not elementwise) for sc, cv, bc in prep]
        self.fix_shape = elementwise and any(bc for _, _, bc in prep)
        self.program = program
        self.out_aval = program.out_avals[0]
        # a body of one equation applied to the inputs in order (add, sin, ...): called directly
        self.direct = None
        # a NumPy ufunc whose small result is computed straight into an aligned slab chunk
        # (array.small_buffer) instead of into a NumPy array then copied there: (ufunc, nbytes)
        self.into = None
        if len(program.eqns) == 1:
            e = program.eqns[0]
            if not e.prim.multiple_results and list(e.inputs) == list(program.invars) and \
                    list(program.outvars) == list(e.outvars):
                impl = e.prim.impl
                inner = getattr(impl, "upcast_inner", None)
                if inner is not None and not dt.is_low_precision(dtype):
                    # upcast_lowp would only set the error state: the operands are all `dtype`
                    impl = functools.partial(core.call_ignoring_fp_errors, inner)
                    if not any(cv or bc for _, cv, bc in self.prep):
                        self.into = _into(inner, e.params, dtype, shape, self.out_aval)
                self.direct = (impl, e.params)

    def __call__(self, args: tuple) -> Array:
        dtype, shape = self.dtype, self.shape
        into = self.into
        if into is not None:  # operands used as they are: Arrays' values, converted Python scalars
            fn, nbytes, out_dtype, weak = into
            name = self.name
            vals = [_scalar(name, a, dtype) if type(a) in _SCALARS else a._value for a in args]
            out = small_buffer(shape, out_dtype, nbytes)
            core.call_ignoring_fp_errors(fn, *vals, out=out)
            out.setflags(write=False)
            return Array(out, weak)
        vals = []
        for a, (scalar, convert, bcast) in zip(args, self.prep):
            if scalar:
                v = _scalar(self.name, a, dtype)
            else:
                v = a._value
                if convert:
                    v = _convert(v, new_dtype=dtype, weak_type=self.weak)
            if bcast:
                v = np.broadcast_to(v, shape)
            vals.append(v)
        direct = self.direct
        if direct is not None:  # its output is the program's: the dtype is checked below
            out = direct[0](*vals, **direct[1])
            if type(out) is not np.ndarray:
                out = np.asarray(out)
        else:
            out = _run(self.program, vals)
        if out.dtype != self.out_aval.dtype:
            out = out.astype(self.out_aval.dtype)
        if self.fix_shape and out.shape != shape:
            out = np.broadcast_to(out, shape)
        return Array(aligned_copy(out, owned=True), self.out_aval.weak_type)


def _into(fn: Any, params: dict, dtype: np.dtype, shape: tuple, out: ShapedArray) -> tuple | None:
    """``(fn, nbytes, out.dtype, out.weak_type)`` when ``fn`` is a NumPy ufunc without parameters
    whose loop for operands of ``dtype`` gives ``out.dtype`` (so writing into such a buffer casts
    nothing) and the result of ``shape`` fits a small buffer; None otherwise."""
    out_dtype = out.dtype
    if not isinstance(fn, np.ufunc) or params or fn.nout != 1 or not all(isinstance(d, int) for d in shape):
        return None
    nbytes = sh.size(shape) * out_dtype.itemsize
    if not 0 < nbytes <= SMALL_MAX:
        return None
    try:
        loop = fn.resolve_dtypes((dtype,) * fn.nin + (None,))
    except (TypeError, AttributeError):  # no loop for dtype (the general path raises), old NumPy
        return None
    return (fn, nbytes, out_dtype, out.weak_type) if loop[-1] == out_dtype else None


# Python int and bool operands converted to a dtype, as read-only 0-d arrays: (type, value, dtype) ->
# array. Bounded (cleared when full).
_SCALAR_VALUES: dict[tuple, np.ndarray] = {}
_EXACT_FLOATS = frozenset(np.dtype(d) for d in (np.float32, np.float64, np.complex64, np.complex128))


def _scalar(name: str, a: Any, dtype: np.dtype) -> np.ndarray:
    """Python scalar ``a`` as a 0-d array of ``dtype``, as ``np.asarray(a).astype(dtype)`` (an int
    out of the range of an integer ``dtype`` raises OverflowError naming ``name``)."""
    t = type(a)
    if t is int or t is bool:
        key = (t, a, dtype)
        v = _SCALAR_VALUES.get(key)
        if v is None:
            if t is int and dtype.kind in "iu":
                info = np.iinfo(dtype)
                if not info.min <= a <= info.max:
                    raise OverflowError(f"{name}: Python int {a} is out of bounds for {dtype}")
            v = np.asarray(a).astype(dtype)
            v.flags.writeable = False
            if len(_SCALAR_VALUES) >= 1024:
                _SCALAR_VALUES.clear()
            _SCALAR_VALUES[key] = v
        return v
    if t is float and dtype in _EXACT_FLOATS:  # one rounding from the double, as astype
        return np.array(a, dtype)
    return np.asarray(a).astype(dtype)


def _run(p: Program, vals: list) -> np.ndarray:
    env: dict = dict(zip(p.invars, vals))
    for e in p.eqns:
        ins = [a.val if type(a) is Literal else env[a] for a in e.inputs]
        outs = e.prim.impl(*ins, **e.params)
        if e.prim.multiple_results:
            for v, o in zip(e.outvars, outs):
                env[v] = np.asarray(o)
        else:
            o = np.asarray(outs)
            want = e.outvars[0].aval.dtype
            env[e.outvars[0]] = o if o.dtype == want else o.astype(want)
    res = p.outvars[0]
    return res.val if type(res) is Literal else env[res]


def _build(name: str, lax_fn: Callable, to: str | None, sig: tuple) -> Any:
    typed = [dt.dtype_and_weak(t(0)) if isinstance(t, type) else (t[0], t[1]) for t in sig]
    dtype, weak = dt.promote(*typed)
    if to == "inexact" and not dt.is_inexact(dtype):
        dtype = dt.to_float(dtype) if not weak else dt.float32
    shapes = [() if isinstance(t, type) else t[2] for t in sig]
    shape = sh.broadcast_shapes(*shapes, op=name)
    prep = []
    for t, s, (d, w) in zip(sig, shapes, typed):
        scalar = isinstance(t, type)
        prep.append((scalar, not scalar and (d != dtype or w != weak), s != shape))
    in_avals = [ShapedArray(shape, dtype, weak) for _ in sig]
    prog, _ = trace_to_program(lambda *xs: [lax_fn(*xs)], in_avals)
    if prog.consts or len(prog.outvars) != 1 or any(_has_subprogram(e.params) for e in prog.eqns):
        return _UNSUPPORTED
    return _Plan(name, dtype, weak, shape, prep, prog)


def _has_subprogram(params: dict) -> bool:
    return any(isinstance(v, Program)
               or isinstance(v, (tuple, list)) and any(isinstance(x, Program) for x in v)
               for v in params.values())


_PLANS: dict[tuple, Any] = {}


def try_fast(name: str, lax_fn: Callable, to: str | None, args: tuple) -> Any:
    """The result of ``lax_fn`` on the promoted, broadcast ``args``, or ``None`` when the fast
    path does not apply (the caller then takes the general path)."""
    if core.dynamic_trace_active() or not ENABLED.value:
        return None
    key: list = [lax_fn, to]  # then per operand: (dtype, weak, shape) of an Array, a scalar's type
    arrays = False
    for a in args:
        t = type(a)
        if t is Array:
            v = a._value
            if v is None:
                return None
            key.append((v.dtype, a._weak, v.shape))
            arrays = True
        elif t in _SCALARS:
            key.append(t)
        else:
            return None
    if not arrays:
        return None
    key = tuple(key)
    plan = _PLANS.get(key)
    if plan is None:
        try:
            plan = _build(name, lax_fn, to, key[2:])
        except Exception:  # the general path raises its own, user-facing error
            return None
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        _PLANS[key] = plan
    if plan is _UNSUPPORTED:
        return None
    return plan(args)


def clear_plans() -> None:
    """Drop every cached eager plan, scalar conversion and abstract evaluation."""
    _PLANS.clear()
    _SCALAR_VALUES.clear()
    core.clear_eager_cache()


_jit.CLEAR_HOOKS.append(clear_plans)  # ember.clear_caches() empties the plans too
