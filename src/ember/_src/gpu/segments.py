"""The host fallback of the GPU backends (``jit(f, backend=..., host_fallback=True)``).

Without the option, a primitive the device kernels do not compute is an error naming it. With it,
the program is cut into segments: runs of equations the device computes become device programs,
the others (sort, cumulative sums, ``scan``/``while``/``cond``, linear algebra, ...) host programs
run by the reference interpreter, with each segment's values copied between host and device. It
is correct and slow (a copy per segment boundary); the segments are in ``as_text()``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember._src import shapes as sh
from ember._src.gpu import ops
from ember._src.interpreter import numpy_backend
from ember._src.program import Eqn, Literal, Program, Var, resolve_program


def device_computes(e: Eqn) -> bool:
    """Whether the device kernels compute ``e`` (an inlined call: all of its equations)."""
    param = ops.INLINED.get(e.prim.name)
    if param is not None:
        sub = e.params[param]
        return all(device_computes(x) for x in getattr(sub, "program", sub).eqns)
    return ops.supported(e.prim.name)


def split(prog: Program, kind: Callable[[Eqn], str] | None = None) -> list[tuple[str, Program]]:
    """``prog`` as (kind, program) segments in order: each reads the values of earlier ones (or
    the inputs and constants) and returns those used later. ``kind(e)`` is ``"device"``, ``"host"``
    or ``"loop"`` (a device loop: a segment of its own); by default device or host."""
    kind = kind or (lambda e: "device" if device_computes(e) else "host")
    runs: list[tuple[str, list[Eqn]]] = []
    for e in prog.eqns:
        k = kind(e)
        if runs and runs[-1][0] == k and k != "loop":
            runs[-1][1].append(e)
        else:
            runs.append((k, [e]))
    needed_after: list[set] = []
    later = {a for a in prog.outvars if isinstance(a, Var)}
    for _, eqns in reversed(runs):
        needed_after.append(set(later))
        later |= {a for e in eqns for a in e.inputs if isinstance(a, Var)}
    needed_after.reverse()
    out = []
    for (dev, eqns), after in zip(runs, needed_after):
        defined = {v for e in eqns for v in e.outvars}
        ins: list[Var] = []
        for e in eqns:
            for a in e.inputs:
                if isinstance(a, Var) and a not in defined and a not in ins:
                    ins.append(a)
        outs = [v for e in eqns for v in e.outvars if v in after]
        if outs:
            out.append((dev, Program((), ins, eqns, outs)))
    return out


class SegmentedExecutable:
    """Device, loop and host segments run in order: ``make_device(program)`` builds a device
    segment, ``make_loop(program)`` a device loop (default: the host runs loops).

    :meth:`run_device` keeps device values on the device between device segments; a runtime
    passes ``to_host(handle, aval) -> ndarray`` and ``to_device(ndarray, aval) -> handle`` for the
    values that cross to and from host segments.

    With ``axes`` (a symbolic program's named dynamic axes) the device segments are built once,
    ``make_device(program, axes)``, and every call passes the binding ``sizes``; host segments
    (the interpreter: nothing to compile) are resolved to static programs per binding."""

    def __init__(self, prog: Program, make_device: Callable[..., Any],
                 kind: Callable[[Eqn], str] | None = None, make_loop: Callable[[Program], Any] | None = None,
                 to_host: Callable | None = None, to_device: Callable | None = None,
                 axes: tuple[str, ...] = ()):
        self.prog, self.axes = prog, tuple(axes)
        make = {"device": make_device, "loop": make_loop or numpy_backend, "host": numpy_backend}
        if self.axes:
            if make_loop is None and any(k == "loop" for k, _ in split(prog, kind)):
                raise NotImplementedError("a loop without a device executable in a symbolic program")
            make_sym = {"device": make_device, "loop": make_loop}
            self.segments = [(k, p, make_sym[k](p, self.axes) if k in make_sym else None)
                             for k, p in split(prog, kind)]
        else:
            self.segments = [(k, p, make[k](p)) for k, p in split(prog, kind)]
        self.source = "\n".join(getattr(exe, "source", None) or _host_text(p) for _, p, exe in self.segments)
        self.to_host, self.to_device = to_host, to_device
        self._host_segments: dict[tuple, list] = {}  # binding -> its resolved host segments

    def _bound(self, sizes: dict | None) -> list[tuple[Program, Any, bool]]:
        """Each segment's (program, executable, takes the binding) under the binding ``sizes``."""
        if not self.axes:
            return [(p, exe, False) for _, p, exe in self.segments]
        key = tuple(int(sizes[a]) for a in self.axes)  # type: ignore[index]
        out = self._host_segments.get(key)
        if out is None:
            if len(self._host_segments) >= 64:
                self._host_segments.clear()
            out = []
            for _, p, exe in self.segments:
                if exe is None:
                    rp = resolve_program(p, sizes)
                    out.append((rp, numpy_backend(rp), False))
                else:
                    out.append((p, exe, True))
            self._host_segments[key] = out
        return out

    def __call__(self, args: list, sizes: dict | None = None) -> list:
        env: dict[Var, Any] = dict(zip(self.prog.constvars, self.prog.consts))
        env.update(zip(self.prog.invars, args))
        for (_, p, _), (_, exe, bound) in zip(self.segments, self._bound(sizes)):
            vals = [env[v] for v in p.invars]
            env.update(zip(p.outvars, exe(vals, sizes) if bound else exe(vals)))
        return [np.asarray(a.val if isinstance(a, Literal) else env[a]) for a in self.prog.outvars]

    def run_device(self, args: list, sizes: dict | None = None) -> list:
        """Device handles (or host arrays) in, device handles out; values cross to the host only
        for host segments."""
        if self.to_host is None or self.to_device is None:
            raise NotImplementedError("this segmented program cannot keep values on the device")
        env: dict[Var, Any] = dict(zip(self.prog.constvars, self.prog.consts))
        env.update(zip(self.prog.invars, args))
        for (_, p, _), (rp, exe, bound) in zip(self.segments, self._bound(sizes)):
            run = getattr(exe, "run_device", None)
            if run is not None:
                ins = [env[v] for v in p.invars]
                env.update(zip(p.outvars, run(ins, sizes) if bound else run(ins)))
            else:  # (a resolved host segment's avals have the bound sizes)
                vals = [self._host(env[v], rv.aval) for v, rv in zip(p.invars, rp.invars)]
                env.update(zip(p.outvars, exe(vals)))
        outs = []
        for a in self.prog.outvars:
            if isinstance(a, Literal):
                val: Any = np.full(bound_shape(a.aval.shape, sizes), a.val, a.aval.dtype)
            else:
                val = env[a]
            outs.append(val if _is_handle(val) else self.to_device(np.asarray(val, a.aval.dtype), a.aval))
        return outs

    def _host(self, x: Any, aval: Any) -> Any:
        return self.to_host(x, aval) if _is_handle(x) else x


def _is_handle(x: Any) -> bool:
    return hasattr(x, "download")


def _host_text(p: Program) -> str:
    return "// host segment: " + ", ".join(e.prim.name for e in p.eqns) + "\n"


def device_while(e: Eqn) -> bool:
    """Whether ``e`` is a ``while`` whose ``cond`` and ``body`` the device kernels compute."""
    return e.prim.name == "while" and all(device_computes(x) for p in (e.params["cond"], e.params["body"])
                                          for x in p.eqns)


def device_cond(e: Eqn) -> bool:
    """Whether ``e`` is a ``cond`` whose branches the device kernels compute."""
    return e.prim.name == "cond" and all(device_computes(x) for b in e.params["branches"] for x in b.eqns)


def device_control(e: Eqn) -> bool:
    """Whether ``e`` is a ``while`` or ``cond`` the host drives over device buffers."""
    return device_while(e) or device_cond(e)


def bound_shape(shape: Any, sizes: dict | None) -> tuple:
    """``shape`` with its symbolic dims evaluated under the binding ``sizes``."""
    return tuple(d if isinstance(d, int) else sh.evaluate(d, sizes or {}) for d in shape)


def _device_operands(e: Eqn, prog: Program, args: list, handle_type: type, to_device: Callable,
                     sizes: dict | None = None) -> list:
    """``e``'s operands as device handles: handles in place, host values (and literals) copied."""
    pos = {v: i for i, v in enumerate(prog.invars)}
    ins = []
    for x in e.inputs:
        a = np.full(bound_shape(x.aval.shape, sizes), x.val, x.aval.dtype) if isinstance(x, Literal) \
            else args[pos[x]]
        ins.append(a if isinstance(a, handle_type) else to_device(np.asarray(a, x.aval.dtype), x.aval))
    return ins


class HostDrivenCond:
    """A program of one device ``cond`` equation: its index is read back from the device (4 bytes;
    a host value is used as it is), clamped into range, and that branch's program runs on the
    device over the operands' buffers. ``make``, ``handle_type``, ``to_device`` and ``axes`` as for
    :class:`HostDrivenWhile`."""

    def __init__(self, prog: Program, make: Callable[..., Any], handle_type: type,
                 to_device: Callable, axes: tuple[str, ...] = ()):
        (e,) = prog.eqns
        self.prog, self.eqn, self.handle_type, self.to_device = prog, e, handle_type, to_device
        self.axes = tuple(axes)
        self.branches = [make(b, self.axes) if self.axes else make(b) for b in e.params["branches"]]
        self.out_avals = prog.out_avals
        self.source = "// cond: host-driven, the index read back, the branch on the device\n" + "\n".join(
            f"// branch {i}\n{b.source}" for i, b in enumerate(self.branches))

    def __call__(self, args: list, sizes: dict | None = None) -> list:
        """Host arrays in, host arrays out."""
        return [h.download(bound_shape(a.shape, sizes), a.dtype)
                for h, a in zip(self.run_device(args, sizes), self.out_avals)]

    def run_device(self, args: list, sizes: dict | None = None) -> list:
        """Handles are read in place (host values go to the device once); the outputs stay there."""
        e = self.eqn
        index, operands = e.inputs[0], e.inputs[1:]
        if isinstance(index, Literal):
            i = int(index.val)
        else:
            a = args[self.prog.invars.index(index)]
            i = int(a.download((), index.aval.dtype) if isinstance(a, self.handle_type) else np.asarray(a))
        i = min(max(i, 0), len(self.branches) - 1)
        sub = Eqn(e.prim, operands, e.params, e.outvars)
        ins = _device_operands(sub, self.prog, args, self.handle_type, self.to_device, sizes)
        branch = self.branches[i]
        out = dict(zip(e.outvars, branch.run_device(ins, sizes) if self.axes else branch.run_device(ins)))
        return [out[v] for v in self.prog.outvars]


class HostDrivenWhile:
    """A program of one device ``while`` equation, driven from the host: per step the ``cond``
    program runs on the device and its one boolean is read back, then the ``body`` program runs on
    the device; the carries never leave it. ``make(program)`` builds a device executable (with
    ``run_device``), ``handle_type`` is the runtime's buffer handle, ``to_device(ndarray, aval)``
    makes one. With ``axes`` (named dynamic axes) the programs are built once,
    ``make(program, axes)``, and each call passes the binding ``sizes`` on to them."""

    def __init__(self, prog: Program, make: Callable[..., Any], handle_type: type,
                 to_device: Callable, axes: tuple[str, ...] = ()):
        (e,) = prog.eqns
        self.prog, self.eqn, self.handle_type, self.to_device = prog, e, handle_type, to_device
        self.axes = tuple(axes)
        self.nc, self.nb = e.params["cond_nconsts"], e.params["body_nconsts"]
        build = (lambda p: make(p, self.axes)) if self.axes else make
        self.cond, self.body = build(e.params["cond"]), build(e.params["body"])
        self.out_avals = prog.out_avals
        self.source = ("// while: host-driven, cond and body on the device, one boolean read per step\n"
                       f"// cond\n{self.cond.source}\n// body\n{self.body.source}")

    def __call__(self, args: list, sizes: dict | None = None) -> list:
        """Host arrays in, host arrays out."""
        return [h.download(bound_shape(a.shape, sizes), a.dtype)
                for h, a in zip(self.run_device(args, sizes), self.out_avals)]

    def run_device(self, args: list, sizes: dict | None = None) -> list:
        """Handles are read in place (host values go to the device once); the outputs stay there."""
        ins = _device_operands(self.eqn, self.prog, args, self.handle_type, self.to_device, sizes)
        cconsts, bconsts, carry = ins[:self.nc], ins[self.nc:self.nc + self.nb], ins[self.nc + self.nb:]
        extra = (sizes,) if self.axes else ()
        while True:
            (p,) = self.cond.run_device(cconsts + carry, *extra)
            if not p.download((), np.dtype(np.bool_)):
                break
            carry = self.body.run_device(bconsts + carry, *extra)
        out = dict(zip(self.eqn.outvars, carry))
        return [out[v] for v in self.prog.outvars]
