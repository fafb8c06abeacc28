"""A ``scan`` whose body holds a ``while_loop``, stepped from the host: the part WebGPU
(:class:`.webgpu_loops.SteppedScan`) and CUDA (:class:`.cuda_stepped.CUDASteppedScan`) share.

The ``while``'s trip count is known only on the device, so the scan cannot be one preencoded
submission or one graph. The body is a :class:`.segments.SegmentedExecutable` of device segments
and device loops (the ``while`` host-driven: its ``cond`` on the device, one boolean read back per
test), run once per step over device buffers. Before the steps every ``xs`` slice is copied out of
the stacked inputs into a buffer of its own, after them every step's ``ys`` into the stacked
outputs (a runtime's :meth:`SteppedScan.slices` and :meth:`SteppedScan.stack`); the carries never
leave the device.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember._src.gpu import segments
from ember._src.program import Program


class SteppedScan:
    """A program of one ``scan`` equation whose body holds a ``while``, stepped from the host
    (module docstring). A runtime gives its device executable, its equation kinds and loop
    executables, its transfers (as :class:`.segments.SegmentedExecutable` takes them), its buffer
    handle type and its ``nbytes(count, dtype)``, and implements :meth:`slices` and :meth:`stack`."""

    def __init__(self, prog: Program, make_device: Callable[..., Any], kind: Callable, make_loop: Callable,
                 to_host: Callable, to_device: Callable, handle_type: type, nbytes: Callable,
                 axes: tuple[str, ...] = ()):
        (e,) = prog.eqns
        self.prog, self.eqn, self.axes = prog, e, tuple(axes)
        self.handle_type, self.to_device, self.nbytes = handle_type, to_device, nbytes
        p = e.params
        self.length, self.reverse = p["length"], p["reverse"]
        self.nc, self.nk = p["num_consts"], p["num_carry"]
        self.body = segments.SegmentedExecutable(p["body"], make_device, kind, make_loop, to_host, to_device,
                                                 axes=self.axes)
        self.out_avals = prog.out_avals
        self.source = (f"// scan: {self.length} steps stepped from the host (its body holds a while)\n"
                       + self.body.source)

    def __call__(self, args: list, sizes: dict | None = None) -> list:
        """Host arrays in, host arrays out."""
        return [h.download(segments.bound_shape(a.shape, sizes), a.dtype)
                for h, a in zip(self.run_device(args, sizes), self.out_avals)]

    def run_device(self, args: list, sizes: dict | None = None) -> list:
        """Handles are read in place (host values go to the device once); the outputs are new
        buffers left on the device."""
        e, n, nc, nk, env = self.eqn, self.length, self.nc, self.nk, sizes or {}
        ins = segments._device_operands(e, self.prog, args, self.handle_type, self.to_device, sizes)
        consts, carry, xs = ins[:nc], ins[nc:nc + nk], ins[nc + nk:]

        def step_bytes(a: Any) -> int:
            return self.nbytes(int(np.prod(segments.bound_shape(a.shape[1:], env), dtype=np.int64)), a.dtype)

        x_steps = self.slices(xs, [step_bytes(x.aval) for x in e.inputs[nc + nk:]], n)
        extra = (sizes,) if self.axes else ()
        y_steps: list = [None] * n
        for i in (range(n - 1, -1, -1) if self.reverse else range(n)):
            outs = self.body.run_device([*consts, *carry, *x_steps[i]], *extra)
            x_steps[i] = []  # (back to the pool)
            carry, y_steps[i] = outs[:nk], outs[nk:]
        ys = self.stack(y_steps, [step_bytes(v.aval) for v in e.outvars[nk:]], n)
        out = dict(zip(e.outvars, [*carry, *ys]))
        return [out[v] for v in self.prog.outvars]

    def slices(self, xs: list, step_bytes: list[int], n: int) -> list[list]:
        """Per step, a new buffer per ``xs`` holding its slice (``step_bytes`` each)."""
        raise NotImplementedError

    def stack(self, y_steps: list[list], step_bytes: list[int], n: int) -> list:
        """The stacked outputs: a new buffer per ``y`` with every step's slice at its offset."""
        raise NotImplementedError
