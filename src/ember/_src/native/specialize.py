"""Named dynamic axes on the native backend: one C compile per symbolic Program.

``BACKENDS["native"].specialize(program, env, **options)`` (the hook :mod:`ember._src.dynamic`
calls for each new axis binding) works in two levels:

* **Level 1** (:class:`SymbolicNative`, once per symbolic Program and options, cached in a
  ``WeakKeyDictionary`` keyed by the Program): passes, schedule, memory plan (liveness, aliasing,
  in-place reuse: binding independent) and C code generation run on the symbolic program. The
  generated ``ember_main`` reads each axis value from its ``dims`` argument
  (``dims[0..n_axes)``) and each arena offset after them; static sizes stay constants. One shared
  library per symbolic signature.
* **Level 2** (:meth:`SymbolicNative.specialize`, per binding, tens of microseconds): evaluate the
  sizes with one generated Python function, place the arena buffers first-fit for those sizes,
  fill the ``dims`` array and return a :class:`NativeRun`. The arena itself is shared by all
  bindings of one symbolic program (grown to the largest peak seen; calls take a lock), so serving
  many sizes keeps one warm block of memory instead of one per size.

A program the symbolic path cannot handle (a dtype without a C type, no C compiler, a size
expression the code generator cannot render, an extent beyond BLAS's ``int``) falls back to
today's behaviour: the program is resolved for the binding and compiled statically (logged with
the reason at ``set_debug(1)``). Results are the same either way.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from ember._src import core
from ember._src import shapes as sh
from ember._src.array import aligned_copy
from ember._src.native import abi
from ember._src.native.backend import (
    NativeExecutable,
    check_inputs,
    debug_level_now,
    host_view,
    load_entry,
    run_fallback_step,
)
from ember._src.native.emit import c_ops
from ember._src.native.options import NativeOptions
from ember._src.native.pipeline import lower
from ember._src.native.runtime import interrupt, toolchain
from ember._src.native.runtime import memory as native_memory
from ember._src.native.runtime.pool import POOL, data_address
from ember._src.native.scheduling.gemm_strategy import INT_MAX, gemm_dims
from ember._src.native.scheduling.schedule import Schedule, Step
from ember._src.program import Literal, Program, resolve_program, resolve_value

logger = logging.getLogger("ember")

_LEVEL1: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # Program -> {NativeOptions: SymbolicNative}
_LEVEL1_LOCK = threading.Lock()
STATS = {"level1_builds": 0, "specializations": 0, "static_fallbacks": 0}


def _pydim(d: Any) -> str:
    """Python text of a size over the axis arguments ``a_<name>``."""
    if not isinstance(d, sh.DimExpr):
        return str(int(d))
    parts = []
    for mono, c in d.terms:
        factors = [str(c)]
        for atom, p in mono:
            if atom.kind == "var":
                f = f"a_{atom.args[0]}"
            elif atom.kind == "ceil_sqrt":
                f = f"_ceil_sqrt({_pydim(atom.args[0])})"
            else:
                x, y = (_pydim(a) for a in atom.args)
                f = {"floordiv": f"({x} // {y})", "mod": f"({x} % {y})"}.get(atom.kind, f"max({x}, {y})")
            factors += [f] * p
        parts.append("*".join(factors))
    return "(" + " + ".join(parts) + ")"


def _size_function(axes: Sequence[str], exprs: Sequence[Any]) -> Any:
    """One compiled Python function ``f(*axis_values) -> tuple of ints`` for all ``exprs``."""
    args = ", ".join(f"a_{a}" for a in axes)
    body = ", ".join(_pydim(e) for e in exprs)
    src = f"def sizes({args}):\n    return ({body}{',' if len(exprs) == 1 else ''})\n"
    scope: dict[str, Any] = {"_ceil_sqrt": sh._ceil_sqrt_int}
    exec(compile(src, "<ember native sizes>", "exec"), scope)  # noqa: S102 - generated from DimExprs
    return scope["sizes"]


def _all_steps(sched: Schedule) -> list[Step]:
    """The steps of ``sched`` and of every native loop body in it (nested ones included)."""
    out = []
    for st in sched.steps:
        out.append(st)
        if st.kind in ("loop", "cond"):
            for b in st.sub.bodies:
                out.extend(_all_steps(b.schedule))
    return out


class SymbolicNative:
    """Level 1: a symbolic Program compiled once; :meth:`specialize` binds the axes.

    ``fallback_reason`` is set (and nothing compiled) when the program cannot run symbolically;
    the inspection attributes mirror :class:`~.backend.NativeExecutable`'s.
    """

    def __init__(self, program: Program, options: NativeOptions):
        self.options = options
        # the Program is the cache key of a WeakKeyDictionary: only a weak reference here, so the
        # entry (library handle, arena) goes away with the jitted function's trace
        self._original = weakref.ref(program)
        self.optimized: Program | None = None
        self.schedule = None
        self.plan = None
        self.source: str | None = None
        self.library_path: str | None = None
        self.fallback_reason: str | None = None
        self.compile_seconds = 0.0
        self.compiled_now = False
        self.disk_hit = False  # whether building it loaded the library from the disk cache
        self.axes: tuple[str, ...] = ()
        self._run_lock = threading.Lock()  # guards the shared arena (and each runner's buffers)
        self._arena_raw: np.ndarray | None = None
        self._arena_ptr = 0
        self._arena_size = -1
        reason = self._unsupported()
        info = None
        if reason is None:
            info = toolchain.find_compiler()
            if info is None:
                reason = "no working C compiler found"
        if reason is None:
            try:
                self._build(info)
            except Exception as exc:  # noqa: BLE001 - any failure means: compile per binding instead
                reason = f"{type(exc).__name__}: {exc}"
        if reason is not None:
            self.fallback_reason = reason
            logger.debug("native backend: dynamic axes: compiling a static program per binding "
                         "instead of once: %s", reason)

    @property
    def original(self) -> Program | None:
        """The symbolic Program (None once it was garbage collected)."""
        return self._original()

    def _unsupported(self) -> str | None:
        p = self.original
        assert p is not None
        avals = [v.aval for v in (*p.invars, *p.constvars)] + [v.aval for e in p.eqns for v in e.outvars]
        for a in avals:
            if np.dtype(a.dtype) not in c_ops.SUPPORTED_DTYPES:
                return f"dtype {a.dtype} has no C type in the native backend"
        return None

    # -- level 1 ------------------------------------------------------------------------------
    def _build(self, info: toolchain.CompilerInfo) -> None:
        t0 = time.perf_counter()
        from ember._src.dynamic import program_axes

        original = self.original
        assert original is not None
        self.axes = axes = program_axes(original)
        low = lower(original, self.options, openmp=info.has_openmp, axes=axes)
        self.optimized, self.schedule, self.plan = prog, sched, plan = low.program, low.schedule, low.plan
        gen = low.generated
        self.layout = layout = low.layout
        self._arena_starts, self._arena_ends = layout.root_lifetimes()
        self.source = gen.source
        self._fallback_steps = gen.fallback_steps
        # every size a binding needs, evaluated by one generated function
        out_bufs: dict[int, tuple] = {}
        for kind, idx, a in plan.outputs:
            if kind == "output" and idx not in out_bufs:
                out_bufs[idx] = (tuple(a.aval.shape), np.dtype(a.aval.dtype), plan.value_buffer[a.id].nbytes)
        self._out_bufs = [out_bufs[i] for i in range(plan.n_outputs)]
        self._out_spec = [(kind, idx, a if isinstance(a, Literal) else
                           (tuple(a.aval.shape), np.dtype(a.aval.dtype))) for kind, idx, a in plan.outputs]
        gemm_extents = [d for st in _all_steps(sched) if st.kind == "gemm" for d in gemm_dims(st)[1:]]
        exprs: list[Any] = list(layout.exprs)
        self._n_arena = len(exprs)
        exprs += [n for _, _, n in self._out_bufs]
        exprs += [d for shape, _, _ in self._out_bufs for d in shape]
        out_specs = [s for k, _, s in self._out_spec if k != "literal"]
        exprs += [d for shape, _ in out_specs for d in shape]
        self._in_avals = [(tuple(v.aval.shape), np.dtype(v.aval.dtype)) for v in prog.invars]
        exprs += [d for shape, _ in self._in_avals for d in shape]
        sym_gemm = [d for d in gemm_extents if sh.is_symbolic(d)]  # checked against BLAS's int per binding
        self._sizes = _size_function(axes, exprs + sym_gemm)
        self._n_gemm = len(sym_gemm)
        self._consts_opt = [np.ascontiguousarray(getattr(c, "value", c)) for c in prog.consts]
        self._body_consts = gen.extra_consts  # derived constants: abi.const_ref(k)
        if sched.steps and any(s.kind != "alias" for s in sched.steps):
            self._fn, self.library_path, self.compiled_now, self.disk_hit = \
                load_entry(gen.source, "ember_symbolic", self)
        else:
            self._fn = None
        STATS["level1_builds"] += 1
        self.compile_seconds = time.perf_counter() - t0
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("native backend: symbolic program over axes %s: %d steps, %s in %.3f s (one "
                         "library for every binding)", ", ".join(axes), len(sched.steps),
                         "compiled" if self.compiled_now else "cache hit", self.compile_seconds)
            if debug_level_now() >= 2:
                logger.debug("native backend: generated source (symbolic):\n%s", gen.source)

    # -- level 2 ------------------------------------------------------------------------------
    def specialize(self, env: dict[str, int]) -> NativeRun | None:
        """A runner for the binding ``env``, or None when this binding needs a static build."""
        vals = self._sizes(*[env[a] for a in self.axes])
        if self._n_gemm and max(vals[len(vals) - self._n_gemm:]) > INT_MAX:
            return None
        STATS["specializations"] += 1
        return NativeRun(self, env, vals)

    def arena(self, nbytes: int) -> int:
        """Address of a 64-byte aligned arena of at least ``nbytes`` (call with the run lock)."""
        if nbytes > self._arena_size:
            raw = np.empty(nbytes + 64, dtype=np.uint8)
            self._arena_raw, self._arena_size = raw, nbytes
            native_memory.track(self)
            self._arena_ptr = raw.ctypes.data + (-raw.ctypes.data) % 64
        return self._arena_ptr

    def describe(self) -> str:
        if self.fallback_reason is not None:
            return f"static build per binding (fallback: {self.fallback_reason})"
        return f"{self.optimized}\n\n{self.schedule}\n\n{self.plan}"


class NativeRun:
    """Level 2: the shared library of a :class:`SymbolicNative` bound to one axis binding.
    ``run(list_of_numpy) -> list_of_numpy``."""

    def __init__(self, sym: SymbolicNative, env: dict[str, int], vals: tuple):
        self.sym, self.env = sym, dict(env)
        self.calls = 0
        na = sym._n_arena
        offsets, peak = sym.layout.place(vals[:na])
        self.arena_bytes = peak
        k = na
        nout = len(sym._out_bufs)
        nbytes = vals[k:k + nout]
        k += nout
        out_bufs = []
        for (shape, dtype, _), n in zip(sym._out_bufs, nbytes):
            out_bufs.append((tuple(vals[k:k + len(shape)]), dtype, n))
            k += len(shape)
        self._out_bufs = out_bufs
        spec = []
        for kind, idx, s in sym._out_spec:
            if kind == "literal":
                spec.append((kind, idx, s))
            else:
                spec.append((kind, idx, (tuple(vals[k:k + len(s[0])]), s[1])))
                k += len(s[0])
        self._out_spec = spec
        self._in_avals = []
        for shape, dtype in sym._in_avals:
            self._in_avals.append((tuple(vals[k:k + len(shape)]), dtype))
            k += len(shape)
        n_ax = len(sym.axes)
        self._dims = (ctypes.c_int64 * max(1, n_ax + len(offsets)))(*[env[a] for a in sym.axes], *offsets)
        n_in, n_par = len(sym._in_avals), len(sym._consts_opt)
        self._n_in, self._base = n_in, n_in + n_par
        self._bufs = (ctypes.c_void_p * max(1, n_in + n_par + len(out_bufs)))()
        for j, c in enumerate(sym._consts_opt):
            self._bufs[n_in + j] = c.ctypes.data
        self._resolved: dict[int, tuple] = {}
        self._callback = abi.CALLBACK_T(self._run_fallback) if sym._fallback_steps else None
        self._fns = abi.fn_table(self._callback, sym._body_consts)
        self._last: list[Any] = [None] * n_in
        self._error: BaseException | None = None

    def _run_fallback(self, step_id: int, ptrs: Any) -> int:
        if self._error is not None:  # an earlier callback of this call failed (in a loop body)
            return 1
        try:
            step = self.sym._fallback_steps[step_id]
            e = step.eqns[0]
            resolved = self._resolved.get(step_id)
            if resolved is None:  # this binding's params (sub-programs included) and shapes, once
                memo: dict = {}

                def aval(a: Any) -> Any:
                    shape = sh.evaluate_shape(a.aval.shape, self.env)
                    return core.ShapedArray(shape, a.aval.dtype, a.aval.weak_type)

                resolved = self._resolved[step_id] = (
                    resolve_value(e.params, self.env, memo),
                    [None if isinstance(a, Literal) else aval(a) for a in step.inputs],
                    [aval(v) for v in step.outputs], [aval(v) for v in e.outvars])
            params, in_avals, out_avals, eqn_avals = resolved
            run_fallback_step(e, params, step.inputs, in_avals, out_avals, eqn_avals, ptrs, host_view)
            return 0
        except BaseException as exc:  # noqa: BLE001 - re-raised after the native call returns
            self._error = exc
            return 1

    def __call__(self, args: Sequence[Any]) -> list[np.ndarray]:
        self.calls += 1
        return self.run_trusted(check_inputs(args, self._in_avals))

    borrows_inputs = True  # reads caller arrays in place, never writes them (jit's fast path)

    def run_trusted(self, ins: list[np.ndarray]) -> list[np.ndarray]:
        """Run on arrays of the right dtypes and shapes (non-contiguous ones are copied)."""
        ins = [a if a.flags.c_contiguous else np.ascontiguousarray(a) for a in ins]
        avoid = [data_address(a) for a in ins]
        outs = [POOL.array(shape, dtype, n, avoid) for shape, dtype, n in self._out_bufs]
        fn = self.sym._fn
        if fn is not None:
            with self.sym._run_lock:
                arena = self.sym.arena(self.arena_bytes)
                bufs, last = self._bufs, self._last
                for i, a in enumerate(ins):
                    if a is not last[i]:
                        last[i] = a
                        bufs[i] = a.ctypes.data
                for k, (_, addr) in enumerate(outs):
                    bufs[self._base + k] = addr
                self._error = None
                rc = fn(bufs, arena, self._dims, self._fns)
                if rc:
                    err, self._error = self._error, None
                    if err is not None:
                        raise err
                    interrupt.check_status(rc)  # Ctrl-C stopped it: KeyboardInterrupt
                    raise RuntimeError(f"native program failed at step {rc - 1}")
        results = []
        for kind, idx, spec in self._out_spec:
            if kind == "output":
                r = outs[idx][0]
                if r.shape != spec[0] or r.dtype != spec[1]:
                    r = r.view(spec[1]).reshape(spec[0])
            elif kind == "literal":
                r = np.array(spec.val, dtype=spec.aval.dtype)
            else:
                # an input or a constant, reshaped: copied, so no output aliases a caller's array
                src = ins[idx] if kind == "input" else self.sym._consts_opt[idx]
                r = aligned_copy(src.reshape(spec[0]))
            if r.flags.writeable:
                r.flags.writeable = False
            results.append(r)
        return results

    def __repr__(self) -> str:
        env = ", ".join(f"{k}: {v}" for k, v in self.env.items())
        return f"<NativeRun {{{env}}} arena {self.arena_bytes} B>"


def symbolic_executable(program: Program, **options: Any) -> SymbolicNative:
    """The level-1 build of ``program`` for ``options`` (built on first use, then cached)."""
    key = NativeOptions.parse(options)
    with _LEVEL1_LOCK:
        per = _LEVEL1.get(program)
        if per is None:
            per = _LEVEL1[program] = {}
        exe = per.get(key)
    if exe is None:
        exe = SymbolicNative(program, options=key)
        with _LEVEL1_LOCK:
            exe = per.setdefault(key, exe)
    return exe


def native_specialize(program: Program, env: dict[str, int], **options: Any) -> Any:
    """``BACKENDS["native"].specialize``: a runner for ``program`` under the binding ``env``.

    Compiles C once per symbolic Program (level 1); per binding only sizes, arena offsets and the
    ``dims`` array are computed. Falls back to a static build of the resolved program when the
    symbolic path does not apply (the reason is logged at ``set_debug(1)``).
    """
    exe = symbolic_executable(program, **options)
    if exe.fallback_reason is None:
        run = exe.specialize(env)
        if run is not None:
            return run
        logger.debug("native backend: binding %s exceeds BLAS's int extents: static build", env)
    STATS["static_fallbacks"] += 1
    return NativeExecutable(resolve_program(program, env), **options)


def cache_stats() -> dict[str, int]:
    """Counters: symbolic programs built (``level1_builds``), bindings specialized
    (``specializations``) and bindings built statically instead (``static_fallbacks``)."""
    return dict(STATS)
