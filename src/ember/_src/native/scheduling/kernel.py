"""Kernel IR: a fused group of equations as a loop nest with a scalar expression DAG.

A kernel runs over a *domain* (loop shape) split into ``n_outer`` outer dims (the rows) and inner
dims. Map kernels have ``n_outer == 0``: one loop nest over the output shape. A kernel with
reductions reduces over the inner dims: per row it runs one inner loop per *phase* (reductions that
depend on earlier reductions, e.g. softmax's sum after its max, go to later phases), then an
optional final loop for full-shape outputs, and writes row-shape outputs at the end of the row.
Single-phase reductions over axes that are not the trailing ones (column sums) use the
*accumulate* strategy instead (``KernelIR.natural``): per-row accumulators in a workspace, one loop
nest in the operand's own axis order so the innermost loop stays contiguous, then the epilogue.

Values are read through index expressions (:mod:`.index`), so broadcast, reshape, transpose,
slice, pad, rev, concatenate, iota and gathers (``take``) fuse without copies. A concatenate read
at an index affine in one loop variable records cut points; map kernels are then built as one
loop nest per piece (:mod:`.concat_split`) instead of selecting among all pieces per element, and
other kernels refuse select chains longer than ``MAX_SELECT_PIECES`` (the concatenate is then
materialized by its own split kernel). The builder walks
from the kernel's outputs (roots) toward its inputs, interning one node per (value, index) pair,
and rejects groupings that would recompute expensive work (an expensive node evaluated at two
different indices, or more times than it has elements) or that exceed the input limit; the
scheduler uses that to decide fusion.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ember._src.native import opinfo
from ember._src.native.base import symdims as sd
from ember._src.native.base.c_types import SUPPORTED_DTYPES
from ember._src.native.scheduling import index as ixm
from ember._src.native.scheduling.index import Ix
from ember._src.prims.indexing import fill_value
from ember._src.program import Atom, Eqn, Literal, Var

CHEAP = 3  # nodes at most this costly may be recomputed (broadcast, or read at several indices); a
# pad's bounds test and select cost nothing here (mv_pad: a max pool reads its padded input at 9 taps)
# a concatenate read inside a kernel evaluates every live piece and selects one (a select chain);
# beyond this many pieces it must be split into per-piece loop nests (map kernels, an index that
# is affine in one loop variable) or materialized by its own kernel (the fusion is refused)
MAX_SELECT_PIECES = 4
# The deepest chain of equations one kernel's expression holds. The walk below recurses once per
# level (three Python frames each), so a longer elementwise chain (700 tanh(x * a + b) in a row)
# raised RecursionError; at this depth a region stops merging and the chain runs as several kernels.
MAX_EXPR_DEPTH = 200
_READ = "read through an index expression (kernel.py)"
for _name in ("broadcast_in_dim", "reshape", "squeeze", "transpose", "rev", "slice", "pad", "concatenate",
              "ensure_shape"):
    # a reshape (or squeeze, or restated shape) alone in its group shares its operand's storage
    opinfo.register(_name, opinfo.OpCategory.MOVEMENT, _READ,
                    alias=_name in ("reshape", "squeeze", "ensure_shape"))
opinfo.register("iota", opinfo.OpCategory.INDEXED, "the index itself (kernel.py)")
opinfo.register("take", opinfo.OpCategory.INDEXED, _READ)
opinfo.register("dim_as_value", opinfo.OpCategory.INDEXED,
                "an axis value read from dims under dynamic axes (kernel.py); a static program holds a "
                "literal instead (program.resolve_program)")


class Unfusable(Exception):
    """The group cannot be one kernel (the message says why)."""


class NodeKind(enum.StrEnum):
    """What a kernel node computes; its ``attrs`` is the matching ``*Attrs`` record."""

    CONST = "const"  # a literal (ConstAttrs)
    LOAD = "load"  # an operand element (LoadAttrs)
    OP = "op"  # an elementwise op over the argument nodes (OpAttrs)
    IOTA = "iota"  # an index expression's value (IotaAttrs)
    PRED = "pred"  # a conjunction of index bounds (PredAttrs)
    REDUCE = "reduce"  # a reduction's per-row result (ReduceAttrs)


@dataclass(frozen=True)
class ConstAttrs:
    text: str  # repr of the value: keeps 0.0 and -0.0 (or 1 and True) apart when interning
    value: Any


@dataclass(frozen=True)
class LoadAttrs:
    var: int  # id of the operand read
    offset: Ix  # linear element offset
    checked: bool  # the operand may be empty: only in-bounds reads


@dataclass(frozen=True)
class OpAttrs:
    name: str  # the primitive's name (its renderer in the op-info registry)
    params: tuple  # the params the renderer reads, frozen
    in_dtypes: tuple[str, ...]


@dataclass(frozen=True)
class IotaAttrs:
    index: Ix


@dataclass(frozen=True)
class PredAttrs:
    conds: tuple  # (index, lo or None, hi or None, modulus) per condition


@dataclass(frozen=True)
class ReduceAttrs:
    rid: int  # the Reduce's id


@dataclass(eq=False)
class Node:
    id: int
    kind: NodeKind
    dtype: np.dtype
    args: tuple[int, ...]
    attrs: Any  # the *Attrs record of ``kind``
    cost: int
    vars: frozenset[str]
    reduces: frozenset[int]

    def index_exprs(self) -> list[Ix]:
        """The index expressions this node evaluates (loads, iotas, predicates)."""
        if self.kind is NodeKind.LOAD:
            return [self.attrs.offset]
        if self.kind is NodeKind.IOTA:
            return [self.attrs.index]
        if self.kind is NodeKind.PRED:
            return [c[0] for c in self.attrs.conds]
        return []


@dataclass
class Reduce:
    rid: int
    kind: str  # sum prod max min and or argmax argmin
    input: int  # node id
    dtype: np.dtype  # accumulator / value dtype
    out_dtype: np.dtype  # dtype of the result (index dtype for arg reductions)
    phase: int = 0
    node: int = -1


@dataclass
class Root:
    var: Var
    node: int
    full: bool  # full domain shape (stored in a loop) or row shape (stored per row)
    offset: Ix
    loop: int = 0  # which loop computes a full root


@dataclass
class KernelIR:
    domain: tuple[int, ...]
    n_outer: int
    dvars: list[str]
    nodes: list[Node]
    reduces: list[Reduce]
    roots: list[Root]
    loads: dict[int, set[Ix]]  # var id -> offsets read
    inputs: list[Var]
    eqns: list[Eqn]
    n_loops: int = 0
    scratch: dict[int, int] = field(default_factory=dict)  # node id -> first loop computing it
    loop_sinks: list[list[int]] = field(default_factory=list)
    # accumulate strategy (single-phase reductions over non-trailing axes): loop over the input in
    # its natural order (these loop variables, outermost first) updating per-row accumulators
    natural: list[str] | None = None
    # split loops (see :mod:`.concat_split`): per-concatenate-piece cut points, loop variable ->
    # local indices where another piece starts; and the map kernels over boxes of the domain
    # that replace this kernel's single loop nest when set (all share ``n_outer`` prefix dims)
    cuts: dict[str, set[int]] = field(default_factory=dict)
    parts: list[KernelIR] | None = None
    needs_split: bool = False  # only valid as parts (unsplit, it would recompute expensive work)
    evaluations: dict[int, tuple[int, int]] = field(default_factory=dict)  # var id -> (count, size)
    # element counts of the operands read through bounds-checked loads (symbolic, may be 0): for a
    # binding where each is > 0 every clamped read is in bounds (emit/checked_reads.py)
    nonempty: tuple[Any, ...] = ()

    @property
    def outputs(self) -> list[Var]:
        return [r.var for r in self.roots]

    @property
    def inner_size(self) -> int:
        return math.prod(self.domain[self.n_outer:])

    @property
    def outer_size(self) -> int:
        return math.prod(self.domain[:self.n_outer])

    def flops(self) -> int:
        """Rough work estimate: cost-weighted evaluations (for the OpenMP threshold)."""
        per = sum(n.cost for n in self.nodes if n.kind in (NodeKind.OP, NodeKind.REDUCE)) or 1
        return per * math.prod(self.domain)

    def inplace_candidates(self) -> list[tuple[Var, int]]:
        """(root var, input var id) pairs where the root may overwrite the input's buffer: a
        single-loop map kernel that reads the input only at the element it writes."""
        if self.n_outer != 0 or self.reduces or self.n_loops > 1 or self.parts:
            return []
        out = []
        for r in self.roots:
            if not r.full:
                continue
            for vid, offs in self.loads.items():
                if offs == {r.offset}:
                    out.append((r.var, vid))
        return out

    def describe(self) -> str:
        names = []
        for e in self.eqns:
            if e.prim.name not in names:
                names.append(e.prim.name)
        return ",".join(names)


def _freeze(v: Any) -> Any:
    if isinstance(v, dict):
        return tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, np.dtype):
        return str(v)
    return v


def _size(shape: Sequence[int]) -> int:
    return math.prod(shape)


class _Builder:
    def __init__(self, eqns: Sequence[Eqn], domain: tuple[int, ...], n_outer: int, roots: Sequence[Var],
                 max_inputs: int, origin: Sequence[int] | None = None):
        self.eqns = list(eqns)
        self.domain = tuple(domain)
        # a box of a larger domain: roots are written at ``origin + loop index`` (split loops)
        self.origin = tuple(origin) if origin is not None else None
        self.cuts: dict[str, set[int]] = {}
        self.soft_cuts: dict[str, set[int]] = {}
        self.many_pieces = False  # a select chain over more than MAX_SELECT_PIECES pieces
        self.evaluations: dict[int, tuple[int, int]] = {}  # expensive var id -> (evaluations, size)
        self.n_outer = n_outer
        self.roots_in = list(roots)
        self.max_inputs = max_inputs
        self.dvars = [f"d{i}" for i in range(len(domain))]
        self.outer = frozenset(self.dvars[:n_outer])
        self.inner = frozenset(self.dvars[n_outer:])
        self.ranges = {v: (0, n - 1 if sd.is_sym(n) else max(n - 1, 0)) for v, n in zip(self.dvars, domain)}
        self.producer = {v.id: e for e in self.eqns for v in e.outvars}
        self.nodes: list[Node] = []
        self.intern_table: dict[Any, int] = {}
        self.memo: dict[Any, int] = {}
        self.var_nodes: dict[int, set[int]] = {}
        self.var_of_eqn: dict[int, Var] = {}
        self.loads: dict[int, set[Ix]] = {}
        self.inputs: list[Var] = []
        self.reduces: list[Reduce] = []
        # > 0 while evaluating an operand that may be empty for some binding (a concatenate piece,
        # a padded or gathered operand of symbolic size): its index is then clamped into an empty
        # range, so loads made meanwhile are bounds-checked in C (never read past a buffer)
        self.checked = 0
        self.depth = 0  # equations on the walk's current path (MAX_EXPR_DEPTH)
        self.nonempty: dict[str, Any] = {}  # the element counts of such operands, by their text

    # -- nodes -------------------------------------------------------------------------------
    def node(self, kind: NodeKind, dtype: Any, args: Sequence[int], attrs: Any, own_cost: int,
             ix_vars: frozenset[str] = frozenset(), data: Sequence[int] = ()) -> int:
        dtype = np.dtype(dtype)
        key = (kind, dtype.str, tuple(args), attrs)
        nid = self.intern_table.get(key)
        if nid is not None:
            return nid
        deps = [self.nodes[a] for a in (*args, *data)]
        vars_ = frozenset().union(ix_vars, *(d.vars for d in deps))
        reduces = frozenset().union(*(d.reduces for d in deps))
        cost = min(own_cost + sum(self.nodes[a].cost for a in args), 10**6)
        nid = len(self.nodes)
        self.nodes.append(Node(nid, kind, dtype, tuple(args), attrs, cost, vars_, reduces))
        self.intern_table[key] = nid
        return nid

    def const(self, value: Any, dtype: Any) -> int:
        v = np.asarray(value).astype(dtype).item()
        return self.node(NodeKind.CONST, dtype, (), ConstAttrs(repr(v), v), 0)

    def pred(self, conds: list[tuple[Ix, int | None, int | None, int]], cost: int = 1) -> int | None:
        """Node for the conjunction of ``lo <= ix <= hi and ix % mod == 0``; None = always true.
        ``cost``: its own (a pad's bounds: 0, see :meth:`mv_pad`)."""
        kept = []
        for e, lo, hi, m in conds:
            elo, ehi = ixm.ix_range(e, self.ranges)
            if (lo is None or sd.proves_le(lo, elo)) and (hi is None or sd.proves_le(ehi, hi)) and m == 1:
                continue
            if (lo is not None and sd.proves_lt(ehi, lo)) or (hi is not None and sd.proves_lt(hi, elo)):
                return self.const(False, np.bool_)
            kept.append((e, lo, hi, m))
        if not kept:
            return None
        vars_ = frozenset().union(*(e.vars() for e, *_ in kept))
        data = [t.node for e, *_ in kept for t in e.opaques() if isinstance(t, ixm.Data)]
        return self.node(NodeKind.PRED, np.bool_, (), PredAttrs(tuple(kept)), cost, vars_, data)

    def select(self, p: int | None, on_true: int, on_false: int, dtype: Any, cost: int = 1,
               blend: bool = False) -> int:
        """``p ? on_true : on_false``; ``blend``: rendered as a bitwise blend (both values computed:
        a pad's clamped read, which a conditional would let the C compiler turn into a masked load it
        does not vectorize)."""
        if p is None:
            return on_true
        pn = self.nodes[p]
        if pn.kind is NodeKind.CONST:
            return on_true if pn.attrs.value else on_false
        d = str(np.dtype(dtype))
        attrs = OpAttrs("select_n", (("blend", True),) if blend else (), ("bool", d, d))
        return self.node(NodeKind.OP, dtype, (p, on_false, on_true), attrs, cost)

    # -- the walk ----------------------------------------------------------------------------
    def value(self, a: Atom, idx: tuple[Ix, ...]) -> int:
        if isinstance(a, Literal):
            return self.const(a.val, a.aval.dtype)
        key = (a.id, idx, self.checked > 0)  # a checked read never reuses an unchecked one
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        e = self.producer.get(a.id)
        if e is None:
            n = self.load(a, idx)
        else:
            if self.depth >= MAX_EXPR_DEPTH:
                raise Unfusable(f"an expression deeper than {MAX_EXPR_DEPTH} equations")
            self.depth += 1
            try:
                n = self.eqn_value(e, a, idx)
            finally:
                self.depth -= 1
            if not opinfo.is_movement(e.prim):
                self.var_nodes.setdefault(a.id, set()).add(n)
                self.var_of_eqn[a.id] = a
        self.memo[key] = n
        return n

    def load(self, v: Var, idx: tuple[Ix, ...]) -> int:
        if v.aval.dtype not in SUPPORTED_DTYPES:
            raise Unfusable(f"dtype {v.aval.dtype} has no C type")
        off = ixm.linearize(idx, v.aval.shape)
        if v.id not in self.loads:
            self.loads[v.id] = set()
            self.inputs.append(v)
            if len(self.inputs) > self.max_inputs:
                raise Unfusable(f"more than {self.max_inputs} inputs")
        self.loads[v.id].add(off)
        data = [t.node for t in off.opaques() if isinstance(t, ixm.Data)]
        data += [t.node for o in off.opaques() for t in _nested_data(o)]
        attrs = LoadAttrs(v.id, off, self.checked > 0)
        return self.node(NodeKind.LOAD, v.aval.dtype, (), attrs, 0, frozenset(off.vars()), data)

    def checked_value(self, a: Atom, idx: tuple[Ix, ...], may_be_empty: bool) -> int:
        """``value(a, idx)``; when ``a`` may be empty, its loads are bounds-checked."""
        if not may_be_empty:
            return self.value(a, idx)
        n = math.prod(a.aval.shape)
        self.nonempty.setdefault(str(n), n)
        self.checked += 1
        try:
            return self.value(a, idx)
        finally:
            self.checked -= 1

    def eqn_value(self, e: Eqn, out: Var, idx: tuple[Ix, ...]) -> int:
        name, prm, ins = e.prim.name, e.params, e.inputs
        odt = out.aval.dtype
        if odt not in SUPPORTED_DTYPES:
            raise Unfusable(f"dtype {odt} has no C type")
        cat = opinfo.category(e.prim)
        if cat is opinfo.OpCategory.IDENTITY:
            return self.value(ins[0], idx)
        if cat is opinfo.OpCategory.ELEMENTWISE:
            in_dts = [a.aval.dtype for a in ins]
            if not opinfo.has_lowering(name, in_dts, odt):
                raise Unfusable(f"no C lowering for {name} on {in_dts}")
            args = [self.value(a, idx) for a in ins]
            params = {k: v for k, v in prm.items() if k in ("y", "rounding_method", "n")}
            attrs = OpAttrs(name, _freeze(params), tuple(str(d) for d in in_dts))
            return self.node(NodeKind.OP, odt, args, attrs, opinfo.op_cost(name))
        mover = getattr(self, "mv_" + name, None)
        if mover is not None:
            return mover(e, idx)
        if cat is opinfo.OpCategory.REDUCTION:
            return self.reduce(e, out, idx)
        raise Unfusable(f"{name} has no kernel lowering")

    # movement: map the consumer's index into the operand's index
    def mv_broadcast_in_dim(self, e: Eqn, idx: tuple[Ix, ...]) -> int:
        x = e.inputs[0]
        shape, bd = e.params["shape"], e.params["broadcast_dimensions"]
        new = tuple(Ix.lit(0) if x.aval.shape[i] == 1 and shape[d] != 1 else idx[d] for i, d in enumerate(bd))
        return self.value(x, new)

    def mv_reshape(self, e: Eqn, idx: tuple[Ix, ...]) -> int:
        x = e.inputs[0]
        new = tuple(ixm.reshape_index(idx, e.outvars[0].aval.shape, x.aval.shape, self.ranges))
        if max((ixm.symbolic_nesting(i) for i in new), default=0) > ixm.MAX_SYMBOLIC_NESTING:
            raise Unfusable("a reshape's index nests too many divisions by symbolic sizes (index.py)")
        return self.value(x, new)

    mv_squeeze = mv_reshape

    def mv_ensure_shape(self, e: Eqn, idx: tuple[Ix, ...]) -> int:
        return self.value(e.inputs[0], idx)  # the same sizes under every binding that runs

    def mv_transpose(self, e: Eqn, idx: tuple[Ix, ...]) -> int:
        perm = e.params["permutation"]
        new: list[Ix] = [Ix.lit(0)] * len(perm)
        for k, p in enumerate(perm):
            new[p] = idx[k]
        return self.value(e.inputs[0], tuple(new))

    def mv_rev(self, e: Eqn, idx: tuple[Ix, ...]) -> int:
        x = e.inputs[0]
        dims = e.params["dimensions"]
        new = tuple(Ix.lit(x.aval.shape[d] - 1) - i if d in dims else i for d, i in enumerate(idx))
        return self.value(x, new)

    def mv_slice(self, e: Eqn, idx: tuple[Ix, ...]) -> int:
        x = e.inputs[0]
        st = e.params["strides"] or (1,) * x.aval.ndim
        new = tuple(i * s + b for i, s, b in zip(idx, st, e.params["start_indices"]))
        return self.value(x, new)

    def mv_pad(self, e: Eqn, idx: tuple[Ix, ...]) -> int:
        x, pv = e.inputs
        dtype = e.outvars[0].aval.dtype
        padn = self.value(pv, ())
        if any(not sd.is_sym(n) and n == 0 for n in x.aval.shape):
            return padn
        # a symbolic size that may be 0: no index passes the predicate (t in [0, -s]), and the
        # reads of the empty operand are bounds-checked (checked_value)
        conds, new = [], []
        for i, n, (lo, _hi, it) in zip(idx, x.aval.shape, e.params["padding_config"]):
            s = it + 1
            t = i - lo
            top = (n - 1) * s
            conds.append((t, 0, top, s))
            new.append(ixm.floordiv(ixm.clamp(t, 0, top, self.ranges), s, self.ranges))
            if s == 1:
                self.note_pad_edges(t, top)
        # the bounds test and its select count nothing towards recomputation (check_duplication): a
        # padded read is about as cheap as a read, and a max pool's windows read the padding of its
        # input at 9 taps, which then fuses into the pool rather than being written out first
        p = self.pred(conds, cost=0)
        empty = any(sd.may_be_zero(n) for n in x.aval.shape)
        return self.select(p, self.checked_value(x, tuple(new), empty), padn, dtype, cost=0, blend=True)

    def mv_concatenate(self, e: Eqn, idx: tuple[Ix, ...]) -> int:
        d = e.params["dimension"]
        dtype = e.outvars[0].aval.dtype
        ops = [(a, a.aval.shape[d]) for a in e.inputs]
        offsets, o = [], 0
        for _, n in ops:
            offsets.append(o)
            o += n
        # pieces of symbolic size may be empty for some bindings: an empty piece's predicate
        # (idx <= off - 1) never selects it over the pieces before it, the last piece is reached
        # only below the total size, and reads of an empty piece are bounds-checked
        parts = [(a, off, n) for (a, n), off in zip(ops, offsets) if sd.is_sym(n) or n > 0]
        # pieces that the index can reach in this loop nest (the others are never read)
        lo, hi = ixm.ix_range(idx[d], self.ranges)
        live = [(a, off, n) for a, off, n in parts
                if not (sd.proves_lt(off + n - 1, lo) or sd.proves_lt(hi, off))] or parts[:1]
        if len(live) > 1:
            self.note_pieces(idx[d], [off for _, off, _ in live[1:]], [n for _, _, n in live])
        result = None
        for a, off, n in reversed(live):
            new = list(idx)
            new[d] = ixm.clamp(idx[d] - off, 0, n - 1, self.ranges)
            v = self.checked_value(a, tuple(new), sd.may_be_zero(n))
            if result is None:
                result = v
            else:
                p = self.pred([(idx[d], None, off + n - 1, 1)])
                result = self.select(p, v, result, dtype)
        if result is None:
            raise Unfusable("concatenate of empty operands")
        return result

    def note_pieces(self, ix: Ix, starts: Sequence[Any], sizes: Sequence[Any]) -> None:
        """Record where a concatenate read at ``ix`` changes pieces, as cut points of the loop
        variable that ``ix`` is affine in; refuse long select chains that no cut can remove."""
        many = len(sizes) > MAX_SELECT_PIECES
        static = not any(sd.is_sym(x) for x in (*starts, *sizes, ix.const, *ix.terms.values()))
        (t, c), = ix.terms.items() if len(ix.terms) == 1 else ((None, 0),)
        if not static or not isinstance(t, str):
            if many and static:
                raise Unfusable(f"concatenate of {len(sizes)} pieces read through {ix}")
            return
        # local index v where piece j starts: c * v + const >= start (c > 0) or < start (c < 0)
        cuts = {-((ix.const - s) // c) if c > 0 else (s - ix.const) // c + 1 for s in starts}
        if t == self.dvars[-1] and not many and min(sizes) < 8 * abs(c):
            # a few short pieces on the innermost loop: the select chain is cheaper, unless it
            # would recompute expensive pieces (see build)
            self.soft_cuts.setdefault(t, set()).update(cuts)
            return
        self.many_pieces = self.many_pieces or many
        self.cuts.setdefault(t, set()).update(cuts)

    def note_pad_edges(self, t: Ix, top: Any) -> None:
        """Where a padded read at ``t`` (inside for ``0 <= t <= top``) enters and leaves its operand,
        as cut points of the innermost loop variable when ``t`` is affine in it (static sizes): read
        through a clamp along the innermost loop the taps are gathers (an NCHW max pool's rows),
        while each box of the split loops (:mod:`.concat_split`) reads them plainly, at a stride."""
        if len(t.terms) != 1 or sd.is_sym(top) or sd.is_sym(t.const) or not self.dvars:
            return
        (v, c), = t.terms.items()
        if v != self.dvars[-1] or not isinstance(c, int) or c <= 0:
            return
        first, last = -(t.const // c), (top - t.const) // c  # the loop's range that reads inside
        if last - first >= 8:  # (a short inside range keeps its selects)
            self.cuts.setdefault(v, set()).update((first, last + 1))

    def mv_iota(self, e: Eqn, idx: tuple[Ix, ...]) -> int:
        ix = idx[e.params["dimension"]]
        return self.node(NodeKind.IOTA, e.params["dtype"], (), IotaAttrs(ix), 0, frozenset(ix.vars()),
                         [t.node for t in ix.opaques() if isinstance(t, ixm.Data)])

    def mv_dim_as_value(self, e: Eqn, idx: tuple[Ix, ...]) -> int:
        """A symbolic size as a scalar: rendered like an iota of a constant index (the axis values
        are read from ``dims`` in the generated code)."""
        ix = Ix.lit(e.params["dim"])
        return self.node(NodeKind.IOTA, e.params["dtype"], (), IotaAttrs(ix), 0)

    def mv_take(self, e: Eqn, idx: tuple[Ix, ...]) -> int:
        x, ia = e.inputs
        axis, mode = e.params["axis"], e.params["mode"]
        dtype = e.outvars[0].aval.dtype
        k = ia.aval.ndim
        n = x.aval.shape[axis]
        if mode == "clip" and sd.is_sym(n) and sd.may_be_zero(n):
            # a non-empty index set into an empty axis raises (the reference step does)
            raise Unfusable(f"take (clip) from an axis whose size {n} may be 0 raises at run time")
        # mode "fill" with a possibly-empty axis: every index fails the bounds predicate, the
        # clamped reads of the empty operand are bounds-checked
        if not sd.is_sym(n) and n == 0:
            if mode == "clip":
                raise Unfusable("take from an empty axis raises at run time")
            return self.const(fill_value(dtype), dtype)
        ival = self.value(ia, tuple(idx[axis:axis + k]))
        iv = self.nodes[ival]
        data = Ix.lit(int(iv.attrs.value)) if iv.kind is NodeKind.CONST else Ix({ixm.Data(ival, iv.vars): 1})
        xi = ixm.clamp(data, 0, n - 1, self.ranges)
        v = self.checked_value(x, (*idx[:axis], xi, *idx[axis + k:]), sd.may_be_zero(n))
        if mode == "fill":
            p = self.pred([(data, 0, n - 1, 1)])
            v = self.select(p, v, self.const(fill_value(dtype), dtype), dtype)
        return v

    def reduce(self, e: Eqn, out: Var, idx: tuple[Ix, ...]) -> int:
        x = e.inputs[0]
        axes = tuple(e.params["axes"]) if "axes" in e.params else (e.params["axis"],)
        kept = [i for i in range(x.aval.ndim) if i not in axes]
        order = kept + sorted(axes)
        if tuple(x.aval.shape[i] for i in order) != self.domain or len(kept) != self.n_outer:
            raise Unfusable("reduction over a different domain")
        if tuple(i.is_var() for i in idx) != tuple(self.dvars[:self.n_outer]):
            raise Unfusable("reduction result read at another index than its row")
        xidx: list[Ix] = [Ix.lit(0)] * x.aval.ndim
        for pos, ax in enumerate(order):
            xidx[ax] = Ix.var(self.dvars[pos])
        inp = self.value(x, tuple(xidx))
        xdt = x.aval.dtype
        if xdt not in SUPPORTED_DTYPES:
            raise Unfusable(f"dtype {xdt} has no C type")
        kind = opinfo.reduce_kind(e.prim, xdt)
        if kind is None:
            raise Unfusable(f"no C lowering for {e.prim.name} on {xdt}")
        rid = len(self.reduces)
        phase = 1 + max((self.reduces[r].phase for r in self.nodes[inp].reduces), default=0)
        r = Reduce(rid, kind, inp, xdt, out.aval.dtype, phase)
        self.reduces.append(r)
        # a reduction result is a per-row scalar: free for its consumers to read (cost 0)
        n = self.node(NodeKind.REDUCE, out.aval.dtype, (), ReduceAttrs(rid), 0, self.outer)
        self.nodes[n].reduces = frozenset({rid})
        r.node = n
        return n

    # -- assembling ---------------------------------------------------------------------------
    def build(self) -> KernelIR:
        roots = []
        for v in self.roots_in:
            shape = tuple(v.aval.shape)
            if self.origin is not None:  # a box of the root's domain
                idx = tuple(Ix.var(d) + o for d, o in zip(self.dvars, self.origin))
                full = True
            elif shape == self.domain:
                idx = tuple(Ix.var(d) for d in self.dvars)
                full = True
            elif shape == self.domain[:self.n_outer]:
                idx = tuple(Ix.var(d) for d in self.dvars[:self.n_outer])
                full = False
            elif self.n_outer and _row_index(shape, self.domain[:self.n_outer], self.dvars) is not None:
                idx = _row_index(shape, self.domain[:self.n_outer], self.dvars)  # rows with size-1 dims
                full = False
            else:
                raise Unfusable(f"output of shape {shape} does not fit the domain {self.domain}")
            if v.id not in self.producer:
                raise Unfusable("an output is not computed by the kernel")
            n = self.value(v, idx)
            roots.append(Root(v, n, full, ixm.linearize(idx, shape)))
        needs_split = False
        try:
            self.check_duplication()
        except Unfusable:
            # evaluated under a select chain, a piece's producer looks recomputed over the whole
            # domain; per-piece loops (checked again box by box) evaluate it once per element
            if not (self.cuts or self.soft_cuts) or self.reduces or self.n_outer:
                raise
            needs_split = True
            for t, cs in self.soft_cuts.items():
                self.cuts.setdefault(t, set()).update(cs)
        if self.many_pieces and self.reduces:
            raise Unfusable("a concatenate of many pieces read inside a reduction kernel")
        ir = KernelIR(self.domain, self.n_outer, self.dvars, self.nodes, self.reduces, roots, self.loads,
                      self.inputs, self.eqns, cuts=self.cuts, needs_split=needs_split,
                      evaluations=self.evaluations, nonempty=tuple(self.nonempty.values()))
        self.assign_loops(ir)
        ir.natural = self.natural_order(ir)
        if ir.n_outer and ir.natural is None and self.origin is None:  # (a split kernel's part has no
            self.row_exps(ir)  # row caches of its own in the plan: scratch.py asks for the whole kernel's)
        return ir

    def row_exps(self, ir: KernelIR) -> None:
        """Give each float32 ``exp`` of the inner loops a row cache (``ir.scratch``), so the loop
        that computes it can evaluate it a whole row at a time with the vectorized
        ``em_exp_row_f32`` (``csrc/vexp.h``): the loop is split at the exp, its argument stored
        into the row, exponentiated in place, and read back by the rest of the loop."""
        for q, ss in enumerate(ir.loop_sinks):
            for nid in self.inner_closure(ss):
                if nid not in ir.scratch and is_row_exp(self.nodes[nid]):
                    ir.scratch[nid] = q

    def natural_order(self, ir: KernelIR) -> list[str] | None:
        """Loop variables in the reduced operand's own axis order, when the accumulate strategy
        applies: one phase, no full-domain outputs, no arg reductions, reduced axes not trailing."""
        if not ir.reduces or ir.n_loops != 1 or any(r.full for r in ir.roots):
            return None
        if any(r.kind in ("argmax", "argmin") for r in ir.reduces):
            return None
        orders = set()
        for e in self.eqns:
            if opinfo.is_reduction(e.prim):
                nd = e.inputs[0].aval.ndim
                axes = sorted(e.params["axes"]) if "axes" in e.params else [e.params["axis"]]
                kept = [i for i in range(nd) if i not in axes]
                pos = {ax: p for p, ax in enumerate(kept + axes)}
                orders.add(tuple(self.dvars[pos[a]] for a in range(nd)))
        if len(orders) != 1:
            return None
        order = list(orders.pop())
        return None if order == self.dvars else order

    def level_count(self, n: Node) -> int:
        if n.vars & self.inner:
            return _size(self.domain)
        if n.vars or n.reduces:
            return _size(self.domain[:self.n_outer])
        return 1

    def check_duplication(self) -> None:
        for vid, nids in self.var_nodes.items():
            v = self.var_of_eqn[vid]
            size = _size(v.aval.shape)
            for nid in nids:
                n = self.nodes[nid]
                if n.cost <= CHEAP:
                    continue
                if len(nids) > 1:
                    name = self.producer[vid].prim.name
                    raise Unfusable(f"{name} would be computed at {len(nids)} indices")
                count, total = sd.nominal(self.level_count(n)), sd.nominal(size)  # symbolic: nominal
                self.evaluations[vid] = (count, total)
                if count > total:
                    raise Unfusable(f"{self.producer[vid].prim.name} would be recomputed "
                                    f"{count // max(total, 1)}x (broadcast)")

    def assign_loops(self, ir: KernelIR) -> None:
        n_phase = max((r.phase for r in ir.reduces), default=0)
        final = False
        for r in ir.roots:
            if r.full:
                after = max((ir.reduces[q].phase for q in self.nodes[r.node].reduces), default=0)
                r.loop = max(after + 1, 1)
                if r.loop > n_phase:
                    final = True
        ir.n_loops = n_phase + (1 if final else 0)
        sinks: list[list[int]] = [[] for _ in range(ir.n_loops)]
        for r in ir.reduces:
            sinks[r.phase - 1].append(r.input)
        for r in ir.roots:
            if r.full:
                r.loop = min(r.loop, ir.n_loops)
                sinks[r.loop - 1].append(r.node)
        ir.loop_sinks = sinks
        # inner nodes needed by several loops: expensive ones go through a scratch row buffer
        used_in: dict[int, list[int]] = {}
        for q, ss in enumerate(sinks):
            for nid in self.inner_closure(ss):
                used_in.setdefault(nid, []).append(q)
        for nid, qs in used_in.items():
            if len(qs) > 1 and self.nodes[nid].cost > CHEAP:
                ir.scratch[nid] = qs[0]

    def inner_closure(self, sinks: Sequence[int]) -> list[int]:
        return reachable(self.nodes, sinks, keep=lambda n: bool(n.vars & self.inner))


def reachable(nodes: Any, sinks: Sequence[int], keep: Callable[[Node], bool] = lambda n: True,
              expand: Callable[[int], bool] = lambda nid: True) -> list[int]:
    """Node ids reachable from ``sinks`` through their operands (:func:`node_deps`), in visit order:
    a node ``keep`` rejects is neither listed nor expanded; one ``expand`` rejects is listed but its
    operands are not followed."""
    seen: set[int] = set()
    out: list[int] = []
    stack = list(sinks)
    while stack:
        nid = stack.pop()
        if nid in seen:
            continue
        seen.add(nid)
        n = nodes[nid]
        if not keep(n):
            continue
        out.append(nid)
        if expand(nid):
            stack.extend(node_deps(n))
    return out


def is_row_exp(n: Node) -> bool:
    """A float32 ``exp`` node: row kernels evaluate it over whole rows (``em_exp_row_f32``)."""
    return n.kind is NodeKind.OP and n.attrs.name == "exp" and n.dtype == np.float32


def _nested_data(o: ixm.Opaque) -> list[ixm.Data]:
    out: list[ixm.Data] = []
    inner = getattr(o, "e", None)
    if isinstance(inner, Ix):
        for t in inner.opaques():
            if isinstance(t, ixm.Data):
                out.append(t)
            out.extend(_nested_data(t))
    return out


def node_deps(n: Node) -> list[int]:
    """Argument nodes plus nodes referenced by data-dependent index terms."""
    deps = list(n.args)
    for e in n.index_exprs():
        for t in e.opaques():
            if isinstance(t, ixm.Data):
                deps.append(t.node)
            deps.extend(d.node for d in _nested_data(t))
    return deps


def _row_index(shape: Sequence[int], rows: Sequence[int], dvars: Sequence[str]) -> tuple | None:
    """The index of a value of ``shape`` that holds the rows ``rows`` up to size-1 dims (row ``r``
    of the outer loops at the position of its non-1 dims, 0 elsewhere), or None."""
    outer = [Ix.var(d) if n != 1 else None for d, n in zip(dvars, rows)]
    outer = [i for i in outer if i is not None]
    if tuple(d for d in shape if d != 1) != tuple(d for d in rows if d != 1):
        return None
    it = iter(outer)
    return tuple(Ix.lit(0) if d == 1 else next(it) for d in shape)


def build_kernel(eqns: Sequence[Eqn], domain: Sequence[int], n_outer: int, roots: Sequence[Var],
                 max_inputs: int = 16, split: bool = False, origin: Sequence[int] | None = None) -> KernelIR:
    """Build (and check) the kernel computing ``roots`` from ``eqns`` over ``domain``.

    Raises :class:`Unfusable` when the equations cannot form one kernel without duplicating
    expensive work or exceeding ``max_inputs`` input buffers. ``split=True``: a map kernel that
    reads concatenates gets per-piece loop nests (``KernelIR.parts``, see :mod:`.concat_split`).
    ``origin``: build over a box of the roots' shape (``domain`` is the box's extent) whose
    element ``i`` computes the roots at ``origin + i``.
    """
    ir = _Builder(eqns, tuple(domain), n_outer, roots, max_inputs, origin).build()
    if (split or ir.needs_split) and ir.cuts and not ir.reduces and n_outer == 0 and origin is None:
        from ember._src.native.scheduling.concat_split import split_parts
        ir.parts = split_parts(eqns, tuple(domain), roots, max_inputs, ir)
    if ir.needs_split and not ir.parts and origin is None:  # (a box is cut further by the caller)
        raise Unfusable("a concatenate's pieces would be recomputed under a select chain")
    return ir
