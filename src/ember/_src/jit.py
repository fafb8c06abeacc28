"""``jit`` and ``make_program``: trace once per signature, cache the Program, run it on a backend.

The cache key is (pytree structure of the arguments, abstract values of the array leaves incl.
weak typing, the values of static arguments). Python scalars are traced as weakly typed 0-d
values, so ``f(x, 2.0)`` and ``f(x, 3.0)`` share one trace. Called with tracers of an enclosing
transformation (``grad(jit(f))``, ``vmap(jit(f))``) or inside another ``jit``, the function is
traced inline into the enclosing computation.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ember._src import core
from ember._src import tree as tu
from ember._src.array import Array, asarray_eager, wrap_result
from ember._src.core import ShapedArray
from ember._src.program import Program, run_numpy, trace_to_program, validate

BACKENDS: dict[str, Callable[..., Any]] = {}
_config = threading.local()


def _is_array_leaf(x: Any) -> bool:
    return isinstance(x, (Array, core.Tracer, np.ndarray, np.generic, bool, int, float, complex))


def _leaf_aval(x: Any) -> ShapedArray:
    try:
        return core.get_aval(x)
    except TypeError:
        raise TypeError(f"jit: argument of type {type(x).__name__} is not an array; mark it static "
                        "with static_argnums/static_argnames") from None


def _hashable_static(v: Any, name: str) -> Any:
    try:
        hash(v)
    except TypeError:
        raise TypeError(f"jit: static argument {name} of type {type(v).__name__} is not hashable") from None
    return v


class Compiled:
    """One traced signature: its Program, output structure and the backend's executable."""

    def __init__(self, program: Program, out_tree: tu.PyTreeDef, executable: Callable):
        self.program = program
        self.out_tree = out_tree
        self.executable = executable


class JitFunction:
    """A function traced to a Program once per signature and run by a backend."""

    def __init__(self, fun: Callable, static_argnums: Sequence[int] = (), static_argnames: Sequence[str] = (),
                 backend: str | None = None, donate_argnums: Sequence[int] = (), **options: Any):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.options = options
        self.backend = backend
        try:
            self._sig = inspect.signature(fun)
        except (TypeError, ValueError):
            self._sig = None
        nums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
        names = (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames)
        if self._sig is not None:
            params = list(self._sig.parameters)
            names = tuple(names) + tuple(params[i] for i in nums if 0 <= i < len(params) and
                                         params[i] not in names)
            nums = tuple(nums) + tuple(params.index(n) for n in names if n in params and
                                       params.index(n) not in nums)
        self.static_argnums = tuple(sorted(set(nums)))
        self.static_argnames = tuple(names)
        self._cache: dict[Any, Compiled] = {}
        self.traces = 0
        self.hits = 0

    # -- signature handling -----------------------------------------------------------------
    def _split(self, args: tuple, kwargs: dict) -> tuple[tuple, dict, dict, dict]:
        """Separate static arguments; returns (dyn_args, dyn_kwargs, static_pos, static_kw)."""
        static_pos = {}
        dyn_args = []
        for i, a in enumerate(args):
            if i in self.static_argnums or (i < 0 and i + len(args) in self.static_argnums):
                static_pos[i] = _hashable_static(a, f"#{i}")
            else:
                dyn_args.append(a)
        static_kw, dyn_kw = {}, {}
        for k, v in kwargs.items():
            if k in self.static_argnames:
                static_kw[k] = _hashable_static(v, repr(k))
            else:
                dyn_kw[k] = v
        return tuple(dyn_args), dyn_kw, static_pos, static_kw

    def _flat_fun(self, static_pos: dict, static_kw: dict, in_tree: tu.PyTreeDef,
                  out_store: list) -> Callable:
        def flat(*leaves: Any) -> list:
            dyn_args, dyn_kw = tu.unflatten(in_tree, leaves)
            args = list(dyn_args)
            for i in sorted(static_pos):
                args.insert(i, static_pos[i])
            out = self.fun(*args, **dyn_kw, **static_kw)
            out_leaves, out_tree = tu.flatten(out)
            out_store.append(out_tree)
            return out_leaves

        return flat

    def _signature(self, args: tuple, kwargs: dict) -> tuple:
        dyn_args, dyn_kw, static_pos, static_kw = self._split(args, kwargs)
        leaves, in_tree = tu.flatten((dyn_args, dyn_kw))
        avals = tuple(_leaf_aval(x) for x in leaves)
        key = (in_tree, avals, tuple(sorted(static_pos.items())), tuple(sorted(static_kw.items())))
        return key, leaves, in_tree, avals, static_pos, static_kw

    def trace(self, *args: Any, **kwargs: Any) -> tuple[Program, tu.PyTreeDef]:
        """Trace to a Program for these arguments (without running or caching it)."""
        _, _, in_tree, avals, static_pos, static_kw = self._signature(args, kwargs)
        store: list = []
        prog, _ = trace_to_program(self._flat_fun(static_pos, static_kw, in_tree, store), avals)
        validate(prog)
        return prog, store[0]

    def lower(self, *args: Any, **kwargs: Any) -> Compiled:
        key, leaves, in_tree, avals, static_pos, static_kw = self._signature(args, kwargs)
        c = self._cache.get(key)
        if c is not None:
            self.hits += 1
            return c
        store: list = []
        prog, _ = trace_to_program(self._flat_fun(static_pos, static_kw, in_tree, store), avals)
        self.traces += 1
        validate(prog)
        backend = self.backend or default_backend()
        c = Compiled(prog, store[0], BACKENDS[backend](prog, **self.options))
        self._cache[key] = c
        return c

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        leaves = tu.leaves((args, kwargs))
        if core.dynamic_trace_active() or any(isinstance(x, core.Tracer) for x in leaves):
            return self.fun(*args, **kwargs)  # inline into the enclosing trace
        c = self.lower(*args, **kwargs)
        dyn_leaves = tu.leaves(self._split(args, kwargs)[:2])
        vals = [asarray_eager(x).value for x in dyn_leaves]
        outs = c.executable(vals)
        arrays = [wrap_result(o, v.aval) if not isinstance(o, Array) else o
                  for o, v in zip(outs, c.program.outvars)]
        return tu.unflatten(c.out_tree, arrays)

    def cache_info(self) -> dict[str, int]:
        """``traces`` (Programs built), ``hits`` (calls served from the cache), ``size``."""
        return {"traces": self.traces, "compiles": self.traces, "hits": self.hits,
                "size": len(self._cache)}

    def clear_cache(self) -> None:
        self._cache.clear()

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self
        return functools.partial(self, obj)


def _numpy_backend(prog: Program, **options: Any) -> Callable[[list], list]:
    consts = [core.concrete_or_error(c, "a captured constant") for c in prog.consts]

    def run(args: list) -> list:
        return run_numpy(prog, consts, args)

    return run


BACKENDS["numpy"] = _numpy_backend


def default_backend() -> str:
    return getattr(_config, "backend", None) or "numpy"


def set_default_backend(name: str) -> None:
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; available: {sorted(BACKENDS)}")
    _config.backend = name


def jit(fun: Callable | None = None, *, static_argnums: int | Sequence[int] = (),
        static_argnames: str | Sequence[str] = (), backend: str | None = None, **options: Any) -> Any:
    """Compile ``fun``: trace it to a Program once per signature and run that Program.

    Usable as ``@jit`` and ``@jit(static_argnums=...)``. ``backend`` picks ``"numpy"`` (the
    reference interpreter) or another registered backend.
    """
    if backend is not None and backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; available: {sorted(BACKENDS)}")
    if fun is None:
        return lambda f: JitFunction(f, static_argnums, static_argnames, backend, **options)
    return JitFunction(fun, static_argnums, static_argnames, backend, **options)


def make_program(fun: Callable, *, static_argnums: int | Sequence[int] = (),
                 static_argnames: str | Sequence[str] = (), **options: Any) -> Callable[..., Program]:
    """``make_program(f)(*args)`` returns the traced :class:`Program` of ``f`` at these arguments."""
    jf = fun if isinstance(fun, JitFunction) else JitFunction(fun, static_argnums, static_argnames)

    @functools.wraps(fun)
    def build(*args: Any, **kwargs: Any) -> Program:
        return jf.trace(*args, **kwargs)[0]

    return build
