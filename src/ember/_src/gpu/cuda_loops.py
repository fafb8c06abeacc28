"""Loops on CUDA: a ``scan`` (and ``fori_loop``) with a static trip count runs on the device
(one whose body holds a ``while`` steps from the host: :mod:`.cuda_stepped`).

The loop schedule is WebGPU's (:class:`.loop_schedule.ScanSchedule`: ping-pong carry sets, the
``xs``/``ys`` steps copied at their offsets, the carries the body does not write into the other set
copied there); this module is only the launch layer. The body's kernels are one CUDA module
(compiled once), and the executable owns a buffer for every slot of the schedule, per axis binding,
so every launch's arguments are fixed: each call copies the scan's operands into the executable's
operand buffers, runs the steps' launches and copies on one stream with no host synchronization
between them, and copies the final carries and the stacked ``ys`` into new buffers (the outputs).
The steps' work is captured once into a **CUDA graph** (``cuStreamBeginCapture`` ...
``cuGraphInstantiate``, through :class:`.cuda_graphs.GraphCache`, as every CUDA program's
launches) and each call is one ``cuGraphLaunch``; where capture fails, or with
``EMBER_CUDA_GRAPHS=0``, the launches are issued on the stream directly. Everything runs on the
runtime's one call stream (:func:`.cuda_runtime.call_stream`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember._src.gpu import cuda_graphs, kernels, loop_schedule, nested, segments
from ember._src.gpu import cuda_runtime as rt
from ember._src.program import Eqn, Literal, Program


def device_scan(e: Eqn) -> bool:
    """Whether ``e`` is a ``scan`` with a static length whose body (nested static loops unrolled,
    conds as selects) the device kernels compute."""
    return nested.static_scan(e) and nested._size(e.params["body"]) is not None


def check_loop(e: Eqn) -> None:
    """For a ``scan``/``while``/``cond`` that is not a device loop on CUDA: NotImplementedError
    naming the primitive of its programs without a device kernel (in a scan body, what a nested
    scan, ``cond`` or ``while`` holds; a ``while`` or ``cond`` in a ``while`` body or a ``cond``
    branch is one). Returns where it finds none."""
    if e.prim.name == "cond":
        progs = [(f"branch {i}", b) for i, b in enumerate(e.params["branches"])]
    else:
        names = {"scan": ("body",), "while": ("cond", "body")}.get(e.prim.name, ())
        progs = [(n, e.params[n]) for n in names]
    for name, prog in progs:
        for x in prog.eqns:
            if e.prim.name == "scan" and x.prim.name == "while":
                check_loop(x)  # (the scan steps from the host around it: what it holds counts)
            elif e.prim.name in ("scan", "cond") and (nested.static_scan(x) or x.prim.name == "cond"):
                check_loop(x)  # (unrolled, or a select, in a scan body: what it holds counts)
            elif not segments.device_computes(x):
                raise kernels._unsupported(x.prim.name, "cuda", f"in the {name} of a '{e.prim.name}'")


graphs_enabled = cuda_graphs.graphs_enabled


class _Bound:
    """A scan's device state under one binding: a buffer per slot, the body's steps of either
    parity (per GEMM precision) and the stream."""

    def __init__(self) -> None:
        self.slots: dict[Any, rt.CUDABuffer] = {}
        self.steps: dict[Any, list[list[Any]]] = {}
        self.stream: Any = None


class _Steps:
    """The whole loop as one step of a :class:`.cuda_graphs.GraphCache` (its buffers are the
    binding's own, so its pointers never change)."""

    def __init__(self, scan: CUDAScan, st: _Bound, plan: loop_schedule.ScanPlan, steps: list[list[Any]]):
        self.scan, self.st, self.plan, self.steps = scan, st, plan, steps

    def issue(self, drv: Any, stream: Any) -> None:
        self.scan._record(drv, self.st, self.plan, self.steps, stream)


class CUDAScan:
    """A program of one device ``scan`` equation (a loop segment of
    :class:`.segments.SegmentedExecutable`) run on CUDA device 0 (module docstring)."""

    def __init__(self, prog: Program, axes: tuple[str, ...] = ()):
        (e,) = prog.eqns
        self.prog, self.eqn, self.axes = prog, e, tuple(axes)
        self.nc, self.nk = e.params["num_consts"], e.params["num_carry"]
        self.body_exe = rt.CUDAExecutable(nested.unrolled_body(e.params["body"]), self.axes)
        self.body = self.body_exe.schedule
        self.schedule = loop_schedule.ScanSchedule(e, self.body)
        self.out_avals = prog.out_avals
        how = "on the device, launched back to back on one stream and captured into one CUDA graph"
        self.source = loop_schedule.describe(self.schedule, how) + self.body_exe.source
        self._bound: dict[tuple, _Bound] = {}
        self.graphs = cuda_graphs.GraphCache()

    def ptx(self, arch: str = "compute_90") -> bytes:
        """The body's PTX for ``arch`` (NVRTC; no device needed)."""
        return self.body_exe.ptx(arch)

    def __call__(self, args: list, sizes: dict | None = None) -> list:
        """Host arrays in, host arrays out."""
        return [h.download(segments.bound_shape(a.shape, sizes), a.dtype)
                for h, a in zip(self.run_device(args, sizes), self.out_avals)]

    def run_device(self, args: list, sizes: dict | None = None) -> list:
        """:class:`.cuda_runtime.CUDABuffer` arguments are read in place (host values copied); the
        outputs are new buffers left on the device."""
        with rt._LOCK:
            drv = rt._open()
            return self._run(drv, args, sizes or {})

    def _run(self, drv: Any, args: list, env: dict) -> list:  # runs only where a CUDA device exists
        plan = self.schedule.plan(env, rt.nbytes)
        st = self._state(drv, plan, env)
        pos = {v: i for i, v in enumerate(self.prog.invars)}
        for x, slot in zip(self.eqn.inputs, self._operand_slots()):
            n = rt.nbytes(int(np.prod(segments.bound_shape(x.aval.shape, env), dtype=np.int64)), x.aval.dtype)
            if not n:
                continue
            a = np.full(segments.bound_shape(x.aval.shape, env), x.val, x.aval.dtype) \
                if isinstance(x, Literal) else args[pos[x]]
            dst = st.slots[slot].ptr
            if isinstance(a, rt.CUDABuffer):
                rt._check(drv.cuMemcpyDtoDAsync(dst, a.ptr, n, st.stream), "cuMemcpyDtoDAsync")
            else:  # (synchronous, on the legacy stream, which the blocking stream waits for)
                host = np.ascontiguousarray(np.asarray(a, x.aval.dtype)).view(rt._storage_dtype(x.aval.dtype))
                rt._check(drv.cuMemcpyHtoD(dst, host.ctypes.data, n), "cuMemcpyHtoD")
                rt.TRANSFERS["host_to_device"] += 1
                rt.TRANSFERS["host_to_device_bytes"] += n
        if plan.actions:
            precision = rt.cuda_blas.precision()
            steps = self._steps(drv, st, plan, env, precision)  # (the module loaded outside the capture)
            key = (tuple(int(env[a]) for a in self.axes), precision)
            self.graphs.run(drv, key, [_Steps(self, st, plan, steps)], [()], st.stream)
        outs = []
        for slot in plan.outputs:
            size = plan.buffers[slot]
            buf = rt._alloc(size)
            rt._check(drv.cuMemcpyDtoDAsync(buf.ptr, st.slots[slot].ptr, size, st.stream),
                      "cuMemcpyDtoDAsync")
            outs.append(buf)
        handles = dict(zip(self.eqn.outvars, outs))
        return [handles[v] for v in self.prog.outvars]

    def _operand_slots(self) -> list[tuple]:
        nc, nk, n = self.nc, self.nk, len(self.eqn.inputs)
        return [("const", j) for j in range(nc)] + [("init", j) for j in range(nk)] + \
            [("xs", j) for j in range(n - nc - nk)]

    def _state(self, drv: Any, plan: loop_schedule.ScanPlan, env: dict) -> _Bound:
        """The buffers, launch parameters and stream of the binding ``env`` (made at its first call)."""
        key = tuple(int(env[a]) for a in self.axes)
        st = self._bound.get(key)
        if st is not None:
            return st
        st = _Bound()
        sizes = dict(plan.buffers)
        for x, slot in zip(self.eqn.inputs, self._operand_slots()):
            count = int(np.prod(segments.bound_shape(x.aval.shape, env), dtype=np.int64))
            sizes[slot] = rt.nbytes(max(count, 1), x.aval.dtype)
        for slot, size in sizes.items():
            st.slots[slot] = rt._alloc(size)
        for i, val in plan.body_consts.items():
            st.slots["body_const", i] = rt._upload(val, val.dtype)
        for j, (value, n, dtype) in plan.literals.items():
            host = np.full(max(n, 1), value, dtype).view(rt._storage_dtype(dtype))
            rt._check(drv.cuMemcpyHtoD(st.slots["literal", j].ptr, host.ctypes.data, host.nbytes),
                      "cuMemcpyHtoD")
        st.stream = rt.call_stream(drv)
        self._bound[key] = st
        return st

    def _steps(self, drv: Any, st: _Bound, plan: loop_schedule.ScanPlan, env: dict,
               precision: Any) -> list[list[Any]]:
        """The body's steps (kernel launches, GEMM calls) on the buffers of either parity."""
        if precision not in st.steps:
            functions = self.body_exe.functions(drv)
            axis_values = [np.array([int(env[a])], dtype=np.int32) for a in self.body.axes]
            st.steps[precision] = [
                [rt.make_step(k, fn, [int(st.slots[plan.binding(par)[b.index]].ptr) for b in k.buffers()],
                              axis_values, env, precision) for k, fn in zip(self.body.kernels, functions)]
                for par in (0, 1)]
        return st.steps[precision]

    def _record(self, drv: Any, st: _Bound, plan: loop_schedule.ScanPlan, steps: list[list[Any]],
                stream: Any) -> None:
        """Issues the loop's copies and its body's steps on ``stream``."""
        def copy(src: int, so: int, dst: int, do: int, n: int) -> None:
            rt._check(drv.cuMemcpyDtoDAsync(dst + do, src + so, n, stream), "cuMemcpyDtoDAsync")

        def body(par: int) -> None:
            for s in steps[par]:
                s.issue(drv, stream)

        loop_schedule.replay(plan, lambda s: int(st.slots[s].ptr), copy, body)


def launches_per_call(scan: CUDAScan, env: dict | None = None) -> dict[str, int]:
    """What one call of ``scan`` issues on its stream under the binding ``env`` (counted from the
    shared schedule; no device needed): kernel launches and device-to-device copies of the loop."""
    plan = scan.schedule.plan(env or {}, rt.nbytes)
    steps = sum(1 for a in plan.actions if a[0] == "body")
    return {"kernel_launches": steps * len(scan.body.kernels),
            "copies": sum(1 for a in plan.actions if a[0] == "copy")}
