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
import itertools
import logging
import os
import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ember._src import aot, arg_checks, core, devices, flags
from ember._src import debug as dbg
from ember._src import dtypes as dt
from ember._src import dynamic as dyn
from ember._src import tree as tu
from ember._src.array import Array, asarray_eager, wrap_result
from ember._src.batching import vmap
from ember._src.call_keys import fast_key, fast_tree_key
from ember._src.core import ShapedArray
from ember._src.interpreter import NumpyPlan as _NumpyPlan  # noqa: F401  (control_flow, tests)
from ember._src.interpreter import numpy_backend as _numpy_backend
from ember._src.interpreter import numpy_specialize as _numpy_specialize  # noqa: F401
from ember._src.program import Program, trace_to_program
from ember._src.validation import run_validators, validation_mode
from ember.errors import CompileError


class _Miss:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISS"


MISS = _MISS = _Miss()  # returned by a fast path (a backend's C dispatcher too) for a call it cannot serve

BACKENDS: dict[str, Callable[..., Any]] = {}
"""Backend factories by name (the backend protocol, ``docs/INTERNALS.md``). Besides ``specialize``,
a factory may carry ``dispatcher`` (the C dispatcher provider of the fast path: ``module()``,
``unavailable_reason()``, ``new_dispatcher()``, ``MISS``), ``build_stats() -> (compiles,
disk_hits)`` and ``unavailable_reason() -> str | None`` (why it cannot run on this machine)."""


def _is_array_leaf(x: Any) -> bool:
    return isinstance(x, (Array, core.Tracer, np.ndarray, np.generic, bool, int, float, complex))


_leaf_aval = arg_checks.leaf_aval


def _hashable_static(v: Any, name: str) -> Any:
    try:
        hash(v)
    except TypeError:
        raise TypeError(f"jit: static argument {name} of type {type(v).__name__} is not hashable") from None
    return v


_LIVE_JITS: weakref.WeakSet = weakref.WeakSet()
# function -> {jit arguments: (traced signatures, specialization cache)}; weak in the function, and the
# caches do not refer to it, so they go when the function does
_SHARED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _shared_caches(fun: Callable, key: tuple, size: int) -> tuple[dict, Any]:
    """The caches of ``jit(fun, ...)`` with these arguments: the ones an earlier ``jit`` of the same
    function made, or new ones (not shared when ``fun`` cannot be weakly referenced)."""
    try:
        per_fun = _SHARED.get(fun)
        if per_fun is None:
            per_fun = _SHARED[fun] = {}
    except TypeError:  # not weakly referenceable or not hashable
        return {}, dyn.SpecializationCache(size)
    caches = per_fun.get(key)
    if caches is None:
        caches = per_fun[key] = ({}, dyn.SpecializationCache(size))
    return caches


def clear_caches() -> None:
    """Clear the caches of every jitted function and of the eager fast path (``jax.clear_caches``).

    The executables, arenas and output buffers they hold are released. Libraries already loaded
    stay mapped; the disk cache is kept."""
    import gc

    for f in list(_LIVE_JITS):
        f.clear_cache()
    for per_fun in list(_SHARED.values()):  # traces shared by jit objects already gone, of live functions
        for structs, specs in per_fun.values():
            structs.clear()
            specs.clear()
    _SHARED.clear()
    for hook in CLEAR_HOOKS:
        hook()
    gc.collect()


CLEAR_HOOKS: list[Callable[[], None]] = []  # other caches that clear_caches() empties
# traced programs and fast-path entries depend on the dtype canonicalization in force
flags.watch("jax_enable_x64", clear_caches)


class Compiled(aot.LoweredStage):
    """One traced signature: its Program, output structure and the backend's executable.

    It is what ``jit(f).lower(*args)`` returns, so it has JAX's ``Lowered`` methods too
    (``as_text``, ``cost_analysis``, ``compile``; see :mod:`ember._src.aot`).

    For a signature with named dynamic axes, ``program`` has symbolic dims and ``executable`` is
    a :class:`~ember._src.dynamic.SymbolicExecutable`: calling it with NumPy inputs binds the axes
    and runs (building on first use) the specialization for that binding.
    """

    def __init__(self, program: Program, out_tree: tu.PyTreeDef, executable: Callable):
        self.program = program
        self.out_tree = out_tree
        self.executable = executable

    @property
    def symbolic(self) -> bool:
        return isinstance(self.executable, dyn.SymbolicExecutable)

    @property
    def out_avals(self) -> list[ShapedArray]:
        """Output avals; symbolic dims stay symbolic until bound."""
        return self.program.out_avals

    def specialize(self, **sizes: int) -> dyn.Specialization:
        """The specialization of this signature for ``sizes`` (``batch=32``), built if needed."""
        if not self.symbolic:
            raise ValueError("this signature has no dynamic axes to specialize")
        missing = [a for a in self.executable.axes if a not in sizes]
        if missing:
            raise ValueError(f"specialize: no size for axes {missing} (this signature has axes "
                             f"{list(self.executable.axes)})")
        return self.executable.specialization(sizes)


class _Struct:
    """Level-1 entries of one argument structure and static-argument values, keyed by avals,
    with the per-leaf dynamic-axis specs and names of that structure."""

    __slots__ = ("in_tree", "statics", "specs", "names", "entries")

    def __init__(self, in_tree: tu.PyTreeDef, statics: tuple, specs: list, names: list):
        self.in_tree = in_tree
        self.statics = statics
        self.specs = specs
        self.names = names
        self.entries: dict[tuple, Compiled] = {}


class _FastEntry:
    """A cache hit resolved once: the executable of an all-positional-array signature and how to
    wrap its outputs, so :meth:`JitFunction.__call__` skips flattening, avals and lookups."""

    __slots__ = ("compiled", "exe", "weak", "avals", "out_tree", "single", "borrow", "spec_key", "key",
                 "c_pending", "struct")

    def __init__(self, c: Compiled, key: tuple, spec: dyn.Specialization | None = None,
                 spec_key: Any = None, struct: tuple | None = None):
        self.compiled = c
        self.key = key
        self.struct = struct  # the argument pytree structure (call_keys.fast_tree_key), None: flat arrays
        self.spec_key = spec_key  # the specialization's LRU key: the entry lives only while it is cached
        # with named dynamic axes: the specialization of these exact input shapes (their binding
        # was checked when it was first used; the key below is the exact shapes)
        self.exe = c.executable if spec is None else spec.run
        self.avals = list(c.program.out_avals if spec is None else spec.out_avals)
        self.weak = [a.weak_type for a in self.avals]
        self.out_tree = c.out_tree
        self.single = c.out_tree == tu._LEAF
        # a compiled native executable reads caller arrays in place and returns frozen outputs
        # (not when a NumPy argument must first be converted: 64-bit input while x64 is off)
        self.borrow = bool(getattr(self.exe, "borrows_inputs", False)) and not any(
            len(k) == 2 and dt.narrows(k[1]) for k in key)
        # a static native executable can also be served by the C dispatcher once it is loaded
        self.c_pending = self.borrow and spec is None and hasattr(self.exe, "dispatch_entry")

    def run(self, args: tuple) -> Any:
        if self.borrow:
            outs = self.exe.run_trusted([a._value if type(a) is Array else a for a in args])
            arrays = [Array(o, w) for o, w in zip(outs, self.weak)]
        else:
            outs = self.exe([a._value if type(a) is Array else asarray_eager(a).value for a in args])
            arrays = [o if type(o) is Array else wrap_result(o, a) for o, a in zip(outs, self.avals)]
        if self.single:
            return arrays[0]
        return tu.unflatten(self.out_tree, arrays)


def _compiler_stats() -> tuple[int, int]:
    """The process's compiler counters ``(compiles, disk_hits)``, summed over the backends that
    report them (``factory.build_stats``; build path only)."""
    compiles = disk_hits = 0
    for factory in BACKENDS.values():
        stats = getattr(factory, "build_stats", None)
        if stats is not None:
            c, d = stats()
            compiles += c
            disk_hits += d
    return compiles, disk_hits


# Set by ember._src.sharding (a higher layer): ``hook(jit_function, args, kwargs)`` runs a call
# whose arguments include sharded arrays as the per-process program their shardings imply.
sharded_call_hook: list[Callable] = []
# Set by the GPU backends: ``hook(jit_function, args, kwargs, leaves)`` runs a call on the device its
# inputs live on (device arrays have ``_device_resident = True``) or on the default device.
device_call_hook: list[Callable] = []


class JitFunction:
    """A function traced to a Program once per signature and run by a backend.

    With ``dynamic_axes`` the signature is symbolic (level 1: one trace per dtype/static dims/axis
    names/static args) and each axis binding gets a cached specialization (level 2).
    """

    def __init__(self, fun: Callable, static_argnums: Sequence[int] = (), static_argnames: Sequence[str] = (),
                 backend: str | None = None, donate_argnums: Sequence[int] = (), dynamic_axes: Any = None,
                 specialization_cache_size: int = 64, **options: Any):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.options = options
        self.backend = backend
        try:
            self._sig = inspect.signature(fun)
        except (TypeError, ValueError):
            self._sig = None
        nums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
        arg_checks.check_static_argnums(self._sig, nums, f"jit({getattr(fun, '__name__', 'fun')})")
        names = (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames)
        if self._sig is not None:
            params = list(self._sig.parameters)
            names = tuple(names) + tuple(params[i] for i in nums if 0 <= i < len(params) and
                                         params[i] not in names)
            nums = tuple(nums) + tuple(params.index(n) for n in names if n in params and
                                       params.index(n) not in nums)
        self.static_argnums = tuple(sorted(set(nums)))
        self.static_argnames = tuple(names)
        self._label = f"jit({getattr(fun, '__name__', type(fun).__name__)})"
        self.dynamic_axes = dynamic_axes  # as given (a device call's inner jit takes it too)
        self._dynamic = None if dynamic_axes is None else \
            dyn.DynamicAxes(dynamic_axes, self._sig, self._label)
        if isinstance(dynamic_axes, dict):
            both = [k for k in dynamic_axes if dynamic_axes[k] is not None and
                    (k in self.static_argnames or k in self.static_argnums)]
            if both:
                raise ValueError(f"{self._label}: {both} are static arguments and cannot have "
                                 "dynamic axes")
        self._names = dyn.DynamicAxes({}, self._sig, self._label)  # leaf names for messages
        # traced signatures and specializations: shared by every jit of the same function with the
        # same arguments (JAX caches on the function: jit(f)(x) twice traces once)
        share_key = (self.static_argnums, self.static_argnames, backend, repr(dynamic_axes),
                     specialization_cache_size, repr(sorted(options.items())))
        self._structs, self._spec_cache = _shared_caches(fun, share_key, specialization_cache_size)
        # fast path: all-positional array calls of a function without static or dynamic arguments
        self._fast: dict[tuple, _FastEntry] | None = \
            {} if not (self.static_argnums or self.static_argnames) else None
        self._dispatch: Any = None  # the C dispatcher of warm static signatures (native/runtime/dispatch.py)
        # the same for calls whose arguments are lists/tuples/dicts of arrays: entries by (structure,
        # leaf key), and one C dispatcher per structure (it is handed the flattened leaves)
        self._fast_tree: dict[tuple, _FastEntry] | None = {} if self._fast is not None else None
        self._tree_dispatch: dict[tuple, Any] = {}
        self.traces = 0
        self.hits = 0  # incremented by the fast path too; calls = hits - _other_hits + _slow_calls
        self._other_hits = 0  # hits counted by _call and lower (not fast-path calls)
        self._slow_calls = 0  # calls that took the general path
        self._compiler_runs = 0
        self._disk_hits = 0
        self._dropped_c_calls = 0  # calls served by C dispatchers that clear_cache dropped
        _LIVE_JITS.add(self)

    # -- signature handling -----------------------------------------------------------------
    def _split(self, args: tuple, kwargs: dict) -> tuple[tuple, dict, dict, dict]:
        """Separate static arguments; returns (dyn_args, dyn_kwargs, static_pos, static_kw)."""
        if not self.static_argnums and not self.static_argnames:
            return args, kwargs, {}, {}
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

    def _flatten(self, args: tuple, kwargs: dict) -> tuple:
        dyn_args, dyn_kw, static_pos, static_kw = self._split(args, kwargs)
        leaves, in_tree = tu.flatten((dyn_args, dyn_kw))
        return leaves, in_tree, dyn_args, dyn_kw, static_pos, static_kw

    def _struct(self, in_tree: tu.PyTreeDef, dyn_args: tuple, dyn_kw: dict, static_pos: dict,
                static_kw: dict) -> _Struct:
        """The cache record of one argument structure and set of static argument values."""
        statics = (tuple(sorted(static_pos.items())), tuple(sorted(static_kw.items()))) \
            if static_pos or static_kw else ()
        skey = (in_tree, statics)
        st = self._structs.get(skey)
        if st is None:
            spec = self._dynamic or self._names
            specs, names = spec.leaf_specs(in_tree, dyn_args, dyn_kw, static_pos)
            st = self._structs[skey] = _Struct(in_tree, statics, specs, names)
        return st

    def _avals(self, st: _Struct, leaves: list, symbolic_ok: bool = False) -> tuple[tuple, dict | None]:
        """The avals of the leaves (symbolic for named dynamic axes) and the binding ``env`` of
        the named axes (``None`` when there are none)."""
        avals = tuple([_leaf_aval(x) for x in leaves])
        if self._dynamic is None:
            return avals, None
        sym, env = self._dynamic.bind(st.specs, st.names, avals, symbolic_ok)
        if not env:
            return avals, None
        if all(env.values()):
            return sym, env
        # a zero-size named axis: symbolic dims are >= 1, so this one is traced statically
        dbg.logger.debug("%s: a named axis has size 0 in %s: tracing a static program", self._label,
                         dyn._fmt_env(env))
        return avals, None

    def _signature(self, args: tuple, kwargs: dict) -> tuple[_Struct, tuple, dict, dict]:
        leaves, in_tree, dyn_args, dyn_kw, static_pos, static_kw = self._flatten(args, kwargs)
        st = self._struct(in_tree, dyn_args, dyn_kw, static_pos, static_kw)
        return st, self._avals(st, leaves, True)[0], static_pos, static_kw

    def trace(self, *args: Any, **kwargs: Any) -> aot.Traced:
        """Trace to a Program for these arguments (without running or caching it): a
        :class:`~ember._src.aot.Traced` that unpacks as ``(program, out_tree)``."""
        st, avals, static_pos, static_kw = self._signature(args, kwargs)
        store: list = []
        prog, _ = trace_to_program(self._flat_fun(static_pos, static_kw, st.in_tree, store), avals)
        run_validators("traced", prog, validation_mode(self.options.get("validate")))
        return aot.Traced(prog, store[0], lambda: self.lower(*args, **kwargs))

    def _compile(self, st: _Struct, avals: tuple, static_pos: dict, static_kw: dict) -> Compiled:
        if dbg.logger.isEnabledFor(logging.DEBUG):
            old = [(a, o.statics) for o in self._structs.values() if o.in_tree == st.in_tree
                   for a in o.entries]
            sig = ", ".join(f"{n}: {a.str_short()}" for n, a in zip(st.names, avals))
            dbg.logger.debug("%s: tracing (compile #%d) for (%s): %s", self._label, self.traces + 1, sig,
                             dyn.explain_retrace(avals, st.names, st.statics, old))
        store: list = []
        prog, _ = trace_to_program(self._flat_fun(static_pos, static_kw, st.in_tree, store), avals)
        self.traces += 1
        run_validators("traced", prog, validation_mode(self.options.get("validate")))
        name = self.backend or default_backend()
        factory = BACKENDS[name]
        if dyn.is_symbolic_program(prog):
            exe: Callable = dyn.SymbolicExecutable(prog, factory, name, self.options, self._spec_cache,
                                                   self._label)
        else:
            before = _compiler_stats()
            exe = factory(prog, **self.options)
            self._count_build(before)
        c = st.entries[avals] = Compiled(prog, store[0], exe)
        return c

    def lower(self, *args: Any, **kwargs: Any) -> Compiled:
        """The compiled signature for these arguments (arrays, or :class:`ShapeDtypeStruct` whose
        dims may be axis names), tracing it on first use."""
        st, avals, static_pos, static_kw = self._signature(args, kwargs)
        c = st.entries.get(avals)
        if c is not None:
            self.hits += 1
            self._other_hits += 1
            return c
        return self._compile(st, avals, static_pos, static_kw)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if devices.GPU_DEFAULT_ACTIVE[0]:  # a GPU default device: the general path routes the call
            return self._call(args, kwargs)
        d = self._dispatch
        if d is not None and not kwargs:
            r = d(args)  # the C dispatcher: warm static signatures, no Python in between
            if r is not _MISS:
                return r
        fast = self._fast
        if fast is not None and not kwargs and not core.dynamic_trace_active():
            key = fast_key(args)
            if key is not None:
                ent = fast.get(key)
                if ent is not None:
                    if ent.spec_key is None or self._spec_cache.get(ent.spec_key) is not None:
                        self.hits += 1
                        if ent.c_pending:
                            self._to_dispatcher(ent)
                        return ent.run(args)
                    del fast[key]  # its specialization was evicted from the LRU
            elif self._fast_tree:
                r = self._call_tree(args)
                if r is not _MISS:
                    return r
        return self._call(args, kwargs)

    def _call_tree(self, args: tuple) -> Any:
        """The fast path for arguments that are lists/tuples/dicts of arrays (a parameter list):
        flatten them without the pytree registry, then the C dispatcher or the cached entry."""
        tk = fast_tree_key(args)
        if tk is None:
            return _MISS
        struct, leaf_key, leaves = tk
        d = self._tree_dispatch.get(struct)
        if d is not None:
            r = d(tuple(leaves))
            if r is not _MISS:
                return r
        ent = self._fast_tree.get((struct, leaf_key))  # type: ignore[union-attr]
        if ent is None:
            return _MISS
        if ent.spec_key is not None and self._spec_cache.get(ent.spec_key) is None:
            del self._fast_tree[(struct, leaf_key)]  # type: ignore[union-attr]
            return _MISS
        self.hits += 1
        if ent.c_pending:
            self._to_dispatcher(ent)
        return ent.run(leaves)

    def _to_dispatcher(self, ent: _FastEntry) -> None:
        """Hand a fast-path entry to the C dispatcher once its extension module is loaded (the
        first request starts a background build; until then calls stay on the Python path)."""
        dispatch = getattr(BACKENDS.get(self.backend or default_backend()), "dispatcher", None)
        mod = None if dispatch is None else dispatch.module()
        if mod is None:
            if dispatch is None or dispatch.unavailable_reason() is not None:
                ent.c_pending = False
            return
        ent.c_pending = False
        _install_call_slot(mod)
        if ent.struct is not None:
            target = self._tree_dispatch.get(ent.struct)
            if target is None:
                if len(self._tree_dispatch) >= 16:
                    return
                target = self._tree_dispatch[ent.struct] = dispatch.new_dispatcher()
        else:
            if self._dispatch is None:
                self._dispatch = dispatch.new_dispatcher()
            target = self._dispatch
        if len(target.entries) >= 64:
            return
        in_specs = [(0, int(k[2]), k[0], k[1]) if len(k) == 3 else (1, 0, k[0], k[1]) for k in ent.key]
        t = ent.out_tree
        wrap: Any = None if ent.single else () if (t.node is tuple and all(
            c == tu._LEAF for c in t.children)) else functools.partial(tu.unflatten, t)
        e = ent.exe.dispatch_entry(mod, in_specs, ent.weak, wrap, Array, _MISS)
        if e is not None:
            target.add(e)

    def _call(self, args: tuple, kwargs: dict, route: bool = True) -> Any:
        """The general path: flatten, find or trace the signature, run, wrap (``route``: calls with
        device arrays, or under a GPU default device, go to ``device_call_hook``)."""
        self._slow_calls += 1
        if core.dynamic_trace_active():
            return self.fun(*args, **kwargs)  # inline into the enclosing trace
        leaves, in_tree, dyn_args, dyn_kw, static_pos, static_kw = self._flatten(args, kwargs)
        for x in leaves:
            if isinstance(x, core.Tracer):
                return self.fun(*args, **kwargs)  # inline into the enclosing transformation
        if sharded_call_hook:
            for x in leaves:
                if getattr(type(x), "_sharded", False):  # a sharded array: the per-process program
                    return sharded_call_hook[0](self, args, kwargs)
        if route and device_call_hook and (devices.GPU_DEFAULT_ACTIVE[0] or any(
                getattr(type(x), "_device_resident", False) for x in leaves)):
            return device_call_hook[0](self, args, kwargs, leaves)
        st = self._struct(in_tree, dyn_args, dyn_kw, static_pos, static_kw)
        avals, env = self._avals(st, leaves)
        c = st.entries.get(avals)
        hit = c is not None
        if not hit:
            c = self._compile(st, avals, static_pos, static_kw)
        if env is not None:
            vals = [x.value if type(x) is Array else asarray_eager(x).value for x in leaves]
            exe = c.executable
            spec_key = (exe, tuple(map(env.__getitem__, exe.axes)))
            s = self._spec_cache.get(spec_key)
            if s is None:
                hit = False
                before = _compiler_stats()
                s = exe.build(env)
                self._count_build(before)
                self._spec_cache.put(spec_key, s)
            outs = s.run(vals)
            out_avals = s.out_avals
            self._remember_fast(args, kwargs, c, s, spec_key)
        else:
            borrow = getattr(c.executable, "borrows_inputs", False)
            vals = [x.value if type(x) is Array else x if borrow and type(x) is np.ndarray
                    and not dt.narrows(x.dtype) else asarray_eager(x).value for x in leaves]
            outs = c.executable(vals)
            out_avals = c.program.out_avals
            self._remember_fast(args, kwargs, c)
        if hit:
            self.hits += 1
            self._other_hits += 1
            if dbg._level >= 2:
                dbg.logger.debug("%s: cache hit%s", self._label, "" if env is None else f" {env}")
        arrays = [o if isinstance(o, Array) else wrap_result(o, a) for o, a in zip(outs, out_avals)]
        return tu.unflatten(c.out_tree, arrays)

    def _remember_fast(self, args: tuple, kwargs: dict, c: Compiled,
                       spec: dyn.Specialization | None = None, spec_key: Any = None) -> None:
        """Let later calls with exactly these argument shapes take the fast path."""
        if self._fast is not None and not kwargs:
            key = fast_key(args)
            if key is not None and len(self._fast) < 256:
                # the C dispatcher takes it over from its first fast-path call (starting the
                # dispatcher's background build there keeps thread start-up off this first call)
                self._fast[key] = _FastEntry(c, key, spec, spec_key)
            elif key is None and self._fast_tree is not None and len(self._fast_tree) < 256:
                tk = fast_tree_key(args)
                if tk is not None and len(tk[2]) == len(c.program.invars):
                    struct, leaf_key, _ = tk
                    self._fast_tree[(struct, leaf_key)] = _FastEntry(c, leaf_key, spec, spec_key, struct)

    def specialize(self, *example_args: Any, **sizes: Any) -> list[dyn.Specialization]:
        """Build specializations ahead of time: ``f.specialize(batch=32, seq=[64, 128])``.

        With example arguments (arrays or :class:`ShapeDtypeStruct`), their signature is traced
        first; otherwise every traced symbolic signature whose axes are all given is specialized.
        A list of sizes builds every combination. Returns the specializations.
        """
        if example_args:
            targets = [self.lower(*example_args)]
        else:
            targets = [c for st in self._structs.values() for c in st.entries.values()
                       if c.symbolic and all(a in sizes for a in c.executable.axes)]
            if not targets:
                raise ValueError(f"{self._label}.specialize({', '.join(sizes)}): no traced signature has "
                                 "exactly these named axes; call the function once or pass example "
                                 "arguments / ShapeDtypeStructs")
        out = []
        for c in targets:
            axes = c.executable.axes
            choices = [sizes[a] if isinstance(sizes.get(a), (list, tuple, range)) else [sizes.get(a)]
                       for a in axes]
            for combo in itertools.product(*choices):
                out.append(c.specialize(**dict(zip(axes, combo))))
        return out

    def _count_build(self, before: tuple[int, int]) -> None:
        """Add the C compiles / disk-cache hits since ``before`` (:func:`_compiler_stats`), i.e. those
        building one of this function's executables caused, to its counters."""
        after = _compiler_stats()
        self._compiler_runs += after[0] - before[0]
        self._disk_hits += after[1] - before[1]

    def cache_info(self) -> dict[str, int]:
        """``compiles``/``traces``: Programs traced (level 1); ``specializations``: bindings built
        (level 2); ``hits``: calls (and ``lower``) that built nothing; ``calls``: every call of the
        function; ``compiler_runs`` / ``disk_cache_hits``: C compiles run / libraries loaded from the
        disk cache while building this function's executables and specializations;
        ``size``/``specializations_cached``: entries held now; ``evictions``: specializations
        dropped by the LRU."""
        sc = self._spec_cache
        c_calls = (self._dispatch.calls if self._dispatch is not None else 0) + \
            sum(d.calls for d in self._tree_dispatch.values()) + self._dropped_c_calls  # served in C
        calls = self.hits - self._other_hits + self._slow_calls + c_calls
        return {"traces": self.traces, "compiles": self.traces, "hits": self.hits + c_calls, "calls": calls,
                "compiler_runs": self._compiler_runs, "disk_cache_hits": self._disk_hits,
                "size": sum(len(st.entries) for st in self._structs.values()), "specializations": sc.built,
                "specializations_cached": len(sc), "specialization_cache_size": sc.maxsize,
                "evictions": sc.evictions}

    def clear_cache(self) -> None:
        """Drop every traced signature and specialization of this function (their executables,
        arenas and output buffers are freed once nothing else holds them)."""
        self._dropped_c_calls += (self._dispatch.calls if self._dispatch is not None else 0) + \
            sum(d.calls for d in self._tree_dispatch.values())
        self._dispatch = None
        self._structs.clear()
        if self._fast is not None:
            self._fast.clear()
        if self._fast_tree is not None:
            self._fast_tree.clear()
        self._tree_dispatch.clear()
        self._spec_cache.clear()

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self
        return functools.partial(self, obj)


BACKENDS["numpy"] = _numpy_backend


_default_override: str | None = None  # set_default_backend
_auto_default: str | None = None  # the automatic choice, probed once
BACKEND_ENV = "EMBER_BACKEND"


def _auto_backend() -> str:
    """``"native"`` when a working C compiler is found, else ``"numpy"`` with a one-time warning."""
    global _auto_default
    if _auto_default is None:
        native = BACKENDS.get("native")
        if native is None:
            reason = "it is not registered (import ember._src.native)"
        else:
            try:
                reason = native.unavailable_reason()
            except CompileError as e:  # $EMBER_CC names a missing or broken compiler
                reason = str(e)
        if reason is None:
            _auto_default = "native"
        else:
            _auto_default = "numpy"
            warnings.warn(f"ember: the native backend is unavailable: {reason}; jit uses the reference "
                          f"backend 'numpy' (set {BACKEND_ENV}=numpy to silence this)", RuntimeWarning,
                          stacklevel=4)
            dbg.logger.info("default backend: numpy (%s)", reason)
    return _auto_default


def default_backend() -> str:
    """The name of the backend ``jit`` uses when none is given.

    The one set with :func:`set_default_backend`, else ``$EMBER_BACKEND`` (``native`` or
    ``numpy``), else ``"native"`` when a working C compiler is found and ``"numpy"`` (the reference
    interpreter, with a one-time ``RuntimeWarning`` saying why) when not.
    """
    if _default_override is not None:
        return _default_override
    env = os.environ.get(BACKEND_ENV, "").strip()
    if env:
        if env not in BACKENDS:
            raise ValueError(f"${BACKEND_ENV}={env!r} is not a backend; available: {sorted(BACKENDS)}")
        return env
    return _auto_backend()


def set_default_backend(name: str | None) -> None:
    """Set the process-wide default backend of ``jit`` (``"native"``, ``"numpy"``; None: automatic).

    It overrides ``$EMBER_BACKEND`` and applies to signatures traced afterwards (already traced
    ones keep their executable).
    """
    global _default_override
    if name is not None and name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; available: {sorted(BACKENDS)}")
    _default_override = name


def _install_call_slot(mod: Any) -> None:
    """Make ``JitFunction.__call__`` the C dispatcher extension's ``CallSlot`` (once): it runs an
    instance's C dispatcher (``_dispatch``) and on a miss the Python ``__call__`` below, so a warm
    call runs no Python bytecode (that frame was ~0.4 us of a 1.0 us call of a tiny program)."""
    slot_type = getattr(mod, "CallSlot", None)
    py_call = JitFunction.__dict__["__call__"]
    if slot_type is not None and inspect.isfunction(py_call):
        JitFunction.__call__ = slot_type(py_call, "_dispatch")  # type: ignore[method-assign]


def jit(fun: Callable | None = None, *, static_argnums: int | Sequence[int] = (),
        static_argnames: str | Sequence[str] = (), backend: str | None = None, dynamic_axes: Any = None,
        specialization_cache_size: int = 64, **options: Any) -> Any:
    """Compile ``fun``: trace it to a Program once per signature and run that Program.

    Usable as ``@jit`` and ``@jit(static_argnums=...)``. ``backend`` picks ``"native"`` (fused C)
    or ``"numpy"`` (the reference interpreter); ``None`` uses :func:`default_backend` (native when
    a C compiler works). Other keyword ``options`` go to the backend.

    ``dynamic_axes`` names dynamic dims of the inputs so one trace serves every size of them: a
    dict by parameter name (``{"x": ("batch", None), "mask": "batch, seq"}``) or a sequence with
    one spec per positional argument; a spec is a tuple of axis names / ``None`` (static) / ints
    (checked static sizes), or the string form ``"batch, 512"`` / ``"batch, _"`` / ``"batch, ..."``;
    pytree arguments take a matching pytree of specs (a string applies to every leaf). Each axis
    binding gets a specialization, kept in an LRU of ``specialization_cache_size`` entries. See
    ``docs/dynamic_axes.md``.
    """
    if backend is not None and backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; available: {sorted(BACKENDS)}")

    def make(f: Callable) -> JitFunction:
        return JitFunction(f, static_argnums, static_argnames, backend, dynamic_axes=dynamic_axes,
                           specialization_cache_size=specialization_cache_size, **options)

    if fun is None:
        return make
    return make(fun)


def make_program(fun: Callable, *, static_argnums: int | Sequence[int] = (),
                 static_argnames: str | Sequence[str] = (), **options: Any) -> Callable[..., Program]:
    """``make_program(f)(*args)`` returns the traced :class:`Program` of ``f`` at these arguments."""
    jf = fun if isinstance(fun, JitFunction) else JitFunction(fun, static_argnums, static_argnames)

    @functools.wraps(fun)
    def build(*args: Any, **kwargs: Any) -> Program:
        return jf.trace(*args, **kwargs)[0]

    return build


def pmap(fun: Callable, axis_name: Any = None, *, in_axes: Any = 0, out_axes: Any = 0,
         static_broadcasted_argnums: int | Sequence[int] = (), devices: Any = None,
         backend: str | None = None, axis_size: int | None = None, donate_argnums: Any = ()) -> Callable:
    """``jax.pmap`` on the one host device: ``fun`` mapped over the leading axis of its arguments
    with collectives over ``axis_name``, compiled once per signature -- ``jit(vmap(fun, ...))``.

    JAX runs one member per device and refuses more members than devices; ember has one host
    device and runs every member of the mapped axis in the same native call.
    """
    if devices is not None and len(devices) != 1:
        raise ValueError("pmap: ember has one host device; devices= must name at most that one")
    statics = (static_broadcasted_argnums,) if isinstance(static_broadcasted_argnums, int) else \
        tuple(static_broadcasted_argnums)
    if statics:
        def bound(*args: Any) -> Any:
            static = {i: args[i] for i in statics}
            dyn = [a for i, a in enumerate(args) if i not in static]

            def inner(*d: Any) -> Any:
                it = iter(d)
                full = [static[i] if i in static else next(it) for i in range(len(args))]
                return fun(*full)
            axes = in_axes if not isinstance(in_axes, (list, tuple)) else \
                type(in_axes)(a for i, a in enumerate(in_axes) if i not in static)
            return vmap(inner, axes, out_axes, axis_size, axis_name)(*dyn)
        return JitFunction(bound, static_argnums=statics, backend=backend)
    return jit(vmap(fun, in_axes, out_axes, axis_size, axis_name), backend=backend)
