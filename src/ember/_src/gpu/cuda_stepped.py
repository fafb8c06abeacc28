"""A ``scan`` whose body holds a ``while_loop``, on CUDA: stepped from the host.

The ``while``'s trip count is known only on the device, so the scan cannot be one graph: the
host drives it, as on WebGPU (:class:`.stepped.SteppedScan`, shared). The body is a
:class:`.segments.SegmentedExecutable` of device segments (each a :class:`.cuda_runtime.CUDAExecutable`,
one graph launch), device scans and host-driven loops (the ``while``: its ``cond`` on the device,
one boolean read back per test, its ``body`` on the device). Before the steps every ``xs`` slice
is copied out of the stacked inputs into a buffer of its own (``cuMemcpyDtoDAsync`` on the call
stream), after them every step's ``ys`` into the stacked outputs; the carries never leave the
device. All of it is issued on the runtime's one call stream, so it stays ordered with the
steps' graph launches and with the synchronous reads of the booleans.
"""

from __future__ import annotations

from typing import Any

from ember._src.gpu import cuda_loops, nested, segments, stepped
from ember._src.gpu import cuda_runtime as rt
from ember._src.program import Eqn, Program


def stepped_scan(e: Eqn) -> bool:
    """Whether ``e`` is a static ``scan`` that is not one device loop because its body holds a
    ``while``, and whose body's equations the device computes or are device loops (a device
    scan, a host-driven ``while``/``cond``, or a scan stepped likewise)."""
    if not nested.static_scan(e) or cuda_loops.device_scan(e):
        return False
    body = e.params["body"]
    return any(x.prim.name == "while" for x in body.eqns) and all(
        segments.device_computes(x) or segments.device_control(x) or cuda_loops.device_scan(x)
        or stepped_scan(x) for x in body.eqns)


class CUDASteppedScan(stepped.SteppedScan):
    """A program of one ``scan`` equation whose body holds a ``while``, stepped from the host
    (module docstring): the copies of the steps' slices on the call stream."""

    def __init__(self, prog: Program, axes: tuple[str, ...] = ()):
        super().__init__(prog, rt.CUDAExecutable, rt._kind, rt._while, rt._to_host, rt._to_device,
                         rt.CUDABuffer, rt.nbytes, axes)

    def _copy(self, drv: Any, dst: int, src: int, size: int) -> None:
        if size:
            rt._check(drv.cuMemcpyDtoDAsync(dst, src, size, rt.call_stream(drv)), "cuMemcpyDtoDAsync")

    def slices(self, xs: list, step_bytes: list[int], n: int) -> list[list]:
        with rt._LOCK:
            drv = rt._open()
            out = [[rt._alloc(max(s, 1)) for s in step_bytes] for _ in range(n)]
            for i in range(n):
                for src, dst, s in zip(xs, out[i], step_bytes):
                    self._copy(drv, int(dst.ptr), int(src.ptr) + i * s, s)
        return out

    def stack(self, y_steps: list[list], step_bytes: list[int], n: int) -> list:
        with rt._LOCK:
            drv = rt._open()
            ys = [rt._alloc(max(n * s, 1)) for s in step_bytes]
            for i in range(n):
                for src, dst, s in zip(y_steps[i], ys, step_bytes):
                    self._copy(drv, int(dst.ptr) + i * s, int(src.ptr), s)
        return ys
