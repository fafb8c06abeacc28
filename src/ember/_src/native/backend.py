"""The native backend: Program -> passes -> schedule -> memory plan -> C -> one native call.

``native_backend(program, **options)`` returns a :class:`NativeExecutable`, a callable
``run(list_of_numpy) -> list_of_numpy`` that also exposes every stage for inspection
(``optimized``, ``schedule``, ``plan``, ``source``). ``ember.jit(f, backend="native")`` uses it;
``f.lower(x).executable.source`` shows the generated C.

Options: the fields of :class:`.options.NativeOptions` (``passes``, ``fuse``, ``gemm_epilogue``,
``max_kernel_inputs``, ``num_threads``, ``parallel_threshold``, ``inplace``,
``simd``, ``validate``, ``prepack``), parsed once when the executable is built: an unknown name or
a wrong type raises. The stages run by :func:`.pipeline.lower`; this module compiles, loads and
calls the result (and keeps the program cache, :mod:`.progcache`).

Programs the native backend does not support (symbolic shapes, dtypes without a C type such as
float16/bfloat16/complex, no working C compiler) run on the reference backend instead; the reason
is logged on the ``ember`` logger and kept in ``executable.fallback_reason``. Within a supported
program, primitives without a kernel or call lowering (:mod:`.calls`, :mod:`.lapack`) run as
*fallback steps*: the generated code calls back into Python, which applies the primitive's NumPy
implementation to the step's buffers, so the program remains a single native call with one
memory plan.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ember._src import core
from ember._src.array import aligned_copy
from ember._src.native import abi
from ember._src.native.emit import c_ops, fft_blocks, gemm_kernel
from ember._src.native.options import NativeOptions
from ember._src.native.pipeline import Lowered, lower
from ember._src.native.plan.planner import MemoryPlan
from ember._src.native.runtime import cache_files, compiler, fft_tables, progcache, threadpool, toolchain
from ember._src.native.runtime import interrupt as native_interrupt
from ember._src.native.runtime import memory as native_memory
from ember._src.native.runtime.pool import OutputSlots, data_address
from ember._src.native.scheduling.gemm_strategy import gemm_dims
from ember._src.native.scheduling.schedule import Schedule
from ember._src.program import Literal, Program, run_numpy
from ember._src.validation import ExecuteCheck, run_validators
from ember.errors import DTypeError, ShapeError

logger = logging.getLogger("ember")

# A C-dispatched call keeps the GIL through a program this small (NativeExecutable._releases_gil):
# releasing and taking it back costs ~0.1 us, against a few microseconds of work (a 64^3 float32
# product: ~5 us), and another thread gains nothing from so short a gap.
GIL_HOLD_BYTES = 64 * 1024  # arena, inputs and outputs together
GIL_HOLD_MADDS = 64 ** 3  # multiply-adds of the program's matrix products

_warned: set[str] = set()


def debug_level_now() -> int:
    """ember's debug level (:func:`ember.set_debug`), read at call time."""
    try:
        from ember._src.debug import debug_level
    except ImportError:  # pragma: no cover - older trees
        return 0
    return debug_level()


def unsupported_reason(p: Program) -> str | None:
    """Why ``p`` cannot run natively, or None."""
    avals = [v.aval for v in (*p.invars, *p.constvars)] + [v.aval for e in p.eqns for v in e.outvars]
    avals += [a.aval for e in p.eqns for a in e.inputs]
    for a in avals:
        if any(not isinstance(d, int) for d in a.shape):
            return f"symbolic shape {a.str_short()} (the native backend compiles static shapes only)"
        if np.dtype(a.dtype) not in c_ops.SUPPORTED_DTYPES:
            return f"dtype {a.dtype} has no C type in the native backend"
    return None


def load_entry(source: str, name_hint: str, owner: object) -> tuple[Any, str, bool, bool]:
    """Compile (or find in the cache) and load ``source`` for the executable ``owner``; returns its
    ``ember_main`` as a ctypes function, the library path, whether the compiler ran and whether the
    disk cache served it. The library's FFT tables are freed when its last owner is dropped."""
    native_interrupt.prepare_for(source)
    before = compiler.cache_stats()
    path = compiler.compile_shared(source, name_hint=name_hint)
    after = compiler.cache_stats()
    kernels = fft_blocks.prepare_for(source)  # the FFT kernel libraries it calls, loaded first
    lib = compiler.load_library(source, name_hint=name_hint)
    fft_tables.track(owner, lib)
    for klib, sym in kernels:
        fft_tables.track(owner, klib, sym)
    fn = abi.bind_entry(lib)
    return fn, path, after["compiles"] > before["compiles"], after["disk_hits"] > before["disk_hits"]


def check_inputs(args: Sequence[Any], in_avals: list[tuple[tuple, np.dtype]]) -> list[np.ndarray]:
    """``args`` as C-contiguous NumPy arrays, checked against the expected (shape, dtype) pairs."""
    if len(args) != len(in_avals):
        raise TypeError(f"native executable takes {len(in_avals)} inputs, got {len(args)}")
    out = []
    for i, (a, (shape, dtype)) in enumerate(zip(args, in_avals)):
        if not isinstance(a, np.ndarray):
            a = np.asarray(getattr(a, "value", a))
        if a.dtype != dtype:
            raise DTypeError(f"input {i}: expected dtype {dtype}, got {a.dtype}")
        if a.shape != shape:
            raise ShapeError(f"input {i}: expected shape {shape}, got {a.shape}")
        if not a.flags.c_contiguous:
            a = np.ascontiguousarray(a)
        out.append(a)
    return out


def run_fallback_step(e: Any, params: dict, inputs: Sequence[Any], in_avals: list, out_avals: list,
                      eqn_avals: list, ptrs: Any, view: Callable[[int, Any], np.ndarray]) -> None:
    """Run a fallback step's primitive with its NumPy implementation on the step's buffers:
    ``ptrs`` holds the addresses of the non-literal inputs (``in_avals`` None for literals) and
    then of the outputs; ``view(ptr, aval)`` makes a NumPy view of one buffer."""
    k = 0
    vals = []
    for a, av in zip(inputs, in_avals):
        if av is None:
            vals.append(a.val)
        else:
            vals.append(view(ptrs[k], av))
            k += 1
    outs = core.eval_impl(e.prim, vals, params, eqn_avals)
    for av, o in zip(out_avals, outs):
        np.copyto(view(ptrs[k], av), o)
        k += 1


def host_view(ptr: int, aval: Any) -> np.ndarray:
    """A NumPy array over the native buffer at ``ptr`` with ``aval``'s shape and dtype (no copy)."""
    shape = tuple(aval.shape)
    dtype = np.dtype(aval.dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes == 0:
        return np.empty(shape, dtype)
    raw = (ctypes.c_uint8 * nbytes).from_address(ptr)
    return np.frombuffer(raw, dtype=np.uint8).view(dtype).reshape(shape)


class NativeExecutable:
    """A compiled program: call it with a list of NumPy arrays, get a list of NumPy arrays."""

    borrows_inputs = False  # True once compiled: see run_trusted

    def __init__(self, program: Program, **options: Any):
        self.options = NativeOptions.parse(options)
        self.original = program
        self._optimized: Program | None = None
        self._schedule: Schedule | None = None
        self._plan: MemoryPlan | None = None
        self._info: toolchain.CompilerInfo | None = None
        self.program_cache_hit = False  # whether the program cache served this executable
        self._gil_release: bool | None = None  # _releases_gil from a program-cache entry
        self.source: str | None = None
        self.library_path: str | None = None
        self.fallback_reason: str | None = None
        self.compile_seconds = 0.0
        self.compiled_now = False  # whether building this executable ran the compiler
        self._pool_pending = 0  # calls until this starts loading the thread pool (from the cache)
        self._gemm_pending = False  # ... and the GEMM kernel's library with it
        self.disk_hit = False  # whether building it loaded the library from the disk cache
        self.calls = 0
        self._packed_args: list[tuple[int, ...]] = []
        self._consts = [core.concrete_or_error(c, "a captured constant") for c in program.consts]
        self._lock = threading.Lock()
        self._error: BaseException | None = None
        reason = unsupported_reason(program)
        info = None
        if reason is None:
            info = toolchain.find_compiler()
            if info is None:
                reason = "no working C compiler found (set $EMBER_CC or install cc/gcc/clang)"
                if reason not in _warned:
                    _warned.add(reason)
                    warnings.warn(f"ember native backend: {reason}; using the reference backend",
                                  RuntimeWarning, stacklevel=3)
        if reason is not None:
            self.fallback_reason = reason
            logger.debug("native backend: falling back to the reference backend: %s", reason)
            return
        self._build(info)

    # -- compile ------------------------------------------------------------------------------
    @property
    def optimized(self) -> Program | None:
        """The Program after the passes (rebuilt on first access when the program cache served
        this executable)."""
        self._ensure_stages()
        return self._optimized

    @property
    def schedule(self) -> Schedule | None:
        """The schedule (steps) of :attr:`optimized` (rebuilt lazily after a program-cache hit)."""
        self._ensure_stages()
        return self._schedule

    @property
    def plan(self) -> MemoryPlan | None:
        """The memory plan of :attr:`schedule` (rebuilt lazily after a program-cache hit)."""
        self._ensure_stages()
        return self._plan

    def _ensure_stages(self) -> None:
        if self._optimized is None and self.program_cache_hit and self._info is not None:
            self._keep_stages(self._lower(self._info, "off"))

    def _lower(self, info: toolchain.CompilerInfo, mode: str) -> Lowered:
        """The pipeline (:func:`.pipeline.lower`) on this executable's program, validated under ``mode``."""
        return lower(self.original, self.options, openmp=info.has_openmp, mode=mode)

    def _keep_stages(self, low: Lowered) -> None:
        self._optimized, self._schedule, self._plan = low.program, low.schedule, low.plan

    def _build(self, info: toolchain.CompilerInfo) -> None:
        t0 = time.perf_counter()
        self._info = info
        mode = self.options.validation_mode()
        key = progcache.program_key(self.original, self.options, info, mode) \
            if mode != "strict" and progcache.enabled() else None
        directory = cache_files.cache_dir()
        if key is not None and self._from_cache(progcache.load(directory, key)):
            self.compile_seconds = time.perf_counter() - t0
            logger.debug("native backend: program cache hit %s (no passes, schedule or codegen) in %.3f s",
                         key[:16], self.compile_seconds)
            return
        low = self._lower(info, mode)
        self._keep_stages(low)
        sched, plan, gen = low.schedule, low.plan, low.generated
        self.source = gen.source
        self._fallback_steps = gen.fallback_steps
        self._body_consts = gen.extra_consts  # derived constants (abi.const_ref(k))
        self._packed_args = gen.packed_args  # products whose B is an argument (gemm._argument_packed_b)
        self._setup_call()
        if sched.steps and any(s.kind != "alias" for s in sched.steps):
            self._fn, self.library_path, self.compiled_now, self.disk_hit = \
                load_entry(gen.source, "ember_program", self)
        else:
            self._fn = None
        if key is not None:
            self._store(directory, key)
        if mode == "strict":  # the execute phase: an instance attribute, so the default path is untouched
            self.run_trusted = self._run_validated  # type: ignore[method-assign]
        self.compile_seconds = time.perf_counter() - t0
        if logger.isEnabledFor(logging.DEBUG):
            how = "compiled" if self.compiled_now else "cache hit"
            logger.debug("native backend: %d steps (%d kernels, %d gemm, %d fallback, %d loops), arena %d B, "
                         "%s in %.3f s", len(sched.steps), sched.count("kernel"), sched.count("gemm"),
                         sched.count("fallback"), sched.count("loop") + sched.count("cond"), plan.arena_bytes,
                         how, self.compile_seconds)
            for st in sched.steps:
                if st.kind == "fallback":
                    logger.debug("native backend: %s runs %s through the Python fallback (no kernel "
                                 "lowering)", st.name, st.eqns[0].prim.name)
            if debug_level_now() >= 2:
                logger.debug("native backend: generated source:\n%s", gen.source)

    def _setup_call(self) -> None:
        p, plan = self._optimized, self._plan
        out_bufs: dict[int, tuple] = {}
        for kind, idx, a in plan.outputs:
            if kind == "output" and idx not in out_bufs:
                b = plan.value_buffer[a.id]
                out_bufs[idx] = (tuple(a.aval.shape), np.dtype(a.aval.dtype), b.nbytes)
        self._setup_buffers(
            len(p.invars), [np.ascontiguousarray(getattr(c, "value", c)) for c in p.consts], plan.arena_bytes,
            [(tuple(v.aval.shape), np.dtype(v.aval.dtype)) for v in p.invars],
            [out_bufs[i] for i in range(plan.n_outputs)],
            [(kind, idx, a if isinstance(a, Literal) else (tuple(a.aval.shape), np.dtype(a.aval.dtype)))
             for kind, idx, a in plan.outputs])

    def _setup_buffers(self, n_in: int, consts: list[np.ndarray], arena_bytes: int,
                       in_avals: list[tuple[tuple, np.dtype]], out_bufs: list[tuple],
                       out_spec: list[tuple]) -> None:
        """The call's fixed state: argument/function pointer arrays, arena, output slots."""
        n_par = len(consts)
        self._n_in, self._n_par = n_in, n_par
        self._bufs = (ctypes.c_void_p * max(1, n_in + n_par + len(out_bufs)))()
        self._consts_opt = consts
        for j, c in enumerate(self._consts_opt):
            self._bufs[n_in + j] = c.ctypes.data
        self._arena_raw = np.zeros(arena_bytes + 64, dtype=np.uint8)
        off = (-self._arena_raw.ctypes.data) % 64
        self._arena = self._arena_raw[off:]
        self._arena_ptr = self._arena.ctypes.data
        self._callback = abi.CALLBACK_T(self._run_fallback)
        self._views: dict[tuple, np.ndarray] = {}
        self._fns = abi.fn_table(self._callback, getattr(self, "_body_consts", []))
        self._in_avals = in_avals
        self._out_bufs = out_bufs
        self._slots = OutputSlots(self._out_bufs, self._bufs, n_in + n_par)
        self._last_inputs: list[Any] = [None] * n_in
        # per product whose B is an argument: (the argument's array, its packed copy) once packed
        self._packed_cache: list[Any] = [None] * len(getattr(self, "_packed_args", []))
        self._out_spec = out_spec
        # the common case: every output is its own buffer, of the output's shape and dtype
        self._direct_out = [idx for kind, idx, _ in out_spec] \
            if all(kind == "output" and spec == self._out_bufs[idx][:2]
                   for kind, idx, spec in self._out_spec) else None
        self._call_args = (ctypes.addressof(self._bufs), self._arena_ptr, None, ctypes.addressof(self._fns))
        native_memory.track(self)
        # run_trusted accepts writable caller arrays: the program never writes its inputs and
        # an output that is an input is copied when that input is writable
        self.borrows_inputs = True

    def _store(self, directory: Any, key: str) -> None:
        """Write this executable's program-cache entry (only for the plain case the cache serves:
        no constants, loop-body constants or fallback steps, every output its own buffer)."""
        cells_only = [pa[0] for pa in self._packed_args] == list(range(len(self._body_consts)))
        if (self._n_par or not cells_only or getattr(self, "_fallback_steps", None)
                or self._direct_out is None or self.source is None):
            return
        progcache.store(directory, key, {
            "source": self.source,
            "in_avals": [[list(shape), dtype.str] for shape, dtype in self._in_avals],
            "arena_bytes": int(self._plan.arena_bytes),
            "out_bufs": [[list(shape), dtype.str, int(n)] for shape, dtype, n in self._out_bufs],
            "outputs": [int(i) for i in self._direct_out],
            "native": self._fn is not None,
            "releases_gil": bool(self._releases_gil()),
            "packed_args": [list(pa) for pa in self._packed_args],
        })

    def _from_cache(self, entry: dict | None) -> bool:
        """Set this executable up from a program-cache entry (see :mod:`.progcache`): no passes,
        schedule, plan or C generation; those stages are rebuilt only if inspected. False when
        ``entry`` is None or does not fit the program."""
        if entry is None:
            return False
        try:
            source = entry["source"]
            in_avals = [(tuple(int(d) for d in shape), np.dtype(dt)) for shape, dt in entry["in_avals"]]
            out_bufs = [(tuple(int(d) for d in shape), np.dtype(dt), int(n))
                        for shape, dt, n in entry["out_bufs"]]
            outputs = [int(i) for i in entry["outputs"]]
            arena_bytes, native = int(entry["arena_bytes"]), bool(entry["native"])
            releases_gil = bool(entry["releases_gil"])
            packed_args = [tuple(int(x) for x in pa) for pa in entry.get("packed_args", [])]
            if [pa[0] for pa in packed_args] != list(range(len(packed_args))):
                return False
            if not isinstance(source, str) or any(not 0 <= i < len(out_bufs) for i in outputs):
                return False
        except (KeyError, TypeError, ValueError):
            return False
        p = self.original
        if in_avals != [(tuple(v.aval.shape), np.dtype(v.aval.dtype)) for v in p.invars] or \
                len(outputs) != len(p.outvars):
            return False
        self.source = source
        self._fallback_steps = []
        self._body_consts = [np.zeros(1, np.uint64) for _ in packed_args]  # the cells, still empty
        self._packed_args = packed_args
        self._setup_buffers(len(in_avals), [], arena_bytes, in_avals, out_bufs,
                            [("output", i, out_bufs[i][:2]) for i in outputs])
        if native:
            self._fn, self.library_path, self.compiled_now, self.disk_hit = \
                load_entry(source, "ember_program", self)
        else:
            self._fn = None
        # what C generation would have started: the GEMM kernel's library (gemm._small_sgemm_call;
        # until it loads, the program calls BLAS) and threadpool.c_helpers (else every parallel loop,
        # the kernel's too, runs under OpenMP); at the second call (as the C dispatcher's build
        # starts), so no loader thread's Python holds the GIL in a first call (pinned to one CPU, the
        # pool's loader took +1-4 ms of a 9 ms warm first call, the kernel's 1-3 ms at two threads)
        self._gemm_pending = "em_sk_fn()" in source or "em_skp_fn()" in source
        self._pool_pending = 2 if self._gemm_pending or threadpool.LOOKUP in source else 0
        self._gil_release = releases_gil
        self.program_cache_hit = True
        return True

    # -- run ----------------------------------------------------------------------------------
    def _view(self, ptr: int, aval: Any) -> np.ndarray:
        """A NumPy view of a buffer (cached: arena and constant addresses never change)."""
        key = (ptr, aval.shape, aval.dtype)
        v = self._views.get(key)
        if v is None:
            if len(self._views) > 256:
                self._views.clear()
            v = self._views[key] = host_view(ptr, aval)
        return v

    def _run_fallback(self, step_id: int, ptrs: Any) -> int:
        if self._error is not None:  # an earlier callback of this call failed (in a loop body)
            return 1
        try:
            step = self._fallback_steps[step_id]
            e = step.eqns[0]
            run_fallback_step(e, e.params, step.inputs, [None if isinstance(a, Literal) else a.aval
                                                         for a in step.inputs],
                              [v.aval for v in step.outputs], [v.aval for v in e.outvars], ptrs, self._view)
            return 0
        except BaseException as exc:  # noqa: BLE001 - re-raised after the native call returns
            self._error = exc
            return 1

    def _check_inputs(self, args: Sequence[Any]) -> list[np.ndarray]:
        return check_inputs(args, self._in_avals)

    def __call__(self, args: Sequence[Any]) -> list[np.ndarray]:
        """Run on NumPy arrays (or ember Arrays) of the program's input shapes and dtypes; returns
        read-only, 64-byte aligned arrays that never alias a writable input."""
        if self.fallback_reason is not None:
            self.calls += 1
            return run_numpy(self.original, self._consts, list(args))
        return self.run_trusted(self._check_inputs(args))

    def run_trusted(self, ins: list[np.ndarray]) -> list[np.ndarray]:
        """:meth:`__call__` without input checks: ``ins`` (a list this call may modify) are
        NumPy arrays of exactly the input shapes and dtypes (``jit`` checked their signature).
        Only for a compiled (non-fallback) executable."""
        self.calls += 1
        with self._lock:
            bufs, last = self._bufs, self._last_inputs
            for i, a in enumerate(ins):
                if a is not last[i]:  # a live array's data pointer never changes; `last` keeps it alive
                    if not a.flags.c_contiguous:
                        a = ins[i] = np.ascontiguousarray(a)
                    last[i] = a
                    bufs[i] = data_address(a)
            outs = self._slots.take()
            if self._fn is not None:
                base = self._n_in + self._n_par
                for k, (_, addr) in enumerate(outs):
                    bufs[base + k] = addr
                self._error = None
                rc = self._fn(*self._call_args)
                if rc:
                    self._raise_failure(rc)
        if self._pool_pending:
            self._pool_pending -= 1
            if not self._pool_pending:
                if self._gemm_pending:
                    gemm_kernel.load()
                threadpool.load()
        direct = self._direct_out
        if direct is not None:
            return [outs[k][0] for k in direct]
        results = []
        for kind, idx, spec in self._out_spec:
            if kind == "output":
                r = outs[idx][0]
                if r.shape != spec[0] or r.dtype != spec[1]:
                    r = r.view(spec[1]).reshape(spec[0])
            elif kind == "literal":
                r = aligned_copy(np.array(spec.val, dtype=spec.aval.dtype), owned=True)
            else:  # an input or a constant, reshaped: a writable caller's array is copied
                r = aligned_copy((ins[idx] if kind == "input" else self._consts_opt[idx]).reshape(spec[0]))
            results.append(r)
        return results

    def dispatch_entry(self, mod: Any, in_specs: list[tuple], out_weak: list[bool], wrap: Any,
                       array_type: type, miss: Any) -> Any | None:
        """An ``ember_dispatch.Entry`` running this executable for one exact argument signature
        (``in_specs``: ``(kind, weak, shape, dtype)`` per input, kind 0 an ember Array, 1 a NumPy
        array), or None when the C path cannot serve it (no compiled entry point, outputs that are
        inputs/constants/literals, strict validation)."""
        if (self._fn is None or self._direct_out is None or "run_trusted" in self.__dict__
                or len(in_specs) != self._n_in):
            return None
        fn = ctypes.cast(self._fn, ctypes.c_void_p).value
        packables = [(pa[1], self._body_consts[pa[0]].ctypes.data) for pa in self._packed_args]
        return mod.Entry(fn, ctypes.addressof(self._bufs), self._arena_ptr, ctypes.addressof(self._fns),
                         self._n_in + self._n_par, list(in_specs), self._slots.slots, self._slots.take_new,
                         list(self._direct_out), list(out_weak), wrap, self._raise_failure, self._lock,
                         self._last_inputs, array_type, self._releases_gil(), miss, packables,
                         self._pack_argument, self._packed_cache)

    def _pack_argument(self, j: int, arr: np.ndarray) -> np.ndarray:
        """The packed copy of argument ``arr`` for the ``j``-th product whose B is an argument
        (called by the C dispatcher when the same ember Array comes back; see dispatch_src.py)."""
        _, _, k, n, rsb, csb = self._packed_args[j]
        return gemm_kernel.packed_argument(gemm_kernel.op_b(arr, k, n, rsb, csb), arr.ctypes.data)

    def _releases_gil(self) -> bool:
        """Whether a C-dispatched call releases the GIL: for every program but the tiny ones
        (elementwise kernels and matrix products of at most :data:`GIL_HOLD_MADDS` multiply-adds
        over at most :data:`GIL_HOLD_BYTES`), where releasing costs more than it frees."""
        if self._gil_release is not None:
            return self._gil_release
        sched, plan = self._schedule, self._plan
        madds = 0
        for s in sched.steps:
            if s.kind == "gemm":
                madds += int(np.prod(gemm_dims(s), dtype=np.int64))
            elif s.kind not in ("kernel", "alias"):
                return True
        io = sum(int(np.prod(v.aval.shape, dtype=np.int64)) * np.dtype(v.aval.dtype).itemsize
                 for v in self._optimized.invars)
        return (madds > GIL_HOLD_MADDS
                or plan.arena_bytes + io + sum(n for _, _, n in self._out_bufs) > GIL_HOLD_BYTES)

    def _raise_failure(self, rc: int) -> None:
        """Raise the error of a failed native call (a fallback step's exception, or the step)."""
        err, self._error = self._error, None
        if err is not None:
            raise err
        native_interrupt.check_status(rc)  # Ctrl-C stopped it: KeyboardInterrupt
        raise RuntimeError(f"native program failed at step {rc - 1}")

    def _run_validated(self, ins: list[np.ndarray]) -> list[np.ndarray]:
        """:meth:`run_trusted` after the ``execute`` validators (strict validation mode only)."""
        run_validators("execute", ExecuteCheck(self._in_avals, ins), "strict")
        return NativeExecutable.run_trusted(self, ins)

    def describe(self) -> str:
        """Optimized program, schedule, memory plan (the C source is ``.source``)."""
        if self.fallback_reason is not None:
            return f"reference backend (fallback: {self.fallback_reason})\n{self.original}"
        return f"{self.optimized}\n\n{self.schedule}\n\n{self.plan}"

    def __repr__(self) -> str:
        state = f"fallback: {self.fallback_reason}" if self.fallback_reason else \
            f"{len(self.schedule.steps)} steps, arena {self.plan.arena_bytes} B"
        return f"<NativeExecutable {state}>"


def native_backend(program: Program, **options: Any) -> NativeExecutable:
    """Backend factory registered as ``BACKENDS["native"]``."""
    return NativeExecutable(program, **options)
