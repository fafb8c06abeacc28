"""CUDA graphs: a launch sequence captured once and replayed as one ``cuGraphLaunch``.

Shared by every CUDA executable: a program's kernels (:class:`.cuda_runtime.CUDAExecutable`) and a
device ``scan``'s steps (:mod:`.cuda_loops`). :func:`capture` records the work a callback issues on
a stream into an executable graph (``cuStreamBeginCapture`` ... ``cuGraphInstantiate``); a failed
capture returns None and the caller issues the work directly. :class:`GraphCache` keeps one graph
per key (a binding of the named axes) with the device pointers it was captured with: a call with
the same pointers relaunches it, a call with other pointers updates the kernel nodes whose
arguments changed (``cuGraphExecKernelNodeSetParams``) or, where a node cannot be updated that way
(a cuBLAS call's kernels, whose arguments ember does not know), captures the steps again and
updates the executable graph from the new one (``cuGraphExecUpdate``), instantiating anew only
where the driver refuses.
``EMBER_CUDA_GRAPHS=0`` turns graphs off: the work is issued on the stream directly.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

STATS = {"captures": 0, "relaunches": 0, "updates": 0, "recaptures": 0, "direct": 0, "failed": 0}
"""What :meth:`GraphCache.run` did since the process started (by outcome)."""


def check(res: Any, what: str) -> Any:
    """The values of a driver call's result tuple; a RuntimeError naming ``what`` where it failed."""
    err, *rest = res if isinstance(res, tuple) else (res,)
    if int(err) != 0:
        raise RuntimeError(f"cuda: {what} failed ({err})")
    return rest[0] if len(rest) == 1 else rest


def graphs_enabled() -> bool:
    """Whether launches are captured into CUDA graphs (``EMBER_CUDA_GRAPHS``, default on)."""
    return os.environ.get("EMBER_CUDA_GRAPHS", "1") != "0"


@dataclass
class Launch:
    """One kernel launch: the function, grid and block, and its ``kernelParams`` (an address array
    and the value arrays it points into, kept alive here until the launch is issued)."""

    fn: Any
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    params: tuple

    def issue(self, drv: Any, stream: Any) -> None:
        """``cuLaunchKernel`` on ``stream``."""
        check(drv.cuLaunchKernel(self.fn, *self.grid, *self.block, 0, stream, self.params[0].ctypes.data, 0),
              "cuLaunchKernel")

    def node_params(self, drv: Any) -> Any:
        """The launch as ``CUDA_KERNEL_NODE_PARAMS`` (for a graph node update)."""
        p = drv.CUDA_KERNEL_NODE_PARAMS()
        p.func = self.fn
        p.gridDimX, p.gridDimY, p.gridDimZ = self.grid
        p.blockDimX, p.blockDimY, p.blockDimZ = self.block
        p.sharedMemBytes = 0
        p.kernelParams = int(self.params[0].ctypes.data)
        p.extra = 0
        return p


def capture(drv: Any, record: Callable[[Any], None]) -> tuple[Any, Any] | None:
    """``(graph, executable graph)`` of the work ``record(stream)`` issues (:func:`capture_graph`),
    or None where capture or instantiation fails (the work is then not issued)."""
    graph = capture_graph(drv, record)
    if graph is None:
        return None
    try:
        return graph, check(drv.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
    except RuntimeError:
        drv.cuGraphDestroy(graph)
        return None


def capture_graph(drv: Any, record: Callable[[Any], None]) -> Any:
    """The graph of the work ``record(stream)`` issues, captured on a non-blocking stream of its
    own (capture runs nothing, and a stream that synchronizes with the legacy stream cannot be
    captured), or None where capture fails."""
    mode = drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
    try:
        cap = check(drv.cuStreamCreate(drv.CUstream_flags.CU_STREAM_NON_BLOCKING), "cuStreamCreate")
    except RuntimeError:
        return None
    try:
        check(drv.cuStreamBeginCapture(cap, mode), "cuStreamBeginCapture")
    except RuntimeError:
        drv.cuStreamDestroy(cap)
        return None
    try:
        record(cap)
    except RuntimeError:
        drv.cuStreamEndCapture(cap)
        drv.cuStreamDestroy(cap)
        return None
    try:
        return check(drv.cuStreamEndCapture(cap), "cuStreamEndCapture")
    except RuntimeError:
        return None
    finally:
        drv.cuStreamDestroy(cap)


def kernel_nodes(drv: Any, graph: Any) -> dict[int, Any]:
    """The graph's kernel nodes by their function handle (as an int); a node the driver does not
    describe (a library's kernel) is left out, and all where it does not list them."""
    try:
        _, n = check(drv.cuGraphGetNodes(graph, 0), "cuGraphGetNodes")
        nodes, _ = check(drv.cuGraphGetNodes(graph, n), "cuGraphGetNodes")
    except RuntimeError:
        return {}
    out: dict[int, Any] = {}
    for node in nodes:
        try:
            kind = check(drv.cuGraphNodeGetType(node), "cuGraphNodeGetType")
            if kind == drv.CUgraphNodeType.CU_GRAPH_NODE_TYPE_KERNEL:
                p = check(drv.cuGraphKernelNodeGetParams(node), "cuGraphKernelNodeGetParams")
                out[int(p.func)] = node
        except RuntimeError:
            continue
    return out


@dataclass
class _Entry:
    graph: Any
    exe: Any
    ptrs: tuple
    nodes: dict[int, Any] | None = None  # kernel nodes by function, looked up at the first update


class GraphCache:
    """One executable graph per key (see the module docstring). A step is a :class:`Launch` or any
    object with ``issue(drv, stream)`` (a library call: its nodes are not updated in place)."""

    def __init__(self) -> None:
        self.entries: dict[Any, _Entry | None] = {}  # None: capture failed, launches go direct

    def run(self, drv: Any, key: Any, steps: Sequence[Any], ptrs: Sequence[tuple], stream: Any) -> str:
        """Issues ``steps`` (whose device pointers are ``ptrs``, one tuple per step) on ``stream``
        as one graph launch where it can; returns what it did: ``captured``, ``relaunched``,
        ``updated``, ``recaptured``, ``direct`` (graphs off) or ``failed`` (capture failed)."""
        ptrs = tuple(tuple(p) for p in ptrs)
        if not graphs_enabled() or self.entries.get(key, False) is None:
            how = "failed" if graphs_enabled() else "direct"
            for s in steps:
                s.issue(drv, stream)
            STATS[how] += 1
            return how
        ent = self.entries.get(key)
        how = "relaunched"
        if ent is not None and ent.ptrs != ptrs:
            how = "updated" if self._update(drv, ent, steps, ptrs) else "recaptured"
            if how == "recaptured" and not self._recapture(drv, ent, steps, ptrs):
                self.drop(drv, key)
                ent = None
        if ent is None:
            made = capture(drv, lambda cap: [s.issue(drv, cap) for s in steps])
            if made is None:
                self.entries[key] = None
                return self.run(drv, key, steps, ptrs, stream)
            graph, exe = made
            ent = self.entries[key] = _Entry(graph, exe, ptrs)
            how = "captured" if how == "relaunched" else how
        check(drv.cuGraphLaunch(ent.exe, stream), "cuGraphLaunch")
        STATS[{"captured": "captures", "relaunched": "relaunches", "updated": "updates",
               "recaptured": "recaptures"}[how]] += 1
        return how

    @staticmethod
    def _update(drv: Any, ent: _Entry, steps: Sequence[Any], ptrs: tuple) -> bool:
        """Set the arguments of the kernel nodes whose pointers changed; False where a changed step
        is not an updatable kernel node (or the driver refuses)."""
        if ent.nodes is None:
            ent.nodes = kernel_nodes(drv, ent.graph)
        for s, old, new in zip(steps, ent.ptrs, ptrs):
            if old == new:
                continue
            node = ent.nodes.get(int(s.fn)) if isinstance(s, Launch) else None
            if node is None:
                return False
            try:
                check(drv.cuGraphExecKernelNodeSetParams(ent.exe, node, s.node_params(drv)),
                      "cuGraphExecKernelNodeSetParams")
            except RuntimeError:
                return False
        ent.ptrs = ptrs
        return True

    @staticmethod
    def _recapture(drv: Any, ent: _Entry, steps: Sequence[Any], ptrs: tuple) -> bool:
        """Capture the steps again and update the executable graph from the new graph in place
        (``cuGraphExecUpdate``: same topology, new arguments, no instantiation); False where the
        driver refuses (the caller instantiates anew)."""
        graph = capture_graph(drv, lambda cap: [s.issue(drv, cap) for s in steps])
        if graph is None:
            return False
        try:
            check(drv.cuGraphExecUpdate(ent.exe, graph), "cuGraphExecUpdate")
        except RuntimeError:
            drv.cuGraphDestroy(graph)
            return False
        drv.cuGraphDestroy(ent.graph)
        ent.graph, ent.ptrs, ent.nodes = graph, ptrs, None
        return True

    def drop(self, drv: Any, key: Any) -> None:
        """Destroy the graph of ``key``."""
        ent = self.entries.pop(key, None)
        if ent is not None:
            drv.cuGraphExecDestroy(ent.exe)
            drv.cuGraphDestroy(ent.graph)
