"""``vsla.jit``: one trace (one C compile) for every logical shape of a function of VArrays.

Each VArray argument enters the traced function as two leaves: its data at capacity
``next_pow2(max(size, 1))`` per axis, every capacity a named dynamic axis of ``ember.jit``, and its
logical sizes as an int32 vector (a runtime value). The VArray kernels of ``symbolic.py`` work from
capacities and masks, so the program depends only on the ranks and dtypes; a new capacity bucket is
a specialization (sizes and arena offsets), and a call whose capacities were seen before plans
nothing. Results carry their runtime lengths back and become ordinary VArrays.

``ember.jit`` itself keeps tracing VArrays per logical shape (their shape is pytree metadata):
``jit`` sits below ``vsla`` and cannot name axes for a type it does not know, and a plain
``ember.jit`` of VArrays stays exactly what it was.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

import ember.numpy as enp
from ember._src import shapes as sh
from ember._src import tree as tu
from ember._src.ad import grad as ember_grad
from ember._src.core import Tracer
from ember._src.jit import jit as ember_jit
from ember._src.vsla import ragged as rg
from ember._src.vsla import symbolic as sym
from ember._src.vsla.varray import VArray, next_pow2
from ember._src.vsla.varray import _make as _varray

__all__ = ["jit", "grad", "VJitFunction"]

_CAPACITY_MODES = ("symbolic", "static")


def _is_varray(x: Any) -> bool:
    return isinstance(x, VArray)


def _is_leaf(x: Any) -> bool:
    return isinstance(x, (VArray, rg.Ragged))


def _bucket(v: VArray) -> Any:
    """The data at capacity ``next_pow2(max(size, 1))`` per axis (slack zero)."""
    cap = tuple(max(1, next_pow2(d)) for d in v.shape)
    data = v.data
    if tuple(data.shape) == cap:
        return data
    if any(s > c for s, c in zip(data.shape, cap)):
        data = data[tuple(slice(0, c) for c in cap)]
    return enp.pad(data, [(0, c - s) for c, s in zip(cap, data.shape)])


def _lengths(v: VArray) -> np.ndarray:
    return np.array(v.shape, dtype=np.int32).reshape(v.ndim)


@functools.lru_cache(maxsize=64)
def _positional_tree(kinds: tuple) -> Any:
    """The argument structure of a call with only positional VArrays of these ranks."""
    return tu.flatten((tuple(_varray(np.zeros(()), None, 0) for _ in kinds), {}), is_leaf=_is_varray)[1]


def _to_static(v: VArray) -> VArray:
    """A result of the jitted function: its lengths are concrete now, so its shape is static again.
    Under an enclosing transformation the lengths stay traced and the VArray keeps them."""
    if not v.symbolic or isinstance(v.lengths, Tracer):
        return v
    shape = tuple(np.asarray(v.lengths).reshape(-1).tolist())
    if any(d < 0 for d in shape):
        raise ValueError("vsla.jit: a result has invalid logical sizes (-1): a vsla.reshape inside the "
                         "function was given a shape whose size differs from its operand's logical size")
    return _varray(v.data, shape)


def _result(x: Any) -> Any:
    if isinstance(x, VArray):
        return _to_static(x)
    return rg.from_runtime(x) if isinstance(x, rg.Ragged) else x


def _ragged_leaf(it: Any) -> rg.Ragged:
    """A Ragged argument inside the trace from its three leaves (``ragged.jit_leaves``)."""
    values, shapes, carrier = next(it), next(it), next(it)
    return rg.Ragged(values, shapes, row_cap=carrier.shape[0])


class VJitFunction:
    """A function of VArrays compiled once per argument structure, ranks and dtypes.

    ``capacity="symbolic"`` (default): every capacity is a named dynamic axis, so one trace serves
    every shape; ``capacity="static"``: each capacity bucket is a trace of its own (the lengths are
    still runtime values, so shapes within a bucket share it), which lets ``conv`` use the FFT.
    """

    def __init__(self, fun: Callable, *, capacity: str = "symbolic", backend: str | None = None,
                 **options: Any):
        if capacity not in _CAPACITY_MODES:
            raise ValueError(f"vsla.jit: capacity must be one of {_CAPACITY_MODES}, got {capacity!r}")
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.capacity = capacity
        self.backend = backend
        self.options = options
        # a vsla.grad function takes its cotangent seed as the program's first input, so the
        # native planner finds the backward pass (its descendants) and plans it as GRADS
        self._seeded = bool(getattr(fun, "_vsla_grad", False))
        self._jits: dict[Any, Any] = {}

    def _prepare(self, args: tuple, kwargs: dict) -> tuple[Any, list]:
        """The inner ``ember.jit`` for this argument structure and its flat positional arguments."""
        if not kwargs and all(type(x) is VArray for x in args):  # the common call: VArrays only
            key = tuple(x.ndim for x in args)
            jf = self._jits.get(key)
            if jf is not None:
                flat: list = [_SEED] if self._seeded else []
                for x in args:
                    flat += [x.data, x.lengths] if x.symbolic else [_bucket(x), _lengths(x)]
                return jf, flat
        leaves, tree = tu.flatten((args, kwargs), is_leaf=_is_leaf)
        flat = [_SEED] if self._seeded else []
        kinds: list = []
        row_groups: dict[Any, int] = {}  # Ragged arguments with one row count share its axis
        for x in leaves:
            if isinstance(x, VArray):
                flat += [x.data, x.lengths] if x.symbolic else [_bucket(x), _lengths(x)]
                kinds.append(x.ndim)
            elif isinstance(x, rg.Ragged):
                flat += rg.jit_leaves(x, "vsla.jit")
                kinds.append(("ragged", row_groups.setdefault(rg.row_count(x), len(row_groups))))
            else:
                flat.append(x)
                kinds.append(None)
        key = tuple(kinds) if not kwargs and tree == _positional_tree(tuple(kinds)) else (tree, tuple(kinds))
        jf = self._jits.get(key)
        if jf is None:
            jf = self._jits[key] = self._make(tree, kinds)
        return jf, flat

    def _make(self, tree: Any, kinds: list) -> Any:
        specs: list = [None] if self._seeded else []
        for i, k in enumerate(kinds):
            if k is None:
                specs.append(None)
            elif isinstance(k, tuple):  # a Ragged: its values and its row count are named axes
                specs += [(f"ragged{i}",), (f"rows{k[1]}", None), (f"rowcap{i}", None)]
            else:
                axes = tuple(f"cap{i}_{d}" for d in range(k)) if self.capacity == "symbolic" and k else None
                specs += [axes, None]

        def inner(*flat: Any) -> Any:
            it = iter(flat)
            seed = next(it) if self._seeded else None
            leaves = [next(it) if k is None else _ragged_leaf(it) if isinstance(k, tuple)
                      else _varray(next(it), None, next(it)) for k in kinds]
            args, kwargs = tu.unflatten(tree, leaves)
            _SEED_BOX[0] = seed  # the cotangent seed the grad function takes (grad)
            try:
                return self.fun(*args, **kwargs)
            finally:
                _SEED_BOX[0] = None

        inner.__name__ = f"vsla_{getattr(self.fun, '__name__', 'fun')}"
        dyn = specs if any(s is not None for s in specs) else None
        options = dict(self.options)
        if self._seeded and self.backend in (None, "native"):  # its descendants: the GRADS class
            options.setdefault("grads_from", 0)
        return ember_jit(inner, backend=self.backend, dynamic_axes=dyn, **options)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        jf, flat = self._prepare(args, kwargs)
        out = jf(*flat)
        if type(out) is VArray:
            return _to_static(out)
        if type(out) is tuple and all(type(x) is VArray for x in out):
            return tuple(_to_static(x) for x in out)
        return tu.tree_map(_result, out, is_leaf=_is_leaf)

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        """The inner ``ember.jit``'s compiled signature for these arguments (``.program``,
        ``.executable``)."""
        jf, flat = self._prepare(args, kwargs)
        return jf.lower(*flat)

    def cache_info(self) -> dict[str, int]:
        """``ember.jit``'s counters summed over the argument structures seen (``compiles``: traces,
        each one C compile on the native backend; ``specializations``: capacity bindings built;
        ``hits``: calls that built nothing)."""
        total: dict[str, int] = {}
        for jf in self._jits.values():
            for k, v in jf.cache_info().items():
                total[k] = total.get(k, 0) + v
        return total or {"compiles": 0, "specializations": 0, "hits": 0, "calls": 0}

    def clear_cache(self) -> None:
        """Drop every trace and specialization."""
        for jf in self._jits.values():
            jf.clear_cache()
        self._jits.clear()

    def memory_plan(self, *args: Any, **kwargs: Any) -> dict[str, int]:
        """Bytes of the memory plan for these arguments, by buffer class: ``PARAMS`` (captured
        constants), ``ACTIVATION`` (intermediates), ``WORKSPACE`` (per-step scratch: FFT buffers,
        cached rows), ``EXTERNAL_IN`` / ``EXTERNAL_OUT``, and ``arena_bytes`` (the planned arena's
        peak for this binding), and for a :func:`grad` function ``GRADS`` (the arena's GRADS region:
        the backward pass's cotangents and partial gradients, every intermediate computed from the
        cotangent seed) and ``GRAD_OUTPUTS`` (the gradients it returns, its ``EXTERNAL_OUT``).
        Native backend only (the reference backend plans no memory)."""
        jf, flat = self._prepare(args, kwargs)
        exe = jf.lower(*flat).executable
        env: dict[str, int] = {}
        arena = None
        if hasattr(exe, "specialization"):  # symbolic: the plan of the one library, sized for this binding
            env = exe.env_from_shapes([np.shape(x) for x in flat])
            run = exe.specialization(env).run
            exe, arena = getattr(run, "sym", run), getattr(run, "arena_bytes", None)
        plan = getattr(exe, "plan", None)
        if plan is None:
            raise ValueError("vsla.jit.memory_plan: the backend of this function has no memory plan "
                             "(use backend='native')")
        out = {c: 0 for c in ("PARAMS", "ACTIVATION", "WORKSPACE", "EXTERNAL_IN", "EXTERNAL_OUT")}
        if self._seeded:
            out["GRADS"] = 0
        for b in plan.buffers:
            out[b.cls] = out.get(b.cls, 0) + int(sh.evaluate(b.nbytes, env))
        out["arena_bytes"] = int(arena if arena is not None else sh.evaluate(plan.arena_bytes, env))
        if self._seeded:
            out["GRAD_OUTPUTS"] = out["EXTERNAL_OUT"]
        return out


_SEED = np.ones((), np.float32)  # the cotangent seed a vsla.grad function is called with
_SEED_BOX: list = [None]  # the seed while a seeded function is traced


def jit(fun: Callable | None = None, *, capacity: str = "symbolic", backend: str | None = None,
        **options: Any) -> Any:
    """Compile a function of VArrays once for every logical shape (see :class:`VJitFunction`).

    Usable as ``@vsla.jit`` and ``@vsla.jit(capacity="static")``; other keyword ``options`` go to
    ``ember.jit``.
    """
    if fun is None:
        return functools.partial(jit, capacity=capacity, backend=backend, **options)
    return VJitFunction(fun, capacity=capacity, backend=backend, **options)


def grad(fun: Callable, argnums: int | tuple[int, ...] = 0) -> Callable:
    """The gradient of a scalar function of VArrays with respect to the VArray arguments ``argnums``.

    Each gradient is a VArray with its argument's logical sizes (static or runtime), its slack held
    at zero; the logical sizes themselves are not differentiated. Works eagerly and inside
    ``vsla.jit`` (``vsla.jit(vsla.grad(loss))`` is one compile for every shape). ``fun`` returns a
    VArray of one entry (``vsla.sum`` of a vector: rank 1, length 1) or a scalar array.
    """
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)

    def grad_fun(*args: Any, **kwargs: Any) -> Any:
        for i in nums:
            if not isinstance(args[i], VArray):
                raise TypeError(f"vsla.grad: argument {i} must be a VArray, got {type(args[i]).__name__}")
        primal = [args[i] for i in nums]

        def on_data(*datas: Any) -> Any:
            new = list(args)
            for i, v, d in zip(nums, primal, datas):
                new[i] = v._with_data(d)
            out = fun(*new, **kwargs)
            if isinstance(out, VArray):  # a rank-0 result is the rank-1 [s] (vsla.sum of a vector)
                return enp.reshape(out.data, ()) if out.ndim == 1 and out.data.shape[0] == 1 else out.data
            return out

        seed, _SEED_BOX[0] = _SEED_BOX[0], None  # only the outermost grad under vsla.jit takes it
        if seed is not None:  # the loss times the program input ``seed`` (1.0): every cotangent
            inner = on_data   # of the backward pass is computed from it

            def on_data(*datas: Any) -> Any:
                out = inner(*datas)
                return out * seed.astype(out.dtype)

        gs = ember_grad(on_data, argnums=tuple(range(len(nums))))(*[v.data for v in primal])
        outs = []
        for v, gd in zip(primal, gs):
            data, lengths = v.pair()
            outs.append(v._with_data(enp.where(sym.logical_mask(data, lengths), gd, sym.zero(gd.dtype))))
        return outs[0] if isinstance(argnums, int) else tuple(outs)

    functools.update_wrapper(grad_fun, fun)
    grad_fun._vsla_grad = True  # type: ignore[attr-defined]
    return grad_fun
