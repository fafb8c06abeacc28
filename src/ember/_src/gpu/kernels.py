"""Device kernels from a Program: the GPU backends' scheduler.

:func:`schedule` turns a static :class:`~ember._src.program.Program` into a list of :class:`Kernel`
(each rendered by a language renderer, :mod:`.wgsl` or :mod:`.cuda`) over numbered device buffers:

- the sub-programs of ``checkpoint`` / ``custom_jvp_call`` / ``custom_vjp_call`` are spliced in;
- a value is *materialized* (gets a buffer) when it is a program output, the result of a
  reduction or a product, or an operand of a product; every other value (elementwise ops,
  broadcasts, reshapes, transposes, slices, ``iota``, literals) is computed inside the kernels that
  read it: a **map** kernel is a loop over the output's elements (one thread each, the launch grid
  covers the element count) evaluating the fused expression DAG at the element's multi-index;
- a reduction is a **reduce** kernel: one workgroup per output element (or per part of one), its
  threads striding over the reduced elements with the operand's expression fused in, then a
  tree reduction in workgroup memory. When there are few outputs and many reduced elements, the
  first pass writes partial results per part and a second pass reduces them (no global barrier);
- ``dot_general`` is a **matmul** kernel: 16x16 output tiles per workgroup, the operands staged
  through workgroup memory 16 columns of the contraction at a time; batch dimensions are the
  grid's third axis. For a renderer with ``library_gemm`` (CUDA), a product whose operands a
  strided batched GEMM can read from buffers (:func:`gemm_layout`: batch, free and contracted
  dimensions each one strided dimension, a unit stride on one side of each matrix; an operand of
  a ``transpose`` read from the transpose's source with permuted strides, so no copy) and of a
  dtype the library takes is a **gemm** step instead: a library call (cuBLAS) the runtime issues
  between kernel launches, its layout in ``info["gemm"]``; its tiled kernel is still rendered,
  the fallback where the library is absent.

Anything else raises :class:`NotImplementedError` naming the primitive and the device.

**Symbolic sizes.** A program with named dynamic axes is scheduled once: every size that is a
:class:`~ember._src.shapes.DimExpr` is rendered as an expression over the axis values, which a
kernel reads at run time (:meth:`Renderer.axis`: a uniform in WGSL, kernel parameters in CUDA).
Buffer sizes (:attr:`Buffer.size`) and launch grids (:meth:`Kernel.launch`) stay size expressions
that the runtime evaluates per call from the bound axes (:func:`evaluate`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ember._src import rewrites
from ember._src import shapes as sh
from ember._src.gpu import epilogues, ops
from ember._src.gpu.gemm_layouts import View, dense_view, gemm_layout, plain_gemm, strides, transposed_view
from ember._src.gpu.render import dim_text
from ember._src.prims.indexing import fill_value
from ember._src.program import Eqn, Literal, Program, Var

SHARED_REWRITES = True
"""Run :data:`ember._src.rewrites.SHARED_PASSES` before scheduling (off only to measure them)."""

WG = 256  # threads per workgroup of map and reduce kernels
TILE = 16  # matmul tile edge
PART = 4096  # reduced elements per workgroup before a reduction is split in parts


class Renderer(Protocol):
    """What a language renderer provides to the scheduler (see :mod:`.wgsl`, :mod:`.cuda`)."""

    device: str

    def check_dtype(self, dtype: np.dtype, what: str) -> None: ...
    def literal(self, value: Any, dtype: np.dtype) -> str: ...
    def let(self, name: str, dtype: np.dtype, expr: str) -> str: ...
    def ilet(self, name: str, expr: str) -> str: ...
    def load(self, buf: str, index: str, dtype: np.dtype) -> str: ...
    def op(self, name: str, args: Sequence[str], in_dtypes: Sequence[np.dtype], out_dtype: np.dtype,
           params: dict) -> str: ...
    def convert(self, expr: str, src: np.dtype, dst: np.dtype) -> str: ...
    def select(self, pred: str, if_false: str, if_true: str) -> str: ...
    def map_kernel(self, k: Kernel, body: list[str], value: str) -> str: ...
    def reduce_kernel(self, k: Kernel, body: list[str], value: str) -> str: ...
    def matmul_kernel(self, k: Kernel, a_body: list[str], a: str, b_body: list[str], b: str,
                      epilogue: tuple[list[str], str] | None = None) -> str: ...
    def axis(self, i: int) -> str: ...


@dataclass
class Buffer:
    """A device buffer of one call: a program input/constant/output or an intermediate."""

    index: int
    dtype: np.dtype
    size: Any  # elements: an int, or a size expression of the program's axes


@dataclass
class Kernel:
    """One device kernel: its source, the buffers it binds (outputs last) and its launch grid."""

    name: str
    kind: str  # map | reduce | matmul | gemm (a library call; its source the tiled fallback)
    out: Buffer
    inputs: list[Buffer] = field(default_factory=list)
    grid: tuple = (1, 1, 1)  # workgroups per axis (size expressions under dynamic axes)
    info: dict = field(default_factory=dict)  # sizes the renderer's skeleton needs
    source: str = ""
    groups: Any = None  # map/reduce: the workgroup count, folded into ``grid`` (x at most 65535)

    def buffers(self) -> list[Buffer]:
        return [*self.inputs, self.out]

    @property
    def uses_sizes(self) -> bool:
        """Whether the kernel reads the axis values (a symbolic size in its source)."""
        return bool(self.info.get("uses_sizes"))

    def launch(self, env: dict[str, int]) -> tuple[int, int, int]:
        """The launch grid under the axis binding ``env``."""
        if self.groups is not None:
            return _grid(evaluate(self.groups, env))
        gx, gy, gz = (max(evaluate(g, env), 1) for g in self.grid)
        return gx, gy, gz


@dataclass
class Schedule:
    """The kernels of one program and how its inputs, constants and outputs map to buffers."""

    kernels: list[Kernel]
    buffers: list[Buffer]
    inputs: list[int | None]  # buffer of each program input (None: unused)
    consts: list[tuple[int, np.ndarray]]  # constant buffers and their values
    outputs: list[tuple[str, Any]]  # ("buf", index) | ("input", position) | ("literal", value)
    axes: tuple[str, ...] = ()  # the named axes the kernels read, in the order of their values

    def sizes(self, env: dict[str, int]) -> list[int]:
        """Every buffer's element count under the axis binding ``env``."""
        return [evaluate(b.size, env) for b in self.buffers]


def evaluate(d: Any, env: dict[str, int]) -> int:
    """A size (an int or a size expression) under the axis binding ``env``."""
    return int(d) if not isinstance(d, sh.DimExpr) else sh.evaluate(d, env)


def _unsupported(name: str, device: str, why: str = "") -> NotImplementedError:
    return NotImplementedError(f"the {device} backend has no kernel for primitive '{name}'"
                               f"{': ' + why if why else ''}; run this function with the default (CPU) "
                               "backend, move that part out of the device function, or pass "
                               "host_fallback=True to jit to run such primitives on the host")


def _grid(groups: Any) -> tuple:
    """A launch grid of ``groups`` workgroups (at most 65535 along x); a size expression as is."""
    if isinstance(groups, sh.DimExpr):
        return (groups, 1, 1)
    gx = min(max(groups, 1), 65535)
    return gx, -(-max(groups, 1) // gx), 1


class Emitter:
    """Fused expression code for one region of a kernel: ``value(atom, idx)`` returns an
    expression of the atom at the multi-index ``idx`` (index expressions as text), appending the
    statements it needs to :attr:`lines`; values and index arithmetic are shared within the region."""

    def __init__(self, sched: _Scheduler, lang: Renderer, prefix: str, reads: dict[int, str]):
        self.s, self.lang, self.prefix, self.reads = sched, lang, prefix, reads
        self.lines: list[str] = []
        self.cache: dict[tuple, str] = {}
        self.n = 0

    def _tmp(self) -> str:
        self.n += 1
        return f"{self.prefix}{self.n}"

    def index(self, expr: str) -> str:
        if expr.isidentifier() or expr.lstrip("-").isdigit():
            return expr
        key = ("idx", expr)
        if key not in self.cache:
            t = self._tmp()
            self.lines.append(self.lang.ilet(t, expr))
            self.cache[key] = t
        return self.cache[key]

    def dim(self, d: Any) -> str:
        """A size as kernel text (an expression over the axis values when symbolic)."""
        return self.s.dim(d)

    def ravel(self, idx: Sequence[str], shape: Sequence[Any]) -> str:
        terms = [i if st == 1 else f"{i} * {self.dim(st)}" for i, st, d in zip(idx, strides(shape), shape)
                 if d != 1 and i != "0"]
        return self.index(" + ".join(terms) if terms else "0")

    def unravel(self, flat: str, shape: Sequence[Any]) -> list[str]:
        out = []
        total = sh.size(shape)
        for st, d in zip(strides(shape), shape):
            if d == 1:
                out.append("0")
                continue
            e = flat if st == 1 else f"({flat} / {self.dim(st)})"
            if st * d != total:  # (not the outermost dim: st * d < total)
                e = f"({e} % {self.dim(d)})"
            out.append(self.index(e))
        return out

    def value(self, a: Any, idx: Sequence[str]) -> str:
        if isinstance(a, Literal):
            return self.lang.literal(a.val.item(), a.aval.dtype)
        a = self.s.resolve(a)
        if isinstance(a, Literal):
            return self.lang.literal(a.val.item(), a.aval.dtype)
        key = (a, tuple(idx))
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        if a in self.s.bufs:
            b = self.s.bufs[a]
            name = self.reads.setdefault(b.index, f"in{len(self.reads)}")
            expr = self.lang.load(name, self.ravel(idx, a.aval.shape), a.aval.dtype)
        else:
            expr = self._compute(self.s.producer[a], idx)
        if not expr.isidentifier():
            t = self._tmp()
            self.lines.append(self.lang.let(t, a.aval.dtype, expr))
            expr = t
        self.cache[key] = expr
        return expr

    def _compute(self, e: Eqn, idx: Sequence[str]) -> str:
        name, p, x = e.prim.name, e.params, e.inputs[0] if e.inputs else None
        out = e.outvars[0].aval
        if name in ops.IDENTITY:
            return self.value(x, idx)
        if name == "broadcast_in_dim":
            bd = p["broadcast_dimensions"]
            return self.value(x, [idx[bd[j]] if d != 1 else "0" for j, d in enumerate(x.aval.shape)])
        if name in ("reshape", "squeeze", "expand_dims"):
            flat = self.ravel(idx, out.shape)
            return self.value(x, self.unravel(flat, x.aval.shape))
        if name == "transpose":
            src = ["0"] * len(idx)
            for i, pi in enumerate(p["permutation"]):
                src[pi] = idx[i]
            return self.value(x, src)
        if name == "slice":
            st = p.get("strides") or (1,) * len(idx)
            return self.value(x, [self.index(f"{self.dim(s0)} + {i} * {k}") if (s0 != 0 or k != 1) else i
                                  for i, s0, k in zip(idx, p["start_indices"], st)])
        if name == "rev":
            dims = set(p["dimensions"])
            return self.value(x, [self.index(f"{self.dim(d - 1)} - {i}") if j in dims else i
                                  for j, (i, d) in enumerate(zip(idx, out.shape))])
        if name == "iota":
            return self.lang.convert(idx[p["dimension"]], np.dtype(np.int32), out.dtype)
        if name == "pad":
            return self._pad(x, e.inputs[1], p["padding_config"], idx)
        if name == "concatenate":
            return self._concatenate(e.inputs, p["dimension"], idx)
        if name == "take":
            return self._take(x, e.inputs[1], p["axis"], p["mode"], idx)
        if name == "dim_as_value":
            return self.lang.convert(self.dim(p["dim"]), np.dtype(np.int32), out.dtype)
        args = [self.value(a, idx) for a in e.inputs]
        dts = [a.aval.dtype for a in e.inputs]
        if name == "select_n":
            r = args[-1]
            for k in range(len(args) - 2, 0, -1):  # cases[pred]: nested for more than two cases
                cond = args[0] if dts[0] == np.bool_ else f"({args[0]} >= {k})"
                r = self.lang.select(cond, args[k], r)
            return r
        if name == "convert_element_type":
            return self.lang.convert(args[0], dts[0], out.dtype)
        if name == "integer_pow":
            return self._ipow(args[0], int(p["y"]), out.dtype)
        return self.lang.op(name, args, dts, out.dtype, p)

    def _clamp(self, i: str, n: Any) -> str:
        return self.index(f"max(0, min({i}, {self.dim(n - 1)}))")

    def _pad(self, x: Any, pad_value: Any, config: Sequence, idx: Sequence[str]) -> str:
        """``pad``: the operand where the output index maps onto one of its elements (edges may be
        negative, interior padding strides), else the padding value."""
        conds, src = [], []
        for i, (lo, hi, interior), n in zip(idx, config, x.aval.shape):
            if isinstance(lo, sh.DimExpr) or isinstance(hi, sh.DimExpr) or isinstance(interior, sh.DimExpr):
                raise NotImplementedError("pad with symbolic padding")
            s = i if lo == 0 else self.index(f"{i} - {lo}" if lo > 0 else f"{i} + {-lo}")
            if interior:
                q = self.index(f"{s} / {interior + 1}")
                conds += [f"{s} >= 0", f"({s} % {interior + 1}) == 0", f"{q} < {self.dim(n)}"]
                src.append(self._clamp(q, n))
            elif lo > 0 or hi > 0:
                conds += [f"{s} >= 0", f"{s} < {self.dim(n)}"]
                src.append(self._clamp(s, n))
            else:
                src.append(s)
        v = self.value(x, src)
        if not conds:
            return v
        return self.lang.select(" && ".join(f"({c})" for c in conds), self.value(pad_value, []), v)

    def _concatenate(self, operands: Sequence[Any], dim: int, idx: Sequence[str]) -> str:
        """``concatenate``: the operand whose range along ``dim`` holds the index (each read at a
        clamped index, then selected)."""
        offs: list[Any] = []
        off: Any = 0
        for a in operands:
            offs.append(off)
            off += a.aval.shape[dim]
        r = None
        for a, o in reversed(list(zip(operands, offs))):
            n = a.aval.shape[dim]
            src = list(idx)
            src[dim] = self._clamp(self.index(f"{idx[dim]} - {self.dim(o)}") if o != 0 else idx[dim], n)
            v = self.value(a, src)
            r = v if r is None else self.lang.select(f"({idx[dim]} < {self.dim(o + n)})", r, v)
        return r

    def _take(self, x: Any, ind: Any, axis: int, mode: str, idx: Sequence[str]) -> str:
        """``take`` (gather along one axis): the index read at the output's index dimensions, the
        operand at that index, clamped (``clip``) or replaced by the fill value (``fill``)."""
        nd, n = len(ind.aval.shape), x.aval.shape[axis]
        fill = self.lang.literal(fill_value(x.aval.dtype), x.aval.dtype)
        if n == 0:
            return fill
        i = self.lang.convert(self.value(ind, idx[axis:axis + nd]), ind.aval.dtype, np.dtype(np.int32))
        i = self.index(i)
        v = self.value(x, [*idx[:axis], self._clamp(i, n), *idx[axis + nd:]])
        if mode == "clip":
            return v
        return self.lang.select(f"({i} >= 0 && {i} < {self.dim(n)})", fill, v)

    def _ipow(self, x: str, y: int, dtype: np.dtype) -> str:
        one = self.lang.literal(1, dtype)
        if y == 0:
            return one
        acc, base, n = None, x, abs(y)
        while n:
            if n & 1:
                acc = base if acc is None else self.value_of(f"{acc} * {base}", dtype)
            n >>= 1
            if n:
                base = self.value_of(f"{base} * {base}", dtype)
        return acc if y > 0 else f"({one} / {acc})"

    def value_of(self, expr: str, dtype: np.dtype) -> str:
        t = self._tmp()
        self.lines.append(self.lang.let(t, dtype, expr))
        return t


def _flatten(prog: Program) -> tuple[list[Eqn], dict, list[tuple[Var, Any]]]:
    """The program's equations with inlined calls spliced in, the aliases of their outputs and the
    captured constants."""
    eqns: list[Eqn] = []
    alias: dict = {}
    consts: list[tuple[Var, Any]] = []

    def sub(env: dict, a: Any) -> Any:
        return env.get(a, a) if isinstance(a, Var) else a

    def walk(p: Program, env: dict) -> None:
        consts.extend(zip(p.constvars, p.consts))
        for e in p.eqns:
            ins = [sub(env, a) for a in e.inputs]
            param = ops.INLINED.get(e.prim.name)
            if param is not None:
                sp = e.params[param]
                sp = getattr(sp, "program", sp)
                inner = dict(zip(sp.invars, ins))
                walk(sp, inner)
                for ov, iv in zip(e.outvars, sp.outvars):
                    env[ov] = alias[ov] = sub(inner, iv)
            else:
                eqns.append(Eqn(e.prim, ins, e.params, e.outvars))

    walk(prog, {})
    return eqns, alias, consts


class _Scheduler:
    def __init__(self, prog: Program, lang: Renderer, axes: Sequence[str] = ()):
        self.prog, self.lang, self.axes = prog, lang, tuple(axes)
        self.uses_sizes = False  # the kernel being scheduled reads an axis value
        self.eqns, self.alias, consts = _flatten(prog)
        self.producer = {v: e for e in self.eqns for v in e.outvars}
        self.bufs: dict[Var, Buffer] = {}
        self.buffers: list[Buffer] = []
        self.kernels: list[Kernel] = []
        self.consts = [(self._buf(v).index, np.asarray(c)) for v, c in consts]
        self.gemms: dict[Var, tuple[dict, Var, Var]] = {}  # product -> (gemm layout, lhs, rhs buffers)
        self.epilogues: dict[Var, epilogues.Epilogue] = {}  # GEMM step's product -> what it folds in

    def dim(self, d: Any) -> str:
        """A size as kernel text: a literal, or an expression over the axis values."""
        if not isinstance(d, sh.DimExpr):
            return str(int(d))
        missing = d.axes() - set(self.axes)
        if missing:
            raise NotImplementedError(f"size {d} names axes {sorted(missing)} the schedule was not given")
        self.uses_sizes = True
        return dim_text(d, lambda name: self.lang.axis(self.axes.index(name)))

    def _int_or_text(self, d: Any) -> Any:
        """A static size as an int (as the static schedule reports it), a symbolic one as text."""
        return self.dim(d) if isinstance(d, sh.DimExpr) else int(d)

    def resolve(self, a: Any) -> Any:
        while isinstance(a, Var) and a in self.alias:
            a = self.alias[a]
        return a

    def _buf(self, v: Var) -> Buffer:
        b = self.bufs.get(v)
        if b is None:
            self.lang.check_dtype(v.aval.dtype, "a value")
            b = self.bufs[v] = self.new_buffer(v.aval.dtype, sh.size(v.aval.shape))
        return b

    def new_buffer(self, dtype: np.dtype, size: Any) -> Buffer:
        b = Buffer(len(self.buffers), np.dtype(dtype), size)
        self.buffers.append(b)
        return b

    def run(self) -> Schedule:
        dev = self.lang.device
        inputs = [self._buf(v) for v in self.prog.invars]
        for e in self.eqns:
            if not ops.supported(e.prim.name):
                raise _unsupported(e.prim.name, dev)
            if e.prim.name == "iota" and p_sharded(e):
                raise _unsupported("iota", dev, "sharded iota")
            for a in [*e.inputs, *e.outvars]:
                self.lang.check_dtype(a.aval.dtype, f"primitive '{e.prim.name}'")
        want: set[Var] = set()
        for e in self.eqns:
            if e.prim.name in ops.REDUCTIONS or e.prim.name in ops.CONTRACTIONS:
                want.add(e.outvars[0])
            if e.prim.name in ops.CONTRACTIONS:
                want.update(self._product_reads(e))
        outputs: list[tuple[str, Any]] = []
        invars = {v: i for i, v in enumerate(self.prog.invars)}
        for o in self.prog.outvars:
            o = self.resolve(o)
            if isinstance(o, Literal):
                outputs.append(("literal", o.val))
            elif o in invars:
                outputs.append(("input", invars[o]))
            else:
                want.add(o)
                outputs.append(("var", o))
        if getattr(self.lang, "library_gemm", False) and self.gemms:
            outs = {o for k, o in outputs if k == "var"}
            plain = [v for v, (lay, _, _) in self.gemms.items() if plain_gemm(lay)]
            self.epilogues = epilogues.find(self.eqns, self.producer, self.resolve, plain, want,
                                            outs, set(self.bufs))
        for e in self.eqns:
            v = e.outvars[0]
            if v in want and v not in self.bufs:
                self._kernel(e, v)
        outs = [("buf", self.bufs[o].index) if k == "var" else (k, o) for k, o in outputs]
        return Schedule(self.kernels, self.buffers, [b.index for b in inputs], self.consts, outs, self.axes)

    def _operand_views(self, x: Any) -> list[tuple[Var, View]]:
        """The buffers a product could read its operand ``x`` from, best first: the source of a
        ``transpose`` (read with permuted strides: no copy), then ``x``'s own."""
        x = self.resolve(x)
        if not isinstance(x, Var):
            return []
        out = []
        pe = self.producer.get(x)
        if pe is not None and pe.prim.name == "transpose":
            src = self.resolve(pe.inputs[0])
            if isinstance(src, Var):
                out.append((src, transposed_view(src.aval.shape, pe.params["permutation"])))
        return [*out, (x, dense_view(x.aval.shape))]

    def _product_reads(self, e: Eqn) -> list[Var]:
        """The values the product ``e`` reads from buffers (to be materialized). For a renderer
        with ``library_gemm``, the first pair of operand buffers a library GEMM reads
        (:func:`gemm_layout`), kept in :attr:`gemms`; else the operands themselves."""
        if getattr(self.lang, "library_gemm", False):
            for a, va in self._operand_views(e.inputs[0]):
                for b, vb in self._operand_views(e.inputs[1]):
                    layout = gemm_layout(e, (va, vb))
                    if layout is not None:
                        self.gemms[e.outvars[0]] = (layout, a, b)
                        return [a, b]
        return [x for x in map(self.resolve, e.inputs) if isinstance(x, Var)]

    def _kernel(self, e: Eqn, v: Var) -> None:
        name = e.prim.name
        if name in ops.REDUCTIONS:
            self._reduce(e, v)
        elif name in ops.CONTRACTIONS:
            self._matmul(e, v)
        else:
            self._map(v)

    def _finish(self, k: Kernel, reads: dict[int, str], render: Callable[[], str]) -> None:
        k.inputs = [self.buffers[i] for i in reads]
        k.info["uses_sizes"], k.info["naxes"] = self.uses_sizes, len(self.axes)
        k.source = render()
        self.kernels.append(k)
        self.uses_sizes = False

    def _map(self, v: Var) -> None:
        self.uses_sizes = False
        n = sh.size(v.aval.shape)
        out = self.new_buffer(v.aval.dtype, n)
        groups = (n + WG - 1) // WG
        k = Kernel(f"map{len(self.kernels)}", "map", out, grid=_grid(groups), info={"n": self.dim(n)},
                   groups=groups)
        reads: dict[int, str] = {}
        em = Emitter(self, self.lang, "t", reads)
        idx = em.unravel("gi", v.aval.shape)
        val = em.value(v, idx)
        self.bufs[v] = out
        self._finish(k, reads, lambda: self.lang.map_kernel(k, em.lines, val))

    def _reduce(self, e: Eqn, v: Var) -> None:
        self.uses_sizes = False
        x = e.inputs[0]
        combine = ops.REDUCTIONS[e.prim.name]
        arg = combine in ("argmax", "argmin")  # carries (value, index); one pass
        raw_axes = (e.params["axis"],) if arg else e.params["axes"]
        axes = tuple(sorted(a % max(len(x.aval.shape), 1) for a in raw_axes))
        shape = x.aval.shape
        kept = [d for d in range(len(shape)) if d not in axes]
        rows = sh.size([shape[d] for d in kept])
        count = sh.size([shape[d] for d in axes])
        dt = x.aval.dtype if arg else v.aval.dtype
        if isinstance(rows, sh.DimExpr) or arg:
            parts = 1
        elif isinstance(count, sh.DimExpr):  # few rows, a length known per call: parts of PART elements
            parts = 1 if rows >= 64 else (count + PART - 1) // PART
        else:
            parts = 1 if rows >= 64 or count <= PART else min(-(-count // PART), 1024)
        multi = isinstance(parts, sh.DimExpr) or parts > 1
        chunk = PART if isinstance(parts, sh.DimExpr) else (count + parts - 1) // parts
        pdt = np.dtype(np.float32) if multi and dt.itemsize == 2 else dt  # 16-bit partials: float32
        out = self.new_buffer(pdt if multi else v.aval.dtype, rows * parts)
        k = Kernel(f"reduce{len(self.kernels)}", "reduce", out, grid=_grid(rows * parts), groups=rows * parts,
                   info={"rows": self.dim(rows), "count": self.dim(count), "parts": self._int_or_text(parts),
                         "chunk": self.dim(chunk), "groups": self.dim(rows * parts), "combine": combine,
                         "dtype": pdt, "out_dtype": v.aval.dtype})
        reads: dict[int, str] = {}
        em = Emitter(self, self.lang, "t", reads)
        ridx = em.unravel("row", [shape[d] for d in kept])
        head = em.lines  # outside the loop over the reduced elements
        em.lines = []
        jidx = em.unravel("j", [shape[d] for d in axes])
        full = [""] * len(shape)
        for d, i in zip(kept, ridx):
            full[d] = i
        for d, i in zip(axes, jidx):
            full[d] = i
        val = em.value(x, full)
        k.info["head"] = head
        self._finish(k, reads, lambda: self.lang.reduce_kernel(k, em.lines, val))
        if multi:  # second pass over the partial results
            part_out = out
            out = self.new_buffer(dt, rows)
            k2 = Kernel(f"reduce{len(self.kernels)}", "reduce", out, grid=_grid(rows), groups=rows,
                        info={"rows": self.dim(rows), "count": self.dim(parts), "parts": 1,
                              "chunk": self.dim(parts), "groups": self.dim(rows), "combine": combine,
                              "dtype": dt, "out_dtype": dt, "head": []})
            load = self.lang.load("in0", f"row * {self.dim(parts)} + j", pdt)
            self._finish(k2, {part_out.index: "in0"}, lambda: self.lang.reduce_kernel(k2, [], load))
        self.bufs[v] = out

    def _matmul(self, e: Eqn, v: Var) -> None:
        self.uses_sizes = False
        (lc, rc), (lb, rb) = e.params["dimension_numbers"]
        a, b = e.inputs
        ash, bsh = a.aval.shape, b.aval.shape
        lf = [d for d in range(len(ash)) if d not in lc and d not in lb]
        rf = [d for d in range(len(bsh)) if d not in rc and d not in rb]
        B = sh.size([ash[d] for d in lb])
        M = sh.size([ash[d] for d in lf])
        N = sh.size([bsh[d] for d in rf])
        K = sh.size([ash[d] for d in lc])
        dt = v.aval.dtype
        out = self.new_buffer(dt, B * M * N)
        grid = ((N + TILE - 1) // TILE, (M + TILE - 1) // TILE, B)
        k = Kernel(f"matmul{len(self.kernels)}", "matmul", out, grid=grid,
                   info={"B": self.dim(B), "M": self.dim(M), "N": self.dim(N), "K": self.dim(K), "dtype": dt})
        reads: dict[int, str] = {}

        def operand(x: Any, batch: Sequence[int], free: Sequence[int], contract: Sequence[int],
                    names: tuple[str, str, str], prefix: str) -> tuple[Emitter, str]:
            em = Emitter(self, self.lang, prefix, reads)
            shp = x.aval.shape
            full = [""] * len(shp)
            for dims, nm in zip((batch, free, contract), names):
                for d, i in zip(dims, em.unravel(nm, [shp[d] for d in dims])):
                    full[d] = i
            val = em.value(x, full)
            return em, self.lang.convert(val, x.aval.dtype, dt)

        ep = self.epilogues.get(v)
        if v in self.gemms:
            layout, ra, rb_ = self.gemms[v]
            k.kind = "gemm"
            k.info["gemm"] = dict(layout, B=B, M=M, N=N, K=K, a=self.bufs[ra].index, b=self.bufs[rb_].index)
            for x in (ra, rb_, *([ep.bias] if ep else [])):  # (parameters of the fallback too)
                reads.setdefault(self.bufs[x].index, f"in{len(reads)}")
            if ep is not None:
                k.info["gemm"].update(epilogue=ep.kind, bias=self.bufs[ep.bias].index)
        ea, va = operand(a, lb, lf, lc, ("bz", "am", "ak"), "a")
        eb, vb = operand(b, rb, rf, rc, ("bz", "bn", "bk"), "b")
        epilogue = None
        if ep is not None:  # the fallback applies it to its accumulator: the value of ep.out at c = acc
            em = Emitter(self, self.lang, "e", reads)
            idx = em.unravel(em.index(f"(bz * {self.dim(M)} + row) * {self.dim(N)} + col"), v.aval.shape)
            em.cache[(v, tuple(idx))] = self.lang.convert("acc", np.dtype(np.float32), dt)
            epilogue = (em.lines, em.value(ep.out, idx))
            self.bufs[ep.out] = out
        else:
            self.bufs[v] = out
        extra = (epilogue,) if epilogue else ()  # (renderers without library GEMMs take none)
        self._finish(k, reads, lambda: self.lang.matmul_kernel(k, ea.lines, va, eb.lines, vb, *extra))


def p_sharded(e: Eqn) -> bool:
    return e.params.get("sharding") is not None


def schedule(prog: Program, lang: Renderer, axes: Sequence[str] = ()) -> Schedule:
    """The device kernels of ``prog`` rendered by ``lang`` (raises NotImplementedError for a
    primitive or dtype the device does not compute). ``axes`` names the dynamic axes of a symbolic
    program: its sizes become expressions over their values, read by the kernels at run time.

    The program first goes through the target-independent rewrites the native backend runs too
    (:data:`ember._src.rewrites.SHARED_PASSES`: calls inlined, algebraic and movement identities,
    common subexpressions once, constants folded, dead code dropped); the inputs and outputs
    keep their positions."""
    if SHARED_REWRITES:
        prog = rewrites.run_shared(prog, ops.KINDS)
    return _Scheduler(prog, lang, axes).run()
