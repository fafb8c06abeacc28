"""Loops on WebGPU: ``scan`` (and ``fori_loop``, a scan with a static trip count) as preencoded
dispatches, one ``queue.submit`` for the whole loop; ``while_loop`` host-driven over device buffers.

**scan.** The body is scheduled once into kernels (:func:`.kernels.schedule`); its bind groups are
built once per call for the two parities of a **ping-pong** pair of carry buffers (the loop
schedule, shared with CUDA, is :class:`.loop_schedule.ScanSchedule`): on even steps
the body reads carry set A and its kernels write the new carries straight into set B, on odd steps
the reverse, so a carry is never copied. Per step the encoder records: copies of the ``x`` slices
``xs[i]`` into the body's input buffers (``copy_buffer_to_buffer`` at offset ``i * slice``), one
compute pass of the body's dispatches, and copies of the ``y`` slices into the stacked outputs.
A carry the body does not compute into its own buffer (a carry passed through, a constant, a
literal, one value returned as two carries) is copied into the next parity's buffer instead.

**while.** The trip count is data-dependent, so the host drives it: per step the ``cond`` program
runs on the device and its one boolean is read back (4 bytes), then the ``body`` program runs on
the device; the carries never leave it. **cond** likewise: its index is read back (4 bytes) and the
chosen branch runs on the device over the operands' buffers.

A ``scan`` nested in a ``scan`` body, with a static trip count, is unrolled into the body and a
``cond`` in it becomes a select of its branches (:mod:`.nested`), so the whole nest is
preencoded. A ``scan`` whose body holds a ``while`` (its trip count known only on the device) is
**stepped from the host** (:class:`SteppedScan`): per step the ``xs`` slices are copied out on the
device, the body runs as device segments and host-driven loops over device buffers, and the ``ys``
are copied into the stacked outputs; the carries never leave the device. A loop whose programs
hold a primitive without a device kernel is not a device loop (:func:`device_loop`): an error
naming it, or the host with ``host_fallback=True``.

**float16 steps of an odd element count.** WebGPU copies whole 4-byte words, so such a step of
``xs`` or ``ys`` cannot be copied at its offset. :func:`even_f16_steps` rewrites the scan before
it is scheduled: each such ``xs`` is flattened per step and padded by one element (a map kernel
before the loop), the body reads the step's first elements back in its own shape, and each such
``y`` is written padded and sliced back after the loop; the steps are then whole words.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ember._src.core import ShapedArray
from ember._src.gpu import kernels, loop_schedule, nested, segments, stepped, webgpu
from ember._src.gpu.webgpu import WebGPUBuffer, WebGPUExecutable, _pipeline, _storage, _to_device, _upload
from ember._src.prims.movement import pad_p, reshape_p, slice_p
from ember._src.program import Eqn, Literal, Program, trace_to_program


def device_loop(e: Eqn) -> bool:
    """Whether ``e`` is a ``scan`` with a static length whose body the device kernels compute, a
    ``while`` whose ``cond`` and ``body`` they compute, or a ``cond`` whose branches they compute."""
    if e.prim.name == "scan" and isinstance(e.params["length"], int):
        return not _odd_f16_steps(e) and (nested._size(e.params["body"]) is not None or stepped_scan(e))
    return segments.device_control(e)


def stepped_scan(e: Eqn) -> bool:
    """Whether ``e`` is a static ``scan`` that cannot be preencoded because its body holds a
    ``while``, and whose body's equations the device computes or are device loops: it runs
    stepped from the host (:class:`SteppedScan`)."""
    if e.prim.name != "scan" or not isinstance(e.params["length"], int) or _odd_f16_steps(e):
        return False
    body = e.params["body"]
    return any(x.prim.name == "while" for x in body.eqns) and \
        all(segments.device_computes(x) or device_loop(x) for x in body.eqns)


def _odd_f16_steps(e: Eqn) -> bool:
    """Whether a ``scan``'s ``xs`` or ``ys`` has float16 steps of an odd element count: a step
    would start in the middle of a 4-byte word, where WebGPU cannot copy from or to."""
    ps = e.params
    avals = [x.aval for x in e.inputs[ps["num_consts"] + ps["num_carry"]:]]
    avals += [v.aval for v in e.outvars[ps["num_carry"]:]]
    return any(_odd_f16(a) for a in avals)


def _odd_f16(a: Any) -> bool:
    """Whether ``a`` (a stacked aval) is float16 with steps of an odd, static element count."""
    rest = a.shape[1:]
    return a.dtype == np.float16 and all(isinstance(d, int) for d in rest) and math.prod(rest) % 2 == 1


def even_f16_steps(prog: Program) -> Program:
    """``prog`` with each of its static scans over float16 steps of an odd element count rewritten
    to steps padded by one element (module docstring); ``prog`` itself when it has none."""
    if not any(e.prim.name == "scan" and _odd_f16_steps(e) for e in prog.eqns):
        return prog
    out, _ = trace_to_program(lambda *args: _eval_even(prog, prog.consts, args), prog.in_avals)
    return out


def _pad1(x: Any, dtype: np.dtype) -> Any:
    """``x`` (rank 1 or 2) with one zero appended along its last axis."""
    cfg = ((0, 0, 0),) * (len(x.aval.shape) - 1) + ((0, 1, 0),)
    return pad_p.bind(x, np.zeros((), dtype), padding_config=cfg)


def _eval_even(p: Program, consts: Any, args: Any) -> list:
    env: dict[Any, Any] = dict(zip(p.constvars, consts))
    env.update(zip(p.invars, args))

    def read(a: Any) -> Any:
        return a.val if isinstance(a, Literal) else env[a]

    for e in p.eqns:
        ins = [read(a) for a in e.inputs]
        if e.prim.name == "scan" and _odd_f16_steps(e):
            outs = _even_scan(e, ins)
        else:
            outs = e.prim.bind(*ins, **e.params)
            outs = outs if e.prim.multiple_results else [outs]
        env.update(zip(e.outvars, outs))
    return [read(a) for a in p.outvars]


def _even_scan(e: Eqn, ins: list) -> list:
    """The scan ``e`` over padded steps (:func:`even_f16_steps`), its outputs in the original form."""
    ps = e.params
    body, n, nc, nk = ps["body"], ps["length"], ps["num_consts"], ps["num_carry"]
    x_avals = [v.aval for v in e.inputs[nc + nk:]]
    y_avals = [v.aval for v in e.outvars[nk:]]
    odd_x, odd_y = [_odd_f16(a) for a in x_avals], [_odd_f16(a) for a in y_avals]
    xs = [_pad1(reshape_p.bind(x, new_sizes=(n, math.prod(a.shape[1:]))), a.dtype) if odd else x
          for x, a, odd in zip(ins[nc + nk:], x_avals, odd_x)]

    def step(*vals: Any) -> list:
        xi = [reshape_p.bind(slice_p.bind(x, start_indices=(0,), limit_indices=(math.prod(a.shape[1:]),),
                                          strides=None), new_sizes=tuple(a.shape[1:])) if odd else x
              for x, a, odd in zip(vals[nc + nk:], x_avals, odd_x)]
        outs = nested._eval(body, body.consts, [*vals[:nc + nk], *xi])
        ys = [_pad1(reshape_p.bind(y, new_sizes=(math.prod(a.shape[1:]),)), a.dtype) if odd else y
              for y, a, odd in zip(outs[nk:], y_avals, odd_y)]
        return [*outs[:nk], *ys]

    step_avals = [*body.in_avals[:nc + nk]] + [
        ShapedArray((math.prod(a.shape[1:]) + 1,), a.dtype) if odd else b
        for a, b, odd in zip(x_avals, body.in_avals[nc + nk:], odd_x)]
    new_body, _ = trace_to_program(step, step_avals)
    outs = e.prim.bind(*ins[:nc + nk], *xs, **dict(ps, body=new_body))
    ys = [reshape_p.bind(slice_p.bind(y, start_indices=(0, 0), limit_indices=(n, math.prod(a.shape[1:])),
                                      strides=None), new_sizes=tuple(a.shape)) if odd else y
          for y, a, odd in zip(outs[nk:], y_avals, odd_y)]
    return [*outs[:nk], *ys]


def check_loop_bodies(e: Eqn, in_scan: bool = False) -> None:
    """For a ``scan``/``while``/``cond`` that is not a device loop: NotImplementedError naming the
    primitive of its programs that has no device kernel (or the dynamic trip count). ``in_scan``:
    ``e`` is a ``cond`` in a scan body (where loops and conds nest)."""
    if e.prim.name == "scan" and not isinstance(e.params["length"], int):
        raise kernels._unsupported("scan", "webgpu", "a scan over a named dynamic axis")
    if e.prim.name == "scan" and _odd_f16_steps(e):
        raise kernels._unsupported("scan", "webgpu", "a scan over float16 steps of an odd element count "
                                   "(pad them to an even size, or host_fallback=True)")
    names = {"scan": ("body",), "while": ("cond", "body")}.get(e.prim.name, ())
    progs = [(name, e.params[name]) for name in names]
    if e.prim.name == "cond":
        progs = [(f"branch {i}", b) for i, b in enumerate(e.params["branches"])]
    in_scan = e.prim.name == "scan" or (in_scan and e.prim.name == "cond")
    for name, prog in progs:
        for x in prog.eqns:
            if in_scan and x.prim.name == "while" and e.prim.name == "cond":
                raise kernels._unsupported("while", "webgpu", f"in the {name} of a 'cond' in a scan body "
                                           "(a select computes every branch)")
            if in_scan and (nested.static_scan(x) or x.prim.name in ("cond", "while")):
                check_loop_bodies(x, in_scan=x.prim.name != "while")  # nested: what it holds
            elif not segments.device_computes(x):
                raise kernels._unsupported(x.prim.name, "webgpu", f"in the {name} of a '{e.prim.name}'")
    if e.prim.name == "scan" and nested._size(e.params["body"]) is None and not stepped_scan(e):
        raise kernels._unsupported("scan", "webgpu", "nested loops that unroll to more than "
                                   f"{nested.MAX_EQNS} equations in a scan body")


def make_loop(prog: Program, axes: tuple[str, ...] = ()) -> Any:
    """The executable of a program of one device loop equation (with ``axes``, a symbolic one:
    built once, each call given the binding)."""
    if prog.eqns[0].prim.name == "scan":
        return WebGPUScan(prog, axes) if nested._size(prog.eqns[0].params["body"]) is not None \
            else SteppedScan(prog, axes)
    if prog.eqns[0].prim.name == "cond":
        return segments.HostDrivenCond(prog, WebGPUExecutable, WebGPUBuffer, _to_device, axes)
    return segments.HostDrivenWhile(prog, WebGPUExecutable, WebGPUBuffer, _to_device, axes)


class WebGPUScan:
    """A program of one device ``scan`` equation (a segment of :class:`.segments.SegmentedExecutable`):
    the loop schedule of :mod:`.loop_schedule` recorded into one command buffer."""

    def __init__(self, prog: Program, axes: tuple[str, ...] = ()):
        (e,) = prog.eqns
        self.prog, self.eqn = prog, e
        p = e.params
        self.length, self.reverse = p["length"], p["reverse"]
        self.nc, self.nk = p["num_consts"], p["num_carry"]
        with webgpu._LOCK:
            webgpu._open()
            lang = webgpu.renderer()
        # inner scans unrolled, conds selects
        self.body = kernels.schedule(nested.unrolled_body(p["body"]), lang, axes)
        self.schedule = loop_schedule.ScanSchedule(e, self.body)
        self._size_bufs: dict[tuple, Any] = {}
        self.out_avals = prog.out_avals
        self.source = (loop_schedule.describe(self.schedule, "preencoded in one submission") +
                       "\n".join(f"// body kernel {k.name}: grid {k.grid}\n{k.source}"
                                 for k in self.body.kernels))
        with webgpu._LOCK:
            webgpu._open()
            self.pipelines = [_pipeline(k.source) for k in self.body.kernels]
        self._consts: dict[int, Any] = {}  # the body's captured constants
        self._consts_in: dict[int, Any] = {}  # literal operands of the scan equation

    def __call__(self, args: list, sizes: dict | None = None) -> list:
        """Host arrays in, host arrays out."""
        handles = self.run_device(args, sizes)
        return [h.download(segments.bound_shape(a.shape, sizes), a.dtype)
                for h, a in zip(handles, self.out_avals)]

    def run_device(self, args: list, sizes: dict | None = None) -> list:
        """:class:`.webgpu.WebGPUBuffer` arguments are read in place; the outputs stay on the device."""
        with webgpu._LOCK:
            return self._run(args, sizes or {})

    def _run(self, args: list, env: dict) -> list:
        st = webgpu._STATE
        dev, pool = st["device"], st["pool"]
        body, nc, nk = self.body, self.nc, self.nk
        plan = self.schedule.plan(env, webgpu.nbytes)
        taken: list = []
        pos = {v: i for i, v in enumerate(self.prog.invars)}
        ins = []
        for j, x in enumerate(self.eqn.inputs):  # (a literal operand is not a segment input)
            if isinstance(x, Literal):  # uploaded once, kept by the executable (like constants)
                shape = segments.bound_shape(x.aval.shape, env)
                if (j, shape) not in self._consts_in:
                    self._consts_in[j, shape] = self._const_buffer(np.full(shape, x.val, x.aval.dtype))
                ins.append(self._consts_in[j, shape])
                continue
            a = args[pos[x]]
            if isinstance(a, WebGPUBuffer):
                ins.append(a.buffer)
            else:
                n = int(np.prod(segments.bound_shape(x.aval.shape, env), dtype=np.int64))
                ins.append(_upload(a, x.aval.dtype, max(n, 1)))
                taken.append(ins[-1])
        for i, val in plan.body_consts.items():
            if i not in self._consts:
                self._consts[i] = self._const_buffer(val)
        slots: dict[Any, Any] = {("body_const", i): b for i, b in self._consts.items()}
        for kind, start, stop in (("const", 0, nc), ("init", nc, nc + nk), ("xs", nc + nk, len(ins))):
            slots.update({(kind, j): b for j, b in enumerate(ins[start:stop])})
        for slot, size in plan.buffers.items():
            taken.append(pool.acquire(size))
            slots[slot] = taken[-1]
        for j, (value, n, dtype) in plan.literals.items():
            arr = np.full(max(n, 1), value, dtype)
            dev.queue.write_buffer(slots["literal", j], 0, _storage(arr, dtype))
        sizes = body.sizes(env)
        nbytes = [webgpu.nbytes(max(s, 1), b.dtype) for s, b in zip(sizes, body.buffers)]

        def entries(k: Any, m: dict) -> list:
            out = [{"binding": s, "resource": {"buffer": slots[m[b.index]], "offset": 0,
                                               "size": nbytes[b.index]}}
                   for s, b in enumerate(k.buffers())]
            if k.uses_sizes:  # the axis values, after the storage buffers
                sz = webgpu.sizes_uniform(self._size_bufs, body.axes, env)
                out.append({"binding": len(out), "resource": {"buffer": sz, "offset": 0, "size": sz.size}})
            return out

        groups = [[dev.create_bind_group(layout=pipe.get_bind_group_layout(0),
                                         entries=entries(k, plan.binding(par)))
                   for k, pipe in zip(body.kernels, self.pipelines)] for par in (0, 1)]
        grids = [k.launch(env) for k in body.kernels]
        enc = dev.create_command_encoder()

        def run_body(par: int) -> None:
            cp = enc.begin_compute_pass()
            for grid, pipe, g in zip(grids, self.pipelines, groups[par]):
                cp.set_pipeline(pipe)
                cp.set_bind_group(0, g)
                cp.dispatch_workgroups(*grid)
            cp.end()

        loop_schedule.replay(plan, slots.__getitem__, enc.copy_buffer_to_buffer, run_body)
        dev.queue.submit([enc.finish()])
        final = [slots[s] for s in plan.outputs]
        for b in taken:
            if not any(b is f for f in final):
                pool.release(b)
        handles = dict(zip(self.eqn.outvars, [WebGPUBuffer(b, pool) for b in final]))
        return [handles[v] for v in self.prog.outvars]  # (the others go back to the pool as they die)

    def _const_buffer(self, val: np.ndarray) -> Any:
        """A buffer the executable owns (outside the pool), holding ``val``."""
        dev, wgpu = webgpu._STATE["device"], webgpu._STATE["wgpu"]
        usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_DST | wgpu.BufferUsage.COPY_SRC
        buf = dev.create_buffer(size=max(256, webgpu.nbytes(val.size, val.dtype)), usage=usage)
        if val.size:
            dev.queue.write_buffer(buf, 0, _storage(val, val.dtype))
        return buf


class SteppedScan(stepped.SteppedScan):
    """A program of one ``scan`` equation whose body holds a ``while``, stepped from the host
    (:mod:`.stepped`): the ``xs`` slices of every step are copied out of the stacked inputs in
    one submission before the steps, and every step's ``ys`` into the stacked outputs in one
    after them."""

    def __init__(self, prog: Program, axes: tuple[str, ...] = ()):
        super().__init__(prog, WebGPUExecutable, webgpu._kind, make_loop, webgpu._to_host, _to_device,
                         WebGPUBuffer, webgpu.nbytes, axes)

    def slices(self, xs: list, step_bytes: list[int], n: int) -> list[list]:
        with webgpu._LOCK:
            pool, dev = webgpu._STATE["pool"], webgpu._STATE["device"]
            out = [[WebGPUBuffer(pool.acquire(max(s, 4)), pool) for s in step_bytes] for _ in range(n)]
            enc = dev.create_command_encoder()
            for i in range(n):
                for src, dst, s in zip(xs, out[i], step_bytes):
                    if s:
                        enc.copy_buffer_to_buffer(src.buffer, i * s, dst.buffer, 0, s)
            dev.queue.submit([enc.finish()])
        return out

    def stack(self, y_steps: list[list], step_bytes: list[int], n: int) -> list:
        with webgpu._LOCK:
            pool, dev = webgpu._STATE["pool"], webgpu._STATE["device"]
            ys = [WebGPUBuffer(pool.acquire(max(n * s, 4)), pool) for s in step_bytes]
            enc = dev.create_command_encoder()
            for i in range(n):
                for src, dst, s in zip(y_steps[i], ys, step_bytes):
                    if s:
                        enc.copy_buffer_to_buffer(src.buffer, 0, dst.buffer, i * s, s)
            dev.queue.submit([enc.finish()])
        return ys
