"""The row-kernel parts of a fused kernel's C (:class:`~.kernels.KernelEmitter` takes them from
:class:`RowKernels`): a softmax / log-softmax over rows recognized in the expression DAG and written
as one call of the row helpers, and the rows of ``exp`` evaluated a row at a time
(``em_exp_row_f32``, ``csrc/vexp.h``) with their arguments stored first."""

from __future__ import annotations

import numpy as np

from ember._src.native.base import symdims as sd
from ember._src.native.emit import support
from ember._src.native.emit.c_ops import ctype
from ember._src.native.plan import scratch as scratch_mod
from ember._src.native.scheduling import index as ixm
from ember._src.native.scheduling.kernel import Node, NodeKind, is_row_exp
from ember._src.program import Var


class RowKernels:
    """Methods of :class:`~.kernels.KernelEmitter` for row kernels (they read its state)."""

    def softmax_rows(self) -> tuple | None:
        """``(input, output, c, max rid, g, sum rid)`` when this kernel is exactly a float32 row
        softmax or log-softmax over contiguous rows, every size static: with ``d = x - c``, ``c`` a
        function of the row maximum of ``x`` alone (``max``, or JAX's ``max`` with ``-inf``
        replaced by 0) and ``s`` the row sum of ``exp(d)``, the output is ``exp(d) / s`` (``g``
        None) or ``d - g`` with ``g`` a function of ``s`` alone (``log(s)``). None otherwise. Such
        a kernel is one call of ``em_softmax_rows_f32`` / ``em_log_softmax_rows_f32``
        (``csrc/vexp.h``), which overlap the three passes of neighbouring rows."""
        ir, nodes = self.ir, self.nodes
        if (ir.natural is not None or self.block or not ir.n_outer
                or self.parallel_outer or len(ir.reduces) != 2 or len(ir.roots) != 1
                or not all(isinstance(d, int) for d in ir.domain)):
            return None
        mx, sm = ir.reduces
        root = ir.roots[0]
        f32 = np.dtype(np.float32)
        if mx.kind != "max" or sm.kind != "sum" or mx.dtype != f32 or sm.dtype != f32 or not root.full:
            return None
        x, e, out = nodes[mx.input], nodes[sm.input], nodes[root.node]
        full = ixm.linearize([ixm.Ix.var(d) for d in ir.dvars], ir.domain)
        if (x.kind is not NodeKind.LOAD or self.is_checked(x) or x.dtype != f32 or x.attrs.offset != full
                or root.offset != full or root.var.aval.dtype != f32 or not is_row_exp(e)
                or out.kind is not NodeKind.OP):
            return None
        d = nodes[e.args[0]]
        if not self._is_shifted(d, x):
            return None
        c = nodes[d.args[1]]
        if out.attrs.name == "div" and out.args[0] == e.id:  # softmax
            g = None
            s = nodes[out.args[1]]
            if s.kind is not NodeKind.REDUCE or s.attrs.rid != sm.rid:
                return None
        elif out.attrs.name == "sub" and (out.args[0] == d.id
                                          or self._is_shifted(nodes[out.args[0]], x, c.id)):
            g = nodes[out.args[1]]  # log-softmax
            if self.is_inner(g) or not self._row_function(g.id, sm.rid):
                return None
        else:
            return None
        if self.is_inner(c) or not self._row_function(c.id, mx.rid):
            return None
        return self._var(x.attrs.var), root.var, c.id, mx.rid, None if g is None else g.id, sm.rid

    def _is_shifted(self, d: Node, x: Node, c: int | None = None) -> bool:
        """Whether ``d`` is ``x - c`` for a load of ``x``'s operand at ``x``'s offset (and the
        given ``c`` node, when one is given)."""
        if d.kind is not NodeKind.OP or d.attrs.name != "sub" or (c is not None and d.args[1] != c):
            return False
        a = self.nodes[d.args[0]]
        return a.kind is NodeKind.LOAD and (a.attrs.var, a.attrs.offset) == (x.attrs.var, x.attrs.offset)

    def _row_function(self, nid: int, rid: int) -> bool:
        """Whether row-level node ``nid`` is computed from constants and reduction ``rid`` alone."""
        return all(n.kind in (NodeKind.OP, NodeKind.CONST) or n.kind is NodeKind.REDUCE and n.attrs.rid == rid
                   for n in (self.nodes[i] for i in self.closure([nid], False, set())))

    def _row_function_c(self, name: str, nid: int, rid: int) -> str:
        """C function ``float name(float r<rid>)`` returning row-level node ``nid``."""
        body, self.lines, ind = self.lines, [], self.ind
        for i in self.closure([nid], False, set()):
            self.emit_node(i)
        text = "\n".join([f"static inline float {name}(float r{rid}) {{", *self.lines,
                          f"    return {self.expr(nid)};", "}", ""])
        self.lines, self.ind = body, ind
        return text

    def emit_softmax_rows(self, x: Var, out: Var, shift: int, rid: int, g: int | None,
                          sum_rid: int) -> tuple[str, str]:
        """The kernel of :meth:`softmax_rows`: its rows in blocks of 64 through
        ``em_softmax_rows_f32`` or ``em_log_softmax_rows_f32`` (a pooled chunk polls for Ctrl-C
        between blocks); ``c`` (and ``g``) C functions of the row maximum (sum) emitted before the
        kernel."""
        fns = [f"{self.fname}_shift"]
        self.prefix = self._row_function_c(fns[0], shift, rid)
        if g is not None:
            fns.append(f"{self.fname}_off")
            self.prefix += self._row_function_c(fns[1], g, sum_rid)
        helper = "em_softmax_rows_f32" if g is None else "em_log_softmax_rows_f32"
        support.need("vexp")  # csrc/vexp.h defines the helper
        n = self.ir.inner_size
        lo, hi = self.row_range or ("0", str(self.ir.outer_size))
        self.w(f"/* row {'log-' if g is not None else ''}softmax: {helper} (csrc/vexp.h) */")
        self.w(f"for (int64_t b_ = {lo}; b_ < {hi}; b_ += 64) {{")
        if self.pool:
            self.w(f"    if ({support.poll()}) break;")
        self.w(f"    {helper}({self.param(out, True)} + b_ * {n}, {self.param(x)} + b_ * {n}, "
               f"{hi} - b_ < 64 ? {hi} - b_ : 64, {n}, {', '.join(fns)});")
        self.w("}")
        return self.finish()

    def emit_row_exps(self, q: int, sinks: list[int], stop: set[int], jflat: str,
                      sums: dict[int, int]) -> None:
        """The float32 exps that loop ``q`` computes first (:func:`.kernel.is_row_exp`), a row at a
        time, before the loop: per exp (in dependency order) ``em_exp_row_f32`` into the exp's row
        cache, reading an operand's row in place (:meth:`row_exp_operand`) or the argument stored
        into the row cache by a loop of its own. The call also returns the row's sum: the
        accumulator of each reduction in ``sums`` (rid -> its input, a row exp) is set from it. Adds
        the exps (and the row-cached nodes the argument loops computed) to ``stop``, so the loop
        reads them from their rows."""
        ir = self.ir
        inner = sd.cdim(ir.inner_size)
        base = f"tid_ * {inner}" if self.parallel_outer or self.pool else "0"
        for nid in self.closure(sinks, True, stop):
            n = self.nodes[nid]
            if ir.scratch.get(nid) != q or not is_row_exp(n):
                continue
            row = self.scratch_param(scratch_mod.row_cache(nid), n.dtype)
            direct = self.row_exp_operand(n, stop)
            if direct is not None:  # exp(x - c) of an operand's contiguous row: read in place
                src, bias = direct
            else:
                src, bias = self.store_row_argument(q, n.args[0], row, stop, jflat) + f" + {base}", "0.0f"
            support.need("vexp")
            call = f"em_exp_row_f32({row} + {base}, {src}, {bias}, {inner})"
            summed = [rid for rid, e in sums.items() if e == nid]
            self.w(f"a{summed[0]} = {call};" if summed else f"(void){call};")
            for rid in summed[1:]:
                self.w(f"a{rid} = a{summed[0]};")
            stop.add(nid)

    def store_row_argument(self, q: int, arg: int, row: str, stop: set[int], jflat: str) -> str:
        """A loop over the row storing node ``arg`` into ``row`` (or only into its own row cache,
        when it has one); the row-cached nodes it computes first are stored into their rows too
        and join ``stop``. Returns the row now holding ``arg``."""
        ir = self.ir
        simd = "#pragma omp simd" if self.opts.simd else None
        depth = self.open_loops(self.inner_names, self.inner_sizes, None, simd)
        if not self.inner_names:
            self.w("{")
            self.ind += 1
            depth = 1
        cached = []
        for a in self.closure([arg], True, stop):
            dt = self.nodes[a].dtype
            cache = self.scratch_param(scratch_mod.row_cache(a), dt) if a in ir.scratch else ""
            if a in stop:
                self.w(f"const {ctype(self.nodes[a].dtype)} t{a} = {cache}[{jflat}];")
                continue
            self.emit_node(a)
            if ir.scratch.get(a) == q:
                self.w(f"{cache}[{jflat}] = t{a};")
                cached.append(a)
        if arg in cached:
            row = self.scratch_param(scratch_mod.row_cache(arg), self.nodes[arg].dtype)
        else:
            self.w(f"{row}[{jflat}] = {self.expr(arg)};")
        self.close(depth)
        stop.update(cached)
        return row

    def row_exp_operand(self, n: Node, stop: set[int]) -> tuple[str, str] | None:
        """(pointer to the row, C bias) when exp ``n`` is ``exp(x - c)`` (or ``exp(x)``) of an
        operand ``x`` read unchecked at consecutive elements along the row (the flattened inner
        index) and a per-row ``c``, and the difference is needed nowhere else: the row exp then
        reads ``x`` in place. None otherwise."""
        ir = self.ir
        arg = self.nodes[n.args[0]]
        load, bias = arg, "0.0f"
        if arg.kind is NodeKind.OP and arg.attrs.name == "sub" and arg.id not in ir.scratch:
            load, c = (self.nodes[a] for a in arg.args)
            if self.is_inner(c) or c.dtype != np.float32:
                return None
            bias = self.expr(c.id)
        if load.kind is not NodeKind.LOAD or self.is_checked(load) or load.dtype != np.float32:
            return None
        inner = ir.dvars[ir.n_outer:]
        j = ixm.linearize([ixm.Ix.var(d) for d in inner], ir.domain[ir.n_outer:])
        start = load.attrs.offset - j
        if start.vars() & set(inner) or any(isinstance(t, ixm.Data) for t in start.opaques()):
            return None
        v = self._var(load.attrs.var)
        return f"{self.param(v)} + ({self.index(v, start)})", bias
