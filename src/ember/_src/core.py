"""The core: abstract values, primitives, the interpreter stack and ``bind``.

Every operation in ember is a :class:`Primitive` applied with :meth:`Primitive.bind`. ``bind``
finds the innermost active interpreter (a *trace*) among its arguments and hands the primitive to
it: the eval trace runs the NumPy implementation, the JVP trace pushes tangents, the batch trace
handles a vmapped axis, the program trace records an equation. Transformations nest by levels, as
in JAX's autodidax design.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from ember._src import dtypes as dt
from ember._src import flags
from ember._src import shapes as sh
from ember.errors import (
    ConcretizationTypeError,
    DTypeError,
    ShapeError,
    TracerArrayConversionError,
    TracerBoolConversionError,
    TracerError,
    TracerIntegerConversionError,
    UnexpectedTracerError,
)

# ---------------------------------------------------------------------------------------------
# Abstract values
# ---------------------------------------------------------------------------------------------


class ShapedArray:
    """The abstract value of an array: a (possibly symbolic) shape, a dtype, and weak typing."""

    __slots__ = ("shape", "dtype", "weak_type")

    def __init__(self, shape: Sequence[sh.Dim], dtype: Any, weak_type: bool = False):
        self.shape = tuple(shape)
        self.dtype = dtype if isinstance(dtype, np.dtype) else dt.canonicalize(dtype)
        self.weak_type = bool(weak_type)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> sh.Dim:
        return sh.size(self.shape)

    def update(self, shape: Any = None, dtype: Any = None, weak_type: Any = None) -> ShapedArray:
        return ShapedArray(self.shape if shape is None else shape,
                           self.dtype if dtype is None else dtype,
                           self.weak_type if weak_type is None else weak_type)

    def strip_weak(self) -> ShapedArray:
        return ShapedArray(self.shape, self.dtype, False)

    def str_short(self) -> str:
        name = _DTYPE_SHORT.get(self.dtype, str(self.dtype))
        return f"{name}[{','.join(str(d) for d in self.shape)}]"

    def __repr__(self) -> str:
        return f"ShapedArray({self.str_short()}{', weak' if self.weak_type else ''})"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, ShapedArray) and self.shape == other.shape
                and self.dtype == other.dtype and self.weak_type == other.weak_type)

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype, self.weak_type))


_DTYPE_SHORT = {dt.bool_: "bool", dt.int8: "i8", dt.int16: "i16", dt.int32: "i32", dt.int64: "i64",
                dt.uint8: "u8", dt.uint16: "u16", dt.uint32: "u32", dt.uint64: "u64",
                dt.float16: "f16", dt.bfloat16: "bf16", dt.float32: "f32", dt.float64: "f64",
                dt.complex64: "c64", dt.complex128: "c128"}


def get_aval(x: Any) -> ShapedArray:
    """Abstract value of an ember array, tracer, NumPy array or Python scalar."""
    aval = getattr(x, "aval", None)
    if isinstance(aval, ShapedArray):
        return aval
    if isinstance(x, (bool, int, float, complex)) and not isinstance(x, np.generic):
        return ShapedArray((), dt.python_scalar_dtype(x), not isinstance(x, bool))
    if isinstance(x, (np.ndarray, np.generic)):
        return ShapedArray(x.shape, dt.canonicalize(x.dtype), False)
    raise TypeError(f"value of type {type(x).__name__} is not a valid ember array: {x!r}")


# ---------------------------------------------------------------------------------------------
# Primitives
# ---------------------------------------------------------------------------------------------

RULE_KINDS = ("impl", "abstract_eval", "jvp", "transpose", "batch", "lowering")


class Primitive:
    """A primitive operation with its rules declared beside it.

    ``impl(*np_arrays, **params)`` is the NumPy reference; ``abstract_eval(*avals, **params)``
    infers dtypes and (symbolic) shapes; ``jvp``, ``transpose`` (linear primitives only),
    ``batch`` and ``lowering`` are filled by their modules. ``not_applicable[kind]`` records why a
    rule does not apply, which the registry test accepts in place of the rule. An ``effectful``
    primitive (a debug callback) matters for what it does, not for its results: passes never drop,
    merge, fold or reorder it (see :func:`ember._src.program.eqn_effectful`).
    """

    def __init__(self, name: str, *, multiple_results: bool = False, linear: bool = False,
                 effectful: bool = False):
        if name in PRIMITIVES:
            raise ValueError(f"primitive {name!r} declared twice")
        self.name = name
        self.multiple_results = multiple_results
        self.linear = linear
        self.effectful = effectful
        self.impl: Callable | None = None
        # eager calls only (not the reference interpreter): a faster ``impl`` with its signature and
        # results, e.g. dot_general on the native GEMM kernel (set by a backend); None: ``impl``
        self.eager_impl: Callable | None = None
        self.abstract_eval: Callable | None = None
        self.jvp: Callable | None = None
        self.transpose: Callable | None = None
        self.batch: Callable | None = None
        self.lowering: Any = None
        # what a cost model counts per output element (``aot.estimate_cost``): "transcendental",
        # "arithmetic" (one flop), "reduction" (input - output flops), "contraction" (2 M N K) or
        # "free" (data movement, conversions); None: not classified (counts nothing)
        self.cost_class: str | None = None
        self.not_applicable: dict[str, str] = {}
        PRIMITIVES[name] = self

    def __repr__(self) -> str:
        return self.name

    def bind(self, *args: Any, **params: Any) -> Any:
        if _state.dynamic is None and EAGER_FAST_PATH.value:
            array_type = _eager_array_type[0]
            for a in args:
                if type(a) is not array_type:
                    break
            else:  # every operand a concrete Array and no trace can see the call: run it now
                return eager_bind(self, args, params)
        trace = find_top_trace(args)
        tracers = [trace.full_raise(a) for a in args]
        outs = trace.process_primitive(self, tracers, params)
        if self.multiple_results:
            return [full_lower(o) for o in outs]
        return full_lower(outs[0])

    def abstract(self, avals: Sequence[ShapedArray], params: dict) -> list[ShapedArray]:
        """Run abstract evaluation and return a list of output avals."""
        out = self.abstract_eval(*avals, **params)
        return list(out) if self.multiple_results else [out]

    def na(self, kind: str, reason: str) -> None:
        """Declare that rule ``kind`` does not apply to this primitive, and why."""
        self.not_applicable[kind] = reason


PRIMITIVES: dict[str, Primitive] = {}


# ---------------------------------------------------------------------------------------------
# Traces and the interpreter stack
# ---------------------------------------------------------------------------------------------


class MainTrace:
    """One active interpreter: its level in the stack, its trace class and its global data."""

    def __init__(self, level: int, trace_type: type, global_data: Any = None):
        self.level = level
        self.trace_type = trace_type
        self.global_data = global_data
        self.alive = True  # False once its transformation has returned (a tracer of it has leaked)

    def __repr__(self) -> str:
        return f"MainTrace({self.level}, {self.trace_type.__name__})"


class Trace:
    """An interpreter: lifts values into its tracers and processes primitives."""

    def __init__(self, main: MainTrace):
        self.main = main

    def pure(self, val: Any) -> Any:
        raise NotImplementedError

    lift = pure

    def process_primitive(self, prim: Primitive, tracers: list, params: dict) -> list:
        raise NotImplementedError

    def full_raise(self, val: Any) -> Any:
        if not isinstance(val, Tracer):
            return self.pure(val)
        level = self.main.level
        if val._trace.main is self.main:
            return val
        if val._trace.main.level < level:
            return self.lift(val)
        if val._trace.main.level > level:
            raise UnexpectedTracerError(f"a value traced at level {val._trace.main.level} escaped into "
                                        f"level {level}: a traced value leaked out of its transformation")
        raise TracerError("different traces at the same level")


class _TraceState:
    def __init__(self) -> None:
        self.stack: list[MainTrace] = []
        self.dynamic: MainTrace | None = None


_state = _TraceState()


@contextlib.contextmanager
def new_main(trace_type: type, global_data: Any = None) -> Iterator[MainTrace]:
    level = len(_state.stack)
    main = MainTrace(level, trace_type, global_data)
    _state.stack.append(main)
    try:
        yield main
    finally:
        _state.stack.pop()
        main.alive = False


@contextlib.contextmanager
def new_dynamic(main: MainTrace) -> Iterator[None]:
    prev, _state.dynamic = _state.dynamic, main
    try:
        yield
    finally:
        _state.dynamic = prev


def dynamic_trace_active() -> bool:
    return _state.dynamic is not None


def trace_depth() -> int:
    return len(_state.stack)


class Tracer:
    """A value inside a transformation; behaves like an array (operators come from ember.numpy)."""

    __array_priority__ = 1000
    _trace: Trace

    @property
    def aval(self) -> ShapedArray:
        raise NotImplementedError

    shape = property(lambda self: self.aval.shape)
    dtype = property(lambda self: self.aval.dtype)
    ndim = property(lambda self: self.aval.ndim)
    weak_type = property(lambda self: self.aval.weak_type)

    @property
    def size(self) -> sh.Dim:
        return self.aval.size

    def full_lower(self) -> Any:
        return self

    def to_concrete(self) -> np.ndarray:
        """The concrete value behind this tracer, or a :class:`ConcretizationTypeError` if there is none."""
        raise ConcretizationTypeError(
            f"a traced array of shape {self.aval.str_short()} was used where a concrete value is "
            "needed (Python bool/int/float, `if`, indexing with it, or NumPy conversion). Inside "
            "`jit`, mark the argument static (static_argnums/static_argnames) or use lax.cond / "
            "jnp.where / lax.while_loop instead of Python control flow.")

    def _concrete(self, error: type[TracerError]) -> np.ndarray:
        """:meth:`to_concrete`, its failure raised as ``error`` (JAX's class for the conversion)."""
        try:
            return self.to_concrete()
        except TracerError as e:
            if isinstance(e, error):
                raise
            raise error(str(e)) from None

    def __bool__(self) -> bool:
        return bool(self._concrete_scalar("bool", TracerBoolConversionError))

    def __int__(self) -> int:
        return int(self._concrete_scalar("int"))

    def __float__(self) -> float:
        return float(self._concrete_scalar("float"))

    def __complex__(self) -> complex:
        return complex(self._concrete_scalar("complex"))

    def __index__(self) -> int:
        if not dt.is_integer(self.aval.dtype) and self.aval.dtype != dt.bool_:
            raise TypeError(f"only integer arrays can be used as an index, got {self.aval.dtype}")
        return int(self._concrete_scalar("index", TracerIntegerConversionError))

    def _concrete_scalar(self, what: str, error: type[TracerError] = ConcretizationTypeError) -> Any:
        val = self._concrete(error)
        if val.size != 1:
            raise TypeError(f"{what}() of an array with {val.size} elements is ambiguous")
        return val.reshape(()).item()

    def item(self, *args: Any) -> Any:
        """The element as a Python scalar (a :class:`ConcretizationTypeError` when traced)."""
        return self._concrete(ConcretizationTypeError).item(*args)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        val = self._concrete(TracerArrayConversionError)
        return val if dtype is None else val.astype(dtype)

    def __len__(self) -> int:
        if not self.aval.shape:
            raise TypeError("len() of a 0-d array")
        return self.aval.shape[0]

    def __iter__(self) -> Iterator[Any]:
        if not self.aval.shape:
            raise TypeError("iteration over a 0-d array")
        n = self.aval.shape[0]
        if isinstance(n, sh.DimExpr):
            raise TracerError(f"cannot iterate over a symbolic axis of size {n}")
        return (self[i] for i in range(n))

    def __repr__(self) -> str:
        return f"{type(self).__name__}<{self.aval.str_short()}>"

    def __hash__(self) -> int:
        raise TypeError(f"unhashable type: {type(self).__name__} (ember arrays are not hashable)")


def find_top_trace(args: Sequence[Any]) -> Trace:
    top = None
    for x in args:
        if isinstance(x, Tracer):
            m = x._trace.main
            if not m.alive:
                raise UnexpectedTracerError(
                    f"a traced value ({x!r}) of a transformation that has already returned was used: it "
                    "leaked out (saved in a global, a list or an object from inside jit/grad/vmap). Return "
                    "it from the transformed function instead.")
            if top is None or m.level > top.level:
                top = m
    dyn = _state.dynamic
    if dyn is not None and (top is None or dyn.level > top.level):
        top = dyn
    if top is None:
        return EVAL_TRACE
    return top.trace_type(top)


def full_lower(val: Any) -> Any:
    if isinstance(val, Tracer):
        return val.full_lower()
    return val


_VAR_IDS = itertools.count()


def new_var_id() -> int:
    return next(_VAR_IDS)


# ---------------------------------------------------------------------------------------------
# Eager evaluation
# ---------------------------------------------------------------------------------------------


EAGER_FAST_PATH = flags.define_bool(
    "ember_eager_fast_path", True, "EMBER_EAGER_FAST_PATH",
    "eager calls reuse cached abstract evaluations (per primitive, parameters and operand types) and "
    "cached plans of elementwise NumPy-level functions; off: every call infers its types again")

# The eager executor cache: (primitive, operand (dtype, shape, weak) triples, parameters) -> the
# output avals abstract evaluation inferred. Abstract evaluation is a pure function of these (and of
# jax_enable_x64, whose change clears the cache), so an eager call with a seen signature skips it
# and goes straight to the primitive's NumPy implementation. Bounded: cleared when full.
_EAGER_MAX = 4096
_EAGER: dict[tuple, list[ShapedArray]] = {}
# the Array class and its result wrapper, installed by ember._src.array (which imports this module)
_eager_array_type: list[Any] = [None]
_eager_wrap: list[Callable] = []


def install_eager_array(array_type: type, wrap: Callable) -> None:
    """Register the eager array class and ``wrap(np_value, aval) -> Array`` (done by
    :mod:`ember._src.array` when it loads)."""
    _eager_array_type[0] = array_type
    _eager_wrap[:] = [wrap]


def clear_eager_cache() -> None:
    """Drop the cached abstract evaluations of eager calls."""
    _EAGER.clear()


flags.watch("jax_enable_x64", clear_eager_cache)


_PLAIN_PARAMS = frozenset((int, float, bool, complex, str, type(None)))


def _plain(v: Any) -> bool:
    """Whether parameter value ``v`` is plain data (numbers, strings, None, dtypes and tuples of
    them): a key holding it pins no user object (a sub-program, a callback and what they capture)."""
    t = type(v)
    if t in _PLAIN_PARAMS or isinstance(v, np.dtype):
        return True
    if t is tuple:
        for x in v:
            if not _plain(x):
                return False
        return True
    return False


def _eager_key(prim: Primitive, args: Sequence[Any], params: dict) -> tuple | None:
    """The cache key of an eager call of ``prim`` on Arrays ``args``, or None when a parameter is
    not plain data (such a call infers its output types every time)."""
    sig = []
    for a in args:
        v = a._value
        if v is None:
            return None  # a deleted array: the general path raises its error
        sig.append((v.dtype, v.shape, a._weak))
    for v in params.values():
        if not _plain(v):
            return None
    return (prim, tuple(sig), tuple((k, type(v), v) for k, v in params.items()))


def eager_out_avals(prim: Primitive, avals: Sequence[ShapedArray], params: dict,
                    key: tuple | None) -> list[ShapedArray]:
    """``prim.abstract(avals, params)``, from the eager cache under ``key`` when it holds it."""
    if key is not None:
        out = _EAGER.get(key)
        if out is not None:
            return out
    out = prim.abstract(avals, params)
    if key is not None:
        if len(_EAGER) >= _EAGER_MAX:
            _EAGER.clear()
        _EAGER[key] = out
    return out


def eager_bind(prim: Primitive, args: Sequence[Any], params: dict) -> Any:
    """Run ``prim`` now on concrete Arrays ``args`` (no trace active): the output types come from
    the eager cache (abstract evaluation runs on the first call of a signature only), the values
    from ``prim.eager_impl`` where set, else ``prim.impl``."""
    key = _eager_key(prim, args, params)
    avals_out = _EAGER.get(key) if key is not None else None
    if avals_out is None:
        avals_out = eager_out_avals(prim, [a.aval for a in args], params, key)
    outs = (prim.eager_impl or prim.impl)(*(a._value for a in args), **params)
    wrap = _eager_wrap[0]
    if prim.multiple_results:
        return [wrap(o, a) for o, a in zip(outs, avals_out)]
    return wrap(outs, avals_out[0])


# Set by ember._src.sharding (a higher layer): ``hook(prim, args, params)`` applies ``prim`` to
# arguments among which are sharded arrays (their class has ``_sharded = True``), per process.
sharded_eager_hook: list[Callable] = []
# Set by the GPU backends (a higher layer): ``hook(prim, args, params)`` applies ``prim`` to
# arguments among which are device arrays (their class has ``_device_resident = True``) on their device.
device_eager_hook: list[Callable] = []


class EvalTrace(Trace):
    """Runs each primitive immediately with its NumPy implementation."""

    def pure(self, val: Any) -> Any:
        from ember._src.array import asarray_eager
        return asarray_eager(val)

    lift = pure

    def process_primitive(self, prim: Primitive, tracers: list, params: dict) -> list:
        from ember._src.array import wrap_result
        if sharded_eager_hook or device_eager_hook:
            for t in tracers:
                cls = type(t)
                if getattr(cls, "_sharded", False):
                    return sharded_eager_hook[0](prim, tracers, params)
                if getattr(cls, "_device_resident", False):
                    return device_eager_hook[0](prim, tracers, params)
        avals_out = eager_out_avals(prim, [t.aval for t in tracers], params,
                                    _eager_key(prim, tracers, params) if EAGER_FAST_PATH.value else None)
        outs = (prim.eager_impl or prim.impl)(*(t.value for t in tracers), **params)
        if not prim.multiple_results:
            outs = (outs,)
        return [wrap_result(o, a) for o, a in zip(outs, avals_out)]


EVAL_TRACE = EvalTrace(MainTrace(-1, EvalTrace))


def eval_impl(prim: Primitive, vals: Sequence[np.ndarray], params: dict,
              avals_out: Sequence[ShapedArray]) -> list[np.ndarray]:
    """Run ``prim.impl`` on NumPy values and cast the results to the inferred dtypes."""
    outs = prim.impl(*vals, **params)
    if not prim.multiple_results:
        outs = (outs,)
    res = []
    for o, a in zip(outs, avals_out):
        o = np.asarray(o)
        if o.dtype != a.dtype:
            o = o.astype(a.dtype)
        res.append(o)
    return res


# ---------------------------------------------------------------------------------------------
# Small helpers shared by rule modules
# ---------------------------------------------------------------------------------------------


# NumPy keeps its floating-point error state in a context variable holding a capsule; np.errstate
# builds a new capsule on each entry (microseconds). call_ignoring_fp_errors sets a cached
# "ignore all" capsule derived from the current one (same buffer size and callback) instead.
try:
    from numpy._core._ufunc_config import _extobj_contextvar as _FP_VAR
    from numpy._core._ufunc_config import _make_extobj
except ImportError:  # pragma: no cover - other NumPy versions: np.errstate
    _FP_VAR = None
_FP_IGNORE: dict[Any, Any] = {}


def call_ignoring_fp_errors(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` inside ``np.errstate(all="ignore")`` (cheaper than the context
    manager; the same floating-point error state)."""
    if _FP_VAR is None:  # pragma: no cover
        with np.errstate(all="ignore"):
            return fn(*args, **kwargs)
    cur = _FP_VAR.get()
    ign = _FP_IGNORE.get(cur)
    if ign is None:
        if len(_FP_IGNORE) >= 64:
            _FP_IGNORE.clear()
        ign = _FP_IGNORE[cur] = _make_extobj(all="ignore")
    token = _FP_VAR.set(ign)
    try:
        return fn(*args, **kwargs)
    finally:
        _FP_VAR.reset(token)


def check_same_shapes(name: str, avals: Sequence[ShapedArray]) -> tuple:
    shape = avals[0].shape
    for i, a in enumerate(avals[1:], 1):
        if a.shape != shape:
            sh.broadcast_shapes(shape, a.shape, op=name)  # names the axes when incompatible
            raise ShapeError(f"{name}: operand {i} has shape {sh.shape_str(a.shape)}, expected "
                             f"{sh.shape_str(shape)} (lax-level ops do not broadcast)")
    return shape


def check_same_dtypes(name: str, avals: Sequence[ShapedArray]) -> np.dtype:
    dtype = avals[0].dtype
    for i, a in enumerate(avals[1:], 1):
        if a.dtype != dtype:
            raise DTypeError(f"{name}: operand {i} has dtype {a.dtype}, expected {dtype} "
                             "(lax-level ops do not promote; use ember.numpy)")
    return dtype


def concrete_or_error(x: Any, what: str) -> np.ndarray:
    """The concrete NumPy value of ``x``; a :class:`TracerError` naming ``what`` if it is traced."""
    if isinstance(x, Tracer):
        try:
            return x.to_concrete()
        except TracerError as e:
            raise ConcretizationTypeError(f"{what} must be concrete. {e}") from None
    value = getattr(x, "value", None)
    if isinstance(value, np.ndarray):
        return value
    return np.asarray(x)
