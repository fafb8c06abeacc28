"""C for fused kernels: a :class:`~ember._src.native.scheduling.kernel.KernelIR` loop nest over
an expression DAG as one ``static`` function (map, row, block-reduction and pooled forms).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ember._src import shapes as sh
from ember._src.native.base import symdims as sd
from ember._src.native.emit import c_ops, checked_reads, support
from ember._src.native.emit.c_ops import ctype, literal
from ember._src.native.emit.context import CodegenOptions, EmitContext
from ember._src.native.emit.pooled import (
    axis_decls,
    parallel_clause,
)
from ember._src.native.emit.row_kernels import RowKernels
from ember._src.native.plan import scratch as scratch_mod
from ember._src.native.scheduling import blockreduce
from ember._src.native.scheduling import index as ixm
from ember._src.native.scheduling.kernel import KernelIR, Node, NodeKind, is_row_exp, node_deps, reachable
from ember._src.native.scheduling.schedule import Step
from ember._src.program import Var


class _ExprNames(dict):
    """Node id -> C expression, resolved on demand (constants inline, reductions by name)."""

    def __init__(self, emitter: KernelEmitter):
        super().__init__()
        self.emitter = emitter

    def __missing__(self, nid: int) -> str:
        return self.emitter.expr(nid)



class KernelEmitter(RowKernels):
    """Emits one fused kernel (:class:`KernelIR`) as C: loop nests, row caches, reductions."""

    def __init__(self, step: Step, index: int, ctx: EmitContext, opts: CodegenOptions,
                 ir: KernelIR | None = None, outer_exprs: list[ixm.Ix] | None = None,
                 row_range: tuple[str, str] | None = None, pool: bool = False, block: str | None = None,
                 unchecked: bool = False):
        self.step, self.s, self.ctx, self.opts = step, index, ctx, opts
        self._args = (step, index, ctx, opts, ir, outer_exprs, row_range, pool, block)
        # loads render without their bounds tests (the twin of .checked_reads), and the kernel's
        # first statement when it has such a twin
        self.unchecked, self.twin_guard = unchecked, ""
        # a whole-array reduction in blocks (.blockreduce): "part" reduces elements [lo_, hi_) of
        # one block into its partials, "finish" combines the partials and computes the rest
        self.block = block
        pool = pool or block == "part"
        self.fname = step.name + ("_part" if block == "part" else "")
        # a chunk of a pooled loop: rows [lo_, hi_) as thread tid_ (the function takes tid_ too)
        self.pool = pool
        # rows [lo_, hi_) of the flattened outer loops only (the function takes lo_, hi_; the
        # call passes these two C expressions): a chunk of a pooled row kernel
        self.row_range = row_range
        self.ir: KernelIR = ir or step.ir  # type: ignore[assignment]
        ir = self.ir
        self.nodes = ir.nodes
        self.inner = frozenset(ir.dvars[ir.n_outer:])
        self.params: dict[tuple[int, str], str] = {}  # (buffer id, dtype) -> C name
        self.param_written: dict[tuple[int, str], bool] = {}
        self.lines: list[str] = []
        self.prefix = ""  # C functions the kernel calls, emitted before it
        self.ind = 1
        # loop merging
        exprs = self._all_exprs()
        n = ir.n_outer
        og = ixm.mergeable_groups(ir.dvars[:n], ir.domain[:n], outer_exprs or exprs)
        ig = [[i + n for i in g] for g in ixm.mergeable_groups(ir.dvars[n:], ir.domain[n:], exprs)]
        self.outer_groups = [[ir.dvars[i] for i in g] for g in og] if n else []
        self.inner_groups = [[ir.dvars[i] for i in g] for g in ig] if ir.domain[n:] else []
        self.outer_sizes = [math.prod(ir.domain[i] for i in g) for g in og] if n else []
        self.inner_sizes = [math.prod(ir.domain[i] for i in g) for g in ig] if ir.domain[n:] else []
        self.outer_names = [f"o{k}" for k in range(len(self.outer_groups))]
        self.inner_names = [f"i{k}" for k in range(len(self.inner_groups))]
        self.groups = self.outer_groups + self.inner_groups
        self.gnames = self.outer_names + self.inner_names
        self.names = {nm: nm for nm in self.gnames}
        # dims inside opaque index terms never merge: render them by their loop's name
        self.names.update({g[0]: nm for g, nm in zip(self.groups, self.gnames) if len(g) == 1})
        self.parallel_outer, self.par_if = (parallel_clause(opts, ir.flops(), ir.outer_size) if n
                                            else (False, ""))
        self.parallel_inner = False
        # a pooled kernel without outer loops (a map): its first inner loop runs [lo_, hi_)
        self.pool_inner = pool and not n
        if row_range is not None:
            self.parallel_outer = False
        elif not n and self.inner_sizes and not self.pool_inner:
            self.parallel_inner, self.par_if = parallel_clause(opts, ir.flops(), self.inner_sizes[0])
        if opts.num_threads == 1:  # one thread: no OpenMP region (its start costs a call per kernel)
            self.parallel_outer = self.parallel_inner = False
            self.par_if = ""

    def _all_exprs(self) -> list[ixm.Ix]:
        out = []
        for n in self.ir.nodes:
            out.extend(n.index_exprs())
        out.extend(r.offset for r in self.ir.roots)
        return out

    # -- helpers ------------------------------------------------------------------------------
    def ix(self, e: ixm.Ix) -> str:
        m = ixm.merge_vars(e, self.groups, self.gnames)
        return ixm.render(m, self.names, _ExprNames(self))

    def index(self, v: Var, e: ixm.Ix) -> str:
        """C index of ``e`` into value ``v``'s buffer."""
        return self.ix(e)

    def param(self, v: Var, written: bool = False) -> str:
        b = self.ctx.plan.value_buffer[v.id]
        key = (b.id, str(np.dtype(v.aval.dtype)))
        name = self.params.get(key)
        if name is None:
            name = self.params[key] = f"p{b.id}_{ctype(v.aval.dtype).replace('_t', '')}"
        self.param_written[key] = self.param_written.get(key, False) or written
        return name

    def scratch_param(self, name: str, dtype: Any) -> str:
        """The kernel parameter of this step's scratch ``name`` (:mod:`.scratch`) as ``dtype``."""
        b = scratch_mod.buffer(self.ctx.plan, self.s, name)
        key = (b.id, str(np.dtype(dtype)))
        self.params[key] = f"w{b.id}"
        self.param_written[key] = True
        return f"w{b.id}"

    def w(self, line: str) -> None:
        self.lines.append("    " * self.ind + line)

    def is_inner(self, n: Node) -> bool:
        return bool(n.vars & self.inner)

    def expr(self, nid: int) -> str:
        n = self.nodes[nid]
        if n.kind is NodeKind.CONST:
            return literal(n.attrs.value, n.dtype)
        if n.kind is NodeKind.REDUCE:
            return f"r{n.attrs.rid}"
        return f"t{nid}"

    def emit_node(self, nid: int) -> None:
        n = self.nodes[nid]
        t = ctype(n.dtype)
        if n.kind in (NodeKind.CONST, NodeKind.REDUCE):
            return
        if n.kind is NodeKind.LOAD:
            v = self._var(n.attrs.var)
            off = self.index(v, n.attrs.offset)
            read = f"{self.param(v)}[{off}]"
            if self.is_checked(n):  # read through an operand that may be empty: in-bounds reads only
                size = sd.cdim(sh.size(v.aval.shape))
                read = f"((uint64_t)({off}) < (uint64_t){size} ? {read} : ({t})0)"
            self.w(f"const {t} t{nid} = {read};")
        elif n.kind is NodeKind.IOTA:
            self.w(f"const {t} t{nid} = ({t})({self.ix(n.attrs.index)});")
        elif n.kind is NodeKind.PRED:
            conds = []
            for e, lo, hi, m in n.attrs.conds:
                s = self.ix(e)
                parts = []
                if lo is not None:
                    parts.append(f"(({s}) >= {sd.cdim(lo)})")
                if hi is not None:
                    parts.append(f"(({s}) <= {sd.cdim(hi)})")
                if m != 1:
                    parts.append(f"(({s}) % {sd.cdim(m)} == 0)")
                conds.extend(parts)
            # bitwise: a short-circuit && is control flow, after which GCC may sink a padded read
            # that a select discards into the branch that keeps it (a masked, unvectorized load)
            self.w(f"const uint8_t t{nid} = ({' & '.join(conds) or '1'});")
        elif n.kind is NodeKind.OP:
            a = n.attrs
            args = [self.expr(x) for x in n.args]
            if self.is_row_normalize(n):  # the reciprocal is loop-invariant: gcc hoists it
                text = f"({args[0]} * (1.0f / {args[1]}))"
            else:
                text = c_ops.render_op(a.name, args, [np.dtype(d) for d in a.in_dtypes], n.dtype,
                                       dict(a.params))
            self.w(f"const {t} t{nid} = {text};")
        else:
            raise AssertionError(n.kind)

    def is_row_normalize(self, n: Node) -> bool:
        """Whether ``n`` divides an element of the row by the row's float32 sum (softmax's
        normalization): it is then emitted as a product with the sum's reciprocal (one division
        per row instead of one per element; two roundings, so within 1.5 ulp of the quotient
        instead of 0.5)."""
        if n.attrs.name != "div" or n.dtype != np.float32 or not self.is_inner(n):
            return False
        d = self.nodes[n.args[1]]
        return d.kind is NodeKind.REDUCE and self.ir.reduces[d.attrs.rid].kind == "sum"

    def _var(self, vid: int) -> Var:
        for v in self.ir.inputs:
            if v.id == vid:
                return v
        raise KeyError(vid)

    def closure(self, sinks: list[int], inner: bool, stop: set[int]) -> list[int]:
        """Nodes needed by ``sinks`` at the given level (inner loop or row), in topological order
        (``stop`` nodes are included but not expanded)."""
        return sorted(reachable(self.nodes, sinks, keep=lambda n: self.is_inner(n) == inner,
                                expand=lambda nid: nid not in stop))

    def row_deps(self, sinks: list[int]) -> list[int]:
        """Row-level nodes that the inner closure of ``sinks`` (or the sinks) need."""
        inner = self.closure(sinks, True, set())
        frontier = [d for nid in inner for d in node_deps(self.nodes[nid])] + list(sinks)
        return self.closure(frontier, False, set())

    # -- loops --------------------------------------------------------------------------------
    def open_loops(self, names: list[str], sizes: list[int], pragma_first: str | None,
                   simd_last: str | None) -> int:
        for k, (nm, sz) in enumerate(zip(names, sizes)):
            if k == 0 and pragma_first:
                self.w(pragma_first)
            if k == len(names) - 1 and simd_last is not None and not (k == 0 and pragma_first):
                self.w(simd_last)
            if self.pool_inner and self.inner_names and nm == self.inner_names[0]:
                self.w(f"for (int64_t {nm} = lo_; {nm} < hi_; ++{nm}) {{")
            else:
                self.w(f"for (int64_t {nm} = 0; {nm} < {sd.cdim(sz)}; ++{nm}) {{")
            self.ind += 1
        return len(names)

    def open_row_range(self) -> int:
        """One loop over the flattened rows [lo_, hi_), the outer loop indices derived from it."""
        self.w("for (int64_t r_ = lo_; r_ < hi_; ++r_) {")
        self.ind += 1
        if self.pool:  # a pooled kernel's chunk: Ctrl-C stops it between rows (native/runtime/interrupt.py)
            self.w(f"if ({support.poll()}) break;")
        inner = 1
        decls = []
        for k in range(len(self.outer_names) - 1, -1, -1):
            size = self.outer_sizes[k]
            v = "r_" if inner == 1 else f"r_ / {sd.cdim(inner)}"
            if k > 0:
                v = f"({v}) % {sd.cdim(size)}"
            decls.append(f"const int64_t {self.outer_names[k]} = {v};")
            inner *= size
        for d in reversed(decls):
            self.w(d)
        return 1

    def close(self, k: int) -> None:
        for _ in range(k):
            self.ind -= 1
            self.w("}")

    def is_checked(self, n: Node) -> bool:
        return n.attrs.checked and not self.unchecked

    def emit(self) -> tuple[str, str]:
        """The kernel's C function(s) and the statement calling it."""
        return checked_reads.emit_with_twin(self, lambda: KernelEmitter(*self._args, unchecked=True))

    def emit_body(self) -> tuple[str, str]:
        if self.ir.parts:
            return self.emit_split()
        if (soft := self.softmax_rows()) is not None:
            return self.emit_softmax_rows(*soft)
        if self.ir.natural is not None:
            self.emit_accumulate()
            return self.finish()
        ir = self.ir
        if self.parallel_outer:
            nt = self.opts.num_threads
            if not nt and ir.scratch:  # per-thread row caches: at most the planned team, fewer if
                w = self.opts.workspace_threads  # OMP_NUM_THREADS / omp_set_num_threads ask for fewer
                nt = f"omp_get_max_threads() < {w} ? omp_get_max_threads() : {w}"
                support.need("omp.h")
            nt = f" num_threads({nt})" if nt else ""
            col = f" collapse({len(self.outer_names)})" if len(self.outer_names) > 1 else ""
            pragma = f"#pragma omp parallel for{col}{nt}{self.par_if} schedule(static)"
        else:
            pragma = None
        if self.row_range is not None:
            depth = self.open_row_range()
        else:
            depth = self.open_loops(self.outer_names, self.outer_sizes, pragma, None)
        if not self.outer_names:
            self.w("{")
            self.ind += 1
            depth = 1
        emitted_row: set[int] = set()
        if self.parallel_outer and ir.scratch:
            support.need("omp.h")
            self.w("const int64_t tid_ = omp_get_thread_num();")
        for q in range(ir.n_loops):
            sinks = ir.loop_sinks[q]
            if self.block == "finish":
                self.emit_combine(q)
                continue
            for nid in self.row_deps(sinks):
                if nid not in emitted_row:
                    self.emit_node(nid)
                    emitted_row.add(nid)
            self.emit_loop(q, sinks)
        row_roots = [r for r in ir.roots if not r.full] if self.block != "part" else []
        for nid in self.closure([r.node for r in row_roots], False, set()):
            if nid not in emitted_row:
                self.emit_node(nid)
                emitted_row.add(nid)
        for r in row_roots:
            self.w(f"{self.param(r.var, True)}[{self.index(r.var, r.offset)}] = {self.expr(r.node)};")
        self.close(depth)
        return self.finish()

    def emit_combine(self, q: int) -> None:
        """``finish`` mode: loop ``q``'s reductions from the partials of its blocks, in block order."""
        nb = sd.cdim(blockreduce.blocks(self.ir)[1])
        for r in (r for r in self.ir.reduces if r.phase == q + 1):
            t, flt = ctype(r.dtype), r.kind in ("max", "min") and c_ops.is_float(r.dtype)
            part = self.scratch_param(blockreduce.partial_key(r.rid), r.dtype)
            if r.kind == "sum" and (c_ops.is_float(r.dtype) or c_ops.is_complex(r.dtype)):
                # pairwise over the block partials (in place, the same tree for every thread count):
                # a running total of block sums loses the small ones once it is 2^24 blocks large
                self.w(f"for (int64_t w_ = 1; w_ < {nb}; w_ *= 2)")
                self.w(f"    for (int64_t b_ = 0; b_ + w_ < {nb}; b_ += 2 * w_) "
                       f"{part}[b_] += {part}[b_ + w_];")
                # the block count may be 0 (an empty domain: a symbolic one, or a symbolic size
                # times a static 0, which simplifies to the constant 0)
                first = f"{part}[0]" if nb.isdigit() and int(nb) > 0 else f"({nb} > 0 ? {part}[0] : 0)"
                self.w(f"const {ctype(r.out_dtype)} r{r.rid} = ({ctype(r.out_dtype)}){first};")
                continue
            self.w(f"{t} a{r.rid} = {c_ops.reduce_init(r.kind, r.dtype)};")
            if flt:
                self.w(f"{c_ops.nan_flag_type(r.dtype)} n{r.rid} = 0;")
            self.w(f"for (int64_t b_ = 0; b_ < {nb}; ++b_) {{")
            self.w("    " + c_ops.reduce_update(r.kind, f"a{r.rid}", f"{part}[b_]", r.dtype,
                                                f"n{r.rid}" if flt else None))
            self.w("}")
            ot = ctype(r.out_dtype)
            if flt:
                support.need("math.h")  # NAN
            val = f"n{r.rid} ? ({ot})NAN : ({ot})a{r.rid}" if flt else f"({ot})a{r.rid}"
            self.w(f"const {ot} r{r.rid} = {val};")

    def emit_split(self) -> tuple[str, str]:
        """Split loops (:mod:`.concat_split`): the shared outer loops once, then each part's
        loop nest in its own block, all writing into this function's lines and parameters."""
        parts = self.ir.parts or []
        exprs = [x for p in parts
                 for x in KernelEmitter(self.step, self.s, self.ctx, self.opts, p)._all_exprs()]
        ems = [KernelEmitter(self.step, self.s, self.ctx, self.opts, p, exprs, unchecked=self.unchecked)
               for p in parts]
        first = ems[0]
        for em in ems:
            em.params, em.param_written, em.lines = self.params, self.param_written, self.lines
        self.outer_names, self.outer_sizes = first.outer_names, first.outer_sizes
        pragma = None
        if first.outer_names and self.opts.openmp:
            go, par_if = parallel_clause(self.opts, self.ir.flops(), first.outer_sizes[0])
            if go:
                nt = f" num_threads({self.opts.num_threads})" if self.opts.num_threads else ""
                pragma = f"#pragma omp parallel for{nt}{par_if} schedule(static)"
        depth = self.open_loops(first.outer_names, first.outer_sizes, pragma, None)
        for em in ems:
            em.ind = self.ind
            em.w("{")
            em.ind += 1
            if not first.outer_names:  # parts run one after another: each may go parallel itself
                em.parallel_inner, em.par_if = (parallel_clause(self.opts, self.ir.flops(), em.inner_sizes[0])
                                                if em.inner_sizes else (False, ""))
            for q in range(em.ir.n_loops):
                sinks = em.ir.loop_sinks[q]
                for nid in em.row_deps(sinks):
                    em.emit_node(nid)
                em.emit_loop(q, sinks)
            em.ind -= 1
            em.w("}")
        self.close(depth)
        return self.finish()

    def finish(self) -> tuple[str, str]:
        sig = self.signature()
        decls = axis_decls(self.opts)
        if decls:  # symbolic: the kernel reads the axis values from dims
            sig = "const int64_t *dims" + (", " + sig if sig != "void" else "")
        if self.row_range is not None or self.pool_inner:
            sig = ("" if sig == "void" else sig + ", ") + "int64_t lo_, int64_t hi_"
            if self.pool:
                sig += ", int64_t tid_"
        lines = ["    " + self.twin_guard] + self.lines if self.twin_guard else self.lines
        if decls:  # symbolic: each size expression named once, after the axis values (symdims.hoist_sizes)
            hoisted, lines = sd.hoist_sizes(lines)
            decls = decls + hoisted
        fn = self.prefix + f"static void {self.fname}({sig}) {{\n" + "\n".join(decls + lines) + "\n}\n"
        args = ["dims"] if decls else []
        for (bid, dts), _name in self.params.items():
            b = next(b for b in self.ctx.plan.buffers if b.id == bid)
            args.append(f"({ctype(np.dtype(dts))} *){self.ctx.base(b)}")
        if self.row_range is not None:
            args += list(self.row_range)
        elif self.pool_inner:
            args += ["lo_", "hi_"]
        if self.pool:
            args.append("tid_")
        return fn, f"{self.fname}({', '.join(args)});"

    def call_args(self) -> str:
        """This function's parameter names in order (a call from a function of the same signature)."""
        names = ["dims"] if axis_decls(self.opts) else []
        names += list(self.params.values())
        if self.row_range is not None or self.pool_inner:
            names += ["lo_", "hi_"]
        return ", ".join(names + (["tid_"] if self.pool else []))

    def emit_accumulate(self) -> None:
        """Reductions over non-trailing axes: per-row accumulators (workspace), one loop nest in
        the operand's own axis order (innermost loop contiguous, vectorized), then the epilogue."""
        ir = self.ir
        n = ir.n_outer
        kshape = ir.domain[:n]
        kidx = ixm.linearize([ixm.Ix.var(d) for d in ir.dvars[:n]], kshape)
        accs = {r.rid: self.scratch_param(scratch_mod.accumulators(r.rid), r.dtype) for r in ir.reduces}
        ksize = math.prod(kshape)
        # 1. initialize
        self.w(f"for (int64_t k_ = 0; k_ < {sd.cdim(ksize)}; ++k_) {{")
        for r in ir.reduces:
            self.w(f"    {accs[r.rid]}[k_] = {c_ops.reduce_init(r.kind, r.dtype)};")
        self.w("}")
        # 2. accumulate, loops in natural order
        std = (self.groups, self.gnames, self.names)
        size_of = dict(zip(ir.dvars, ir.domain))
        nat = ir.natural
        groups = ixm.mergeable_groups(nat, [size_of[d] for d in nat], self._all_exprs() + [kidx])
        self.groups = [[nat[i] for i in g] for g in groups]
        self.gnames = [f"q{k}" for k in range(len(groups))]
        self.names = {nm: nm for nm in self.gnames}
        self.names.update({g[0]: nm for g, nm in zip(self.groups, self.gnames) if len(g) == 1})
        sizes = [math.prod(size_of[d] for d in g) for g in self.groups]
        outer = set(ir.dvars[:n])
        par = None
        go, par_if = parallel_clause(self.opts, ir.flops(), sizes[0])
        if go and set(self.groups[0]) <= outer:
            nt = f" num_threads({self.opts.num_threads})" if self.opts.num_threads else ""
            par = f"#pragma omp parallel for{nt}{par_if} schedule(static)"
        # trailing loops over reduced dims only revisit one accumulator: they reduce into scalars
        split = len(self.groups)
        while split > 0 and not set(self.groups[split - 1]) & outer:
            split -= 1
        simd = "#pragma omp simd" if self.opts.simd else None
        j, col = self._column_sums(sizes, split, outer)
        if col:  # the first reduced loop runs in row blocks, their sums combined pairwise
            pre = self.open_loops(self.gnames[:j], sizes[:j], par, None)
            self._open_row_blocks(col, j, sizes, outer, kidx)
            depth = 1 + self.open_loops(self.gnames[j + 1:split], sizes[j + 1:split], None,
                                        simd if split == len(sizes) else None)
        else:
            depth = self.open_loops(self.gnames[:split], sizes[:split], par,
                                    simd if split == len(sizes) else None)
        k = self.ix(kidx)
        local = split < len(sizes)
        if local:
            clauses = []
            for r in ir.reduces:
                self.w(f"{ctype(r.dtype)} l{r.rid} = {c_ops.reduce_init(r.kind, r.dtype)};")
                clauses.append(f"reduction({c_ops.OMP_REDUCTION[r.kind]}:l{r.rid})")
                if r.kind in ("max", "min") and c_ops.is_float(r.dtype):
                    self.w(f"{c_ops.nan_flag_type(r.dtype)} n{r.rid} = 0;")
                    clauses.append(f"reduction(|:n{r.rid})")
            lsimd = f"#pragma omp simd {' '.join(clauses)}" if self.opts.simd else None
            ldepth = self.open_loops(self.gnames[split:], sizes[split:], None, lsimd)
        for nid in self.full_closure([r.input for r in ir.reduces]):
            self.emit_node(nid)
        for r in ir.reduces:
            x = self.expr(r.input)
            if local:
                flag = f"n{r.rid}" if r.kind in ("max", "min") and c_ops.is_float(r.dtype) else None
                self.w(c_ops.reduce_update(r.kind, f"l{r.rid}", x, r.dtype, flag))
            else:
                self._acc_update(r, f"{accs[r.rid]}[{k}]", x)
        if local:
            self.close(ldepth)
            for r in ir.reduces:
                x = f"l{r.rid}"
                if r.kind in ("max", "min") and c_ops.is_float(r.dtype):
                    support.need("math.h")  # NAN
                    self.w(f"if (n{r.rid}) l{r.rid} = ({ctype(r.dtype)})NAN;")
                self._acc_update(r, f"{accs[r.rid]}[{k}]", x)
        self.close(depth)
        if col:
            stacks = self._close_row_blocks(col, j, sizes, outer, kidx, ksize)
            self.close(pre)
            self._combine_levels(stacks, -(-sizes[j] // blockreduce.COLUMN_BLOCK), ksize)
        # 3. epilogue per row
        self.groups, self.gnames, self.names = std
        depth = self.open_loops(self.outer_names, self.outer_sizes, None, None)
        k = self.ix(kidx)
        for r in ir.reduces:
            t = ctype(r.out_dtype)
            self.w(f"const {t} r{r.rid} = ({t}){accs[r.rid]}[{k}];")
        row_roots = [r for r in ir.roots if not r.full]
        for nid in self.closure([r.node for r in row_roots], False, set()):
            self.emit_node(nid)
        for r in row_roots:
            self.w(f"{self.param(r.var, True)}[{self.index(r.var, r.offset)}] = {self.expr(r.node)};")
        self.close(depth)

    def _column_sums(self, sizes: list, split: int, outer: set) -> tuple[int, list]:
        """``(j, sums)``: loop ``q<j>``, the first over reduced dims, after kept loops only and
        before the local ones, runs in row blocks for the ``sums`` of
        :func:`.blockreduce.column_sums`; no sums where there is no such loop or it is short."""
        j = 0
        while j < split and set(self.groups[j]) <= outer:
            j += 1
        col = blockreduce.column_sums(self.ir)  # none where a size is symbolic
        if not col or j >= split - 1 or set(self.groups[j]) & outer:
            return j, []
        if sizes[j] < 2 * blockreduce.COLUMN_BLOCK:
            return j, []
        return j, col

    def _kept_after(self, j: int, sizes: list, outer: set) -> int:
        """Open loops over the kept groups after group ``j`` (the accumulators one block of it
        updates, for the loops before it fixed); returns their number."""
        after = [i for i in range(j + 1, len(self.groups)) if set(self.groups[i]) <= outer]
        return self.open_loops([self.gnames[i] for i in after], [sizes[i] for i in after], None, None)

    def _open_row_blocks(self, col: list, j: int, sizes: list, outer: set, kidx: Any) -> None:
        """Open the block loop and, inside it, loop ``q<j>`` over the block's rows, after setting
        the accumulators of the sums in ``col`` that the block updates to zero."""
        b, rows, q = blockreduce.COLUMN_BLOCK, sizes[j], self.gnames[j]
        self.w(f"for (int64_t b_ = 0; b_ < {-(-rows // b)}; ++b_) {{")
        self.ind += 1
        self.w(f"const int64_t e_ = b_ * {b} + {b} < {rows} ? b_ * {b} + {b} : {rows};")
        depth = self._kept_after(j, sizes, outer)
        k = self.ix(kidx)
        for r in col:
            acc = self.scratch_param(scratch_mod.accumulators(r.rid), r.dtype)
            self.w(f"{acc}[{k}] = {c_ops.reduce_init(r.kind, r.dtype)};")
        self.close(depth)
        self.w(f"for (int64_t {q} = b_ * {b}; {q} < e_; ++{q}) {{")
        self.ind += 1

    def _close_row_blocks(self, col: list, j: int, sizes: list, outer: set, kidx: Any,
                          ksize: Any) -> list[tuple[str, str]]:
        """Push this block's sums on the pairwise stack (merging the levels a binary counter
        carries into) and close the block loop; after the loops before it, the caller's, close,
        :meth:`_combine_levels` adds the stack's levels up. Returns the (accumulators, stack)
        parameters of the sums."""
        pairs = [(self.scratch_param(scratch_mod.accumulators(r.rid), r.dtype),
                  self.scratch_param(blockreduce.levels_key(r.rid), r.dtype)) for r in col]
        self.w("int64_t l_ = 0;")
        self.w("for (int64_t c_ = b_ + 1; (c_ & 1) == 0; c_ >>= 1, ++l_) {")
        self.ind += 1
        depth = self._kept_after(j, sizes, outer)
        k = self.ix(kidx)
        for acc, stk in pairs:
            self.w(f"{acc}[{k}] += {stk}[l_ * {ksize} + {k}];")
        self.close(depth + 1)
        depth = self._kept_after(j, sizes, outer)
        k = self.ix(kidx)
        for acc, stk in pairs:
            self.w(f"{stk}[l_ * {ksize} + {k}] = {acc}[{k}];")
        self.close(depth + 1)
        return pairs

    def _combine_levels(self, pairs: list[tuple[str, str]], nb: int, ksize: Any) -> None:
        """After the whole nest: each accumulator is the sum of the stack levels ``nb`` blocks
        occupy."""
        levels = [lv for lv in range(nb.bit_length()) if nb >> lv & 1]  # the occupied ones
        self.w(f"for (int64_t k_ = 0; k_ < {ksize}; ++k_) {{")
        for acc, stk in pairs:
            self.w(f"    {acc}[k_] = {' + '.join(f'{stk}[{lv * ksize} + k_]' for lv in levels)};")
        self.w("}")

    def _acc_update(self, r: Any, a: str, x: str) -> None:
        if r.kind in ("max", "min"):
            cmp = ">" if r.kind == "max" else "<"
            nan = f" || {x} != {x}" if c_ops.is_float(r.dtype) else ""
            self.w(f"{a} = ({x} {cmp} {a}{nan}) ? {x} : {a};")
        else:
            self.w(c_ops.reduce_update(r.kind, a, x, r.dtype, None))

    def full_closure(self, sinks: list[int]) -> list[int]:
        return sorted(reachable(self.nodes, sinks))

    def signature(self) -> str:
        by_buf: dict[int, int] = {}
        for bid, _ in self.params:
            by_buf[bid] = by_buf.get(bid, 0) + 1
        parts = []
        for (bid, dts), name in self.params.items():
            const = "" if self.param_written[(bid, dts)] else "const "
            restrict = "restrict " if by_buf[bid] == 1 else ""
            parts.append(f"{const}{ctype(np.dtype(dts))} *{restrict}{name}")
        return ", ".join(parts) or "void"

    def _row_blocked(self, reds: list, by_exp: dict, arg: bool) -> set[int]:
        """The float sums of this loop that run in blocks of ``blockreduce.ROW_BLOCK`` elements
        (one running accumulator per row lost accuracy with the row's length: a float32 variance
        over a strided axis of 20,000 was good to about 1e-6, against 1e-7 blocked; rows longer
        than ``ROW_GROUP`` blocks add their block sums per group first): sums of real
        floats, when the loop is one serial inner loop of a static length of two blocks or more."""
        if (arg or self.block or self.parallel_inner or self.pool_inner or len(self.inner_names) != 1
                or not isinstance(self.inner_sizes[0], int)
                or self.inner_sizes[0] < 2 * blockreduce.ROW_BLOCK):
            return set()
        return {r.rid for r in reds if r.kind == "sum" and r.rid not in by_exp
                and np.dtype(r.dtype).kind == "f"}

    def emit_loop(self, q: int, sinks: list[int]) -> None:
        ir = self.ir
        reds = [r for r in ir.reduces if r.phase == q + 1]
        # float32 sums of a row exp computed by this loop: em_exp_row_f32 returns them
        by_exp = {r.rid: r.input for r in reds
                  if r.kind == "sum" and r.dtype == np.float32 and ir.scratch.get(r.input) == q
                  and is_row_exp(self.nodes[r.input])}
        clauses: list[str] = []
        arg = any(r.kind in ("argmax", "argmin") for r in reds)
        blocked = self._row_blocked(reds, by_exp, arg)
        acc = {r.rid: f"b{r.rid}" if r.rid in blocked else f"a{r.rid}" for r in reds}
        for r in reds:
            t = ctype(r.dtype)
            if r.kind in ("argmax", "argmin"):
                init = c_ops.min_value(r.dtype) if r.kind == "argmax" else c_ops.max_value(r.dtype)
                self.w(f"{t} a{r.rid} = {init}; int64_t x{r.rid} = 0;")
                continue
            self.w(f"{t} a{r.rid} = {c_ops.reduce_init(r.kind, r.dtype)};")
            if r.rid in by_exp:
                continue
            clauses.append(f"reduction({c_ops.OMP_REDUCTION[r.kind]}:{acc[r.rid]})")
            if r.kind in ("max", "min") and c_ops.is_float(r.dtype):
                self.w(f"{c_ops.nan_flag_type(r.dtype)} n{r.rid} = 0;")
                clauses.append(f"reduction(|:n{r.rid})")
        red_clause = (" " + " ".join(clauses)) if clauses else ""
        simd = f"#pragma omp simd{red_clause}" if self.opts.simd and not arg else None
        pragma = None
        if self.parallel_inner and not arg:
            nt = f" num_threads({self.opts.num_threads})" if self.opts.num_threads else ""
            single = len(self.inner_names) == 1
            pragma = f"#pragma omp parallel for{' simd' if single and self.opts.simd else ''}{nt}" \
                     f"{red_clause}{self.par_if} schedule(static)"
        # scratch nodes computed by an earlier loop are loaded here
        stop = {nid for nid, first in ir.scratch.items() if first < q}
        jflat = None
        if ir.scratch:
            inner_dims = ir.domain[ir.n_outer:]
            j = ixm.linearize([ixm.Ix.var(d) for d in ir.dvars[ir.n_outer:]], inner_dims)
            jflat = self.ix(j)
            if self.parallel_outer or self.pool:
                jflat = f"tid_ * {sd.cdim(math.prod(inner_dims))} + {jflat}"
            self.emit_row_exps(q, sinks, stop, jflat, by_exp)
        sinks = list(sinks)
        for nid in by_exp.values():
            sinks.remove(nid)
        reds = [r for r in reds if r.rid not in by_exp]
        depth = 0
        if blocked:  # the one inner loop in blocks of ROW_BLOCK, a fresh accumulator per block,
            # the block sums added per ROW_GROUP blocks first when the row is longer than that
            nm, size, rb = self.inner_names[0], self.inner_sizes[0], blockreduce.ROW_BLOCK
            grouped = size > rb * blockreduce.ROW_GROUP
            start = "0"
            if grouped:
                rg = rb * blockreduce.ROW_GROUP
                self.w(f"for (int64_t rg_ = 0; rg_ < {size}; rg_ += {rg}) {{")
                self.ind += 1
                for r in reds:
                    if r.rid in blocked:
                        self.w(f"{ctype(r.dtype)} g{r.rid} = {c_ops.reduce_init(r.kind, r.dtype)};")
                start, size = "rg_", f"(rg_ + {rg} < {size} ? rg_ + {rg} : {size})"
            self.w(f"for (int64_t rb_ = {start}; rb_ < {size}; rb_ += {rb}) {{")
            self.ind += 1
            for r in reds:
                if r.rid in blocked:
                    self.w(f"{ctype(r.dtype)} b{r.rid} = {c_ops.reduce_init(r.kind, r.dtype)};")
            if simd:
                self.w(simd)
            self.w(f"for (int64_t {nm} = rb_; {nm} < (rb_ + {rb} < {size} ? rb_ + {rb} : {size}); ++{nm}) {{")
            self.ind += 1
            depth = 1
        elif sinks or any(root.full and root.loop == q + 1 for root in ir.roots):
            depth = self.open_loops(self.inner_names, self.inner_sizes, pragma, simd)
            if not self.inner_names:
                self.w("{")
                self.ind += 1
                depth = 1
        for nid in self.closure(sinks, True, stop):
            if nid in stop:
                n = self.nodes[nid]
                row = self.scratch_param(scratch_mod.row_cache(nid), n.dtype)
                self.w(f"const {ctype(n.dtype)} t{nid} = {row}[{jflat}];")
                continue
            self.emit_node(nid)
            if ir.scratch.get(nid) == q:
                row = self.scratch_param(scratch_mod.row_cache(nid), self.nodes[nid].dtype)
                self.w(f"{row}[{jflat}] = t{nid};")
        for r in reds:
            x = self.expr(r.input)
            if r.kind in ("argmax", "argmin"):
                cmp = ">" if r.kind == "argmax" else "<"
                nan = f" || ({x} != {x} && a{r.rid} == a{r.rid})" if c_ops.is_float(r.dtype) else ""
                pos = self.gnames[-1] if self.inner_names else "0"
                self.w(f"if ({x} {cmp} a{r.rid}{nan}) {{ a{r.rid} = {x}; x{r.rid} = {pos}; }}")
            else:
                flag = f"n{r.rid}" if r.kind in ("max", "min") and c_ops.is_float(r.dtype) else None
                self.w(c_ops.reduce_update(r.kind, acc[r.rid], x, r.dtype, flag))
        for root in ir.roots:
            if root.full and root.loop == q + 1:
                self.w(f"{self.param(root.var, True)}[{self.index(root.var, root.offset)}] = "
                       f"{self.expr(root.node)};")
        self.close(depth)
        if blocked:
            for r in reds:
                if r.rid in blocked:
                    self.w(f"{'g' if grouped else 'a'}{r.rid} += b{r.rid};")
            self.close(1)
            if grouped:
                for r in reds:
                    if r.rid in blocked:
                        self.w(f"a{r.rid} += g{r.rid};")
                self.close(1)
        reds = [r for r in ir.reduces if r.phase == q + 1]
        if self.block == "part":  # this block's partials, in the accumulator type
            for r in reds:
                flt = r.kind in ("max", "min") and c_ops.is_float(r.dtype)
                if flt:
                    support.need("math.h")  # NAN
                val = f"n{r.rid} ? ({ctype(r.dtype)})NAN : a{r.rid}" if flt else f"a{r.rid}"
                part = self.scratch_param(blockreduce.partial_key(r.rid), r.dtype)
                self.w(f"{part}[lo_ / {blockreduce.BLOCK}] = {val};")
            return
        for r in reds:
            t = ctype(r.out_dtype)
            if r.kind in ("argmax", "argmin"):
                self.w(f"const {t} r{r.rid} = ({t})x{r.rid};")
            elif r.kind in ("max", "min") and c_ops.is_float(r.dtype):
                support.need("math.h")  # NAN
                self.w(f"const {t} r{r.rid} = n{r.rid} ? ({t})NAN : a{r.rid};")
            else:
                self.w(f"const {t} r{r.rid} = a{r.rid};")
