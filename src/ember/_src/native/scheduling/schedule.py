"""Partition an optimized program into steps: fused kernels and calls.

* **kernel**: a fused group of elementwise, movement, iota, gather and reduction equations (see
  :mod:`.kernel`): chains and DAGs of elementwise ops, movement read through index expressions,
  reductions with their prologue and epilogue (a row softmax or layer norm is one kernel).
* **gemm**: a ``native_gemm`` equation (BLAS ``?gemm`` for float32/float64, a C loop otherwise).
* **call**: an equation with a C lowering in :mod:`.calls` / :mod:`.lapack` (dynamic slices,
  scans, sort, scatter, threefry, LAPACK factorizations): a block of C in the program.
* **fallback**: any equation without a kernel or call lowering (fft, eig, gamma/Poisson sampling,
  loops without a native path, ...): the generated code calls back into Python, which runs the
  primitive's NumPy implementation on the step's buffers. The program stays one native call.
* **alias**: a reshape of a materialized value whose result must exist as a buffer (an input of
  a call or a program output): the planner gives both the same storage, no code runs.

Fusion first merges each large connected region of map equations over one domain with a single
kernel build (when it builds and no path leaves the region and comes back); then it is greedy,
consumer first: each group repeatedly absorbs the groups producing its inputs.
A producer used elsewhere too is either copied into the consumer (when it is cheap: a few
cheap ops, never a reduction) or moved with its shared outputs becoming extra kernel outputs (when
they fit the kernel's domain and no cycle arises). :func:`kernel.build_kernel` accepts or rejects
each candidate, so fusion never duplicates expensive work and respects the per-kernel input limit.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ember._src.native import opinfo
from ember._src.native.base.c_types import SUPPORTED_DTYPES
from ember._src.native.opinfo import lowerable
from ember._src.native.rewrite.fused import gemm_p
from ember._src.native.scheduling.kernel import CHEAP, MAX_EXPR_DEPTH, KernelIR, Unfusable, build_kernel
from ember._src.program import Atom, Eqn, Literal, Program, Var, eqn_effectful

# connected map regions of at least this many equations are merged with one kernel build
# (_Fuser.merge_map_regions); smaller ones cost the pairwise loop little
REGION_MIN = 16
# a region this large whose one build fails (deeper than MAX_EXPR_DEPTH, more inputs than a kernel
# takes) is cut into consecutive chunks that each fit, rather than left to the pairwise loop, whose
# rebuild at every merge made the gradient of a 700-long elementwise chain take 160 s to schedule
CHUNK_MIN = 64


class StepKind(enum.StrEnum):
    """What a schedule step is (a ``str``: ``step.kind == "gemm"`` holds for a GEMM step)."""

    KERNEL = "kernel"  # a fused loop nest (``Step.ir``)
    GEMM = "gemm"  # a ``native_gemm`` equation
    CALL = "call"  # a block of C from the op-info registry's call lowering
    FALLBACK = "fallback"  # the primitive's NumPy implementation, called back from the program
    ALIAS = "alias"  # a reshape sharing its operand's storage
    LOOP = "loop"  # a scan / while loop (``Step.sub``)
    COND = "cond"  # a cond (``Step.sub``)


@dataclass
class Step:
    kind: StepKind
    name: str
    eqns: list[Eqn]
    inputs: list[Atom]
    outputs: list[Var]
    ir: KernelIR | None = None
    sub: Any = None  # loop / cond steps: their compiled bodies (a loops.LoopLowering)
    epilogue: Any = None  # gemm and conv call steps: a fused bias/ReLU (a gemm_epilogue.GemmEpilogue)
    strategy: Any = None  # gemm steps: how the product runs (a gemm_strategy.GemmStrategy)

    def __str__(self) -> str:
        def short(a: Atom) -> str:
            return repr(a) if isinstance(a, Literal) else f"v{a.id}:{a.aval.str_short()}"

        ins = ", ".join(short(a) for a in self.inputs)
        outs = ", ".join(short(v) for v in self.outputs)
        if self.kind is StepKind.KERNEL and self.ir is not None:
            ir = self.ir
            dom = "x".join(str(d) for d in ir.domain) or "scalar"
            kind = "map" if not ir.reduces else f"reduce({ir.n_loops} loops)"
            if ir.parts:
                kind += f" in {len(ir.parts)} parts"
            what = f"{kind} over {dom} [{ir.describe()}]"
        elif self.kind is StepKind.GEMM:
            p = self.eqns[0].params
            what = f"{self.eqns[0].outvars[0].aval.str_short()} trans_a={p['trans_a']} " \
                   f"trans_b={p['trans_b']} alpha={p['alpha']:g} beta={p['beta']:g}"
            if self.epilogue is not None:
                what += f" then [{self.epilogue.describe()}]"
            if self.strategy is not None:
                what += f" via {self.strategy.describe()}"
            if p.get("views") is not None:
                what += " strided"
        elif self.sub is not None:
            what = self.sub.describe()
        else:
            what = ",".join(e.prim.name for e in self.eqns[:1 if self.epilogue is not None else None])
            if self.epilogue is not None:
                what += f" then [{self.epilogue.describe()}]"
        return f"{self.name}: {self.kind} {what}  ({ins}) -> ({outs})"


@dataclass
class Schedule:
    program: Program
    steps: list[Step]
    options: dict = field(default_factory=dict)

    def __str__(self) -> str:
        n = {k: sum(s.kind == k for s in self.steps) for k in ("kernel", "gemm", "call", "fallback", "alias")}
        loops = sum(s.kind in (StepKind.LOOP, StepKind.COND) for s in self.steps)
        head = f"schedule: {len(self.steps)} steps ({n['kernel']} kernels, {n['gemm']} gemm, " \
               f"{n['call']} call, {n['fallback']} fallback, {n['alias']} alias" + \
            (f", {loops} loops" if loops else "") + ")"
        return "\n".join([head, *("  " + str(s) for s in self.steps)])

    def count(self, kind: str) -> int:
        return sum(s.kind == kind for s in self.steps)


# ---------------------------------------------------------------------------------------------


def _aliases(e: Eqn) -> bool:
    """Whether ``e``'s result may share its operand's storage (the op-info ``alias`` rule)."""
    i = opinfo.info(e.prim)
    return i is not None and i.alias


def row_shaped(shape: Sequence[int], rows: Sequence[int]) -> bool:
    """Whether values of ``shape`` are the rows ``rows`` up to size-1 dims (a reduction's result
    with ``keepdims``, e.g. a layer norm's mean of shape ``[b, t, 1]`` over rows ``[b, t]``)."""
    return tuple(d for d in shape if d != 1) == tuple(d for d in rows if d != 1)


def natural_domain(e: Eqn) -> tuple[tuple[int, ...], int]:
    """The loop domain of a single-equation kernel: reductions loop over kept dims, then reduced."""
    if opinfo.is_reduction(e.prim):
        x = e.inputs[0]
        axes = tuple(e.params["axes"]) if "axes" in e.params else (e.params["axis"],)
        kept = [i for i in range(x.aval.ndim) if i not in axes]
        shape = x.aval.shape
        return tuple(shape[i] for i in kept) + tuple(shape[i] for i in sorted(axes)), len(kept)
    return tuple(e.outvars[0].aval.shape), 0


@dataclass
class _Group:
    gid: int
    members: list[int]  # eqn indices (sorted), copies included
    home: set[int]  # eqn indices this group materializes
    domain: tuple[int, ...]
    n_outer: int
    has_reduce: bool


class _Fuser:
    def __init__(self, p: Program, max_inputs: int, fuse: bool):
        self.p = p
        self.eqns = list(p.eqns)
        self.max_inputs = max_inputs
        self.fuse = fuse
        self.producer: dict[int, int] = {v.id: i for i, e in enumerate(self.eqns) for v in e.outvars}
        self.consumers: dict[int, list[int]] = {}
        for i, e in enumerate(self.eqns):
            for a in e.inputs:
                if isinstance(a, Var):
                    self.consumers.setdefault(a.id, []).append(i)
        self.out_ids = {a.id for a in p.outvars if isinstance(a, Var)}
        self.groups: dict[int, _Group] = {}
        self.home: dict[int, int] = {}  # eqn index -> gid (kernels) or -1 - i (calls)
        self.call_kind: dict[int, StepKind] = {}
        self.containing: dict[int, set[int]] = {}  # eqn index -> groups evaluating it
        self.last_ir: dict[int, KernelIR] = {}

    # -- classification ----------------------------------------------------------------------
    def classify(self) -> None:
        for i, e in enumerate(self.eqns):
            if e.prim is not gemm_p and (not opinfo.is_fusible(e.prim) or e.prim.multiple_results):
                self.call_kind[i] = StepKind.CALL if lowerable(e) else StepKind.FALLBACK
        # a reshape read only by calls is a view of its operand's buffer (no kernel, no copy);
        # its producer then keeps its natural domain (e.g. a layer norm stays one row kernel)
        for i in range(len(self.eqns) - 1, -1, -1):
            e = self.eqns[i]
            if _aliases(e) and isinstance(e.inputs[0], Var):
                cons = self.consumers.get(e.outvars[0].id, [])
                if cons and all(c in self.call_kind or self.eqns[c].prim is gemm_p for c in cons):
                    self.call_kind[i] = StepKind.ALIAS
                    self.home[i] = -1 - i
        for i, e in enumerate(self.eqns):
            if self.call_kind.get(i) is StepKind.ALIAS:
                continue
            if e.prim is gemm_p:
                if any(np.dtype(a.aval.dtype) not in SUPPORTED_DTYPES for a in e.inputs):
                    self.call_kind[i] = StepKind.FALLBACK
                else:
                    self.call_kind[i] = StepKind.GEMM
                self.home[i] = -1 - i
                continue
            ok = opinfo.is_fusible(e.prim) and not e.prim.multiple_results
            if ok:
                dom, n_outer = natural_domain(e)
                try:
                    ir = build_kernel([e], dom, n_outer, list(e.outvars), self.max_inputs)
                except Unfusable:
                    ok = False
            if not ok:
                self.call_kind[i] = StepKind.CALL if lowerable(e) else StepKind.FALLBACK
                self.home[i] = -1 - i
                continue
            g = _Group(i, [i], {i}, dom, n_outer, opinfo.is_reduction(e.prim))
            self.groups[i] = g
            self.home[i] = i
            self.containing[i] = {i}
            self.last_ir[i] = ir

    # -- graph queries -----------------------------------------------------------------------
    def unit_deps(self, unit: int) -> set[int]:
        """Units producing the external inputs of ``unit``."""
        if unit >= 0:
            g = self.groups[unit]
            members = set(g.members)
            eqn_ids = g.members
        else:
            members, eqn_ids = set(), [-1 - unit]
        deps = set()
        for i in eqn_ids:
            for a in self.eqns[i].inputs:
                if isinstance(a, Var) and a.id in self.producer:
                    j = self.producer[a.id]
                    if j not in members:
                        deps.add(self.home[j])
        return deps

    def ancestors(self, unit: int) -> set[int]:
        seen: set[int] = set()
        stack = [unit]
        while stack:
            for d in self.unit_deps(stack.pop()):
                if d not in seen:
                    seen.add(d)
                    stack.append(d)
        return seen

    def needed_by(self, i: int, v: Var, members: set[int], replaced: set[int]) -> set[int]:
        """Units (other than a candidate group with ``members`` replacing the groups ``replaced``)
        that read output ``v`` of equation ``i`` from memory; -10**9 stands for the program."""
        units: set[int] = {-10**9} if v.id in self.out_ids else set()
        for c in self.consumers.get(v.id, ()):
            if c in self.call_kind:
                units.add(-1 - c)
                continue
            for u in self.containing.get(c, ()):
                if u not in replaced and i not in self.groups[u].members:
                    units.add(u)
            if c not in members and not (self.containing.get(c, set()) - replaced):
                units.add(self.home[c])
        return units

    def roots(self, members: Sequence[int], home: set[int], replaced: set[int]) -> list[Var]:
        """Outputs of home equations that a group with these members must write to memory."""
        mset = set(members)
        return [v for i in sorted(home) for v in self.eqns[i].outvars
                if self.needed_by(i, v, mset, replaced)]

    def external_consumer_units(self, p: _Group, g: _Group) -> set[int]:
        """Units other than ``g`` that read outputs of ``p`` from memory."""
        units: set[int] = set()
        members = set(p.members) | set(g.members)
        for i in p.home:
            for v in self.eqns[i].outvars:
                units |= self.needed_by(i, v, members, {p.gid, g.gid})
        return units

    def reads_more(self, new: KernelIR, old: KernelIR) -> bool:
        """Whether ``new`` reads more computed (non-constant) buffers than ``old``."""
        def computed(ir: KernelIR) -> int:
            return sum(1 for v in ir.inputs if v.id in self.producer)
        return computed(new) > computed(old)

    def is_cheap(self, g: _Group) -> bool:
        if g.has_reduce or len(g.members) > 8:
            return False
        cost = 0
        for i in g.members:
            name = self.eqns[i].prim.name
            if name in ("take",):
                return False
            cost += 0 if name in ("broadcast_in_dim", "reshape", "transpose", "squeeze", "slice", "rev",
                                  "iota", "copy", "stop_gradient") else opinfo.op_cost(name)
        return cost <= CHEAP

    # -- merging -----------------------------------------------------------------------------
    def merged_domain(self, p: _Group, g: _Group) -> tuple[tuple[int, ...], int] | None:
        if not p.has_reduce:
            return g.domain, g.n_outer
        if g.has_reduce:
            return (g.domain, g.n_outer) if (g.domain, g.n_outer) == (p.domain, p.n_outer) else None
        if g.domain == p.domain or row_shaped(g.domain, p.domain[:p.n_outer]):
            return p.domain, p.n_outer
        return None

    def try_merge(self, pid: int, gid: int) -> bool:
        p, g = self.groups[pid], self.groups[gid]
        dom = self.merged_domain(p, g)
        if dom is None:
            return False
        others = self.external_consumer_units(p, g)
        if not others:
            mode = "move"
        elif self.is_cheap(p):
            mode = "copy"
        else:
            mode = "move"
            anc = self.ancestors(gid)
            if any(u in anc for u in others if u != -10**9):
                return False
        members = sorted(set(p.members) | set(g.members))
        home = set(g.home) | (set(p.home) if mode == "move" else set())
        replaced = {gid, pid} if mode == "move" else {gid}
        roots = self.roots(members, home, replaced)
        if not roots:
            return False
        try:
            ir = build_kernel([self.eqns[i] for i in members], dom[0], dom[1], roots, self.max_inputs)
        except Unfusable:
            return False
        if mode == "copy" and gid in self.last_ir and self.reads_more(ir, self.last_ir[gid]):
            return False  # the copy would keep more buffers live (a residual chain summed at its end)
        g.members, g.home = members, home
        g.domain, g.n_outer = dom
        g.has_reduce = g.has_reduce or p.has_reduce
        self.last_ir[gid] = ir
        for i in members:
            self.containing.setdefault(i, set()).add(gid)
        if mode == "move":
            for i in p.home:
                self.home[i] = gid
            for i in p.members:
                self.containing[i].discard(pid)
            del self.groups[pid]
            self.last_ir.pop(pid, None)
        return True

    def merge_map_regions(self) -> None:
        """Merge each large connected region of map groups (no reduction) over one domain into one
        group with a single kernel build, where that build succeeds and the region is convex (no
        path leaves it and comes back). The pairwise loop of :meth:`fuse_all` rebuilds a growing
        kernel at every merge, which is quadratic in its size: a float64 normal sampler (about
        1000 threefry and erf-inverse equations) took 24 s to schedule that way. A region whose
        build fails (too many inputs, a concatenate that would be recomputed, ...) is left to the
        pairwise loop."""
        maps = {gid for gid, g in self.groups.items() if not g.has_reduce}
        parent = {gid: gid for gid in maps}

        def find(x: int) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for gid in maps:
            g = self.groups[gid]
            for d in self.unit_deps(gid):
                if d in maps and (self.groups[d].domain, self.groups[d].n_outer) == (g.domain, g.n_outer):
                    parent[find(d)] = find(gid)
        regions: dict[int, list[int]] = {}
        for gid in maps:
            regions.setdefault(find(gid), []).append(gid)
        for region in regions.values():
            if len(region) >= REGION_MIN and self.convex(set(region)):
                self.merge_region(sorted(region))

    def convex(self, region: set[int]) -> bool:
        """Whether no unit outside ``region`` both depends on it and feeds it."""
        stack = [d for u in region for d in self.unit_deps(u) if d not in region]
        seen = set(stack)
        while stack:
            for d in self.unit_deps(stack.pop()):
                if d in region:
                    return False
                if d not in seen:
                    seen.add(d)
                    stack.append(d)
        return True

    def merge_region(self, region: list[int]) -> None:
        """Replace the groups ``region`` (fresh, one equation each) by one group, if it builds;
        a large region that does not is merged chunk by chunk (:meth:`region_chunks`)."""
        if self.merge_groups(region) or len(region) < CHUNK_MIN:
            return
        if any(self.groups[u].members != [u] for u in region):
            return
        for chunk in self.region_chunks(region):
            if len(chunk) > 1:
                self.merge_groups(chunk)

    def region_chunks(self, region: list[int]) -> list[list[int]]:
        """``region`` (one-equation groups in program order) cut into consecutive runs whose
        longest chain of equations is at most ``MAX_EXPR_DEPTH`` and which read at most
        ``max_inputs`` buffers from outside the run. A run of a topological order is convex within
        the region, and the region is convex in the program, so each run can be one kernel."""
        chunks: list[list[int]] = []
        cur: list[int] = []
        depth: dict[int, int] = {}
        ins: set[int] = set()
        for u in region:
            for fresh in (False, True):
                if fresh:
                    chunks.append(cur)
                    cur, depth, ins = [], {}, set()
                reads = {a.id for a in self.eqns[u].inputs if isinstance(a, Var)}
                inner = [self.producer[r] for r in reads if self.producer.get(r) in depth]
                d = 1 + max((depth[j] for j in inner), default=0)
                new_ins = ins | {r for r in reads if self.producer.get(r) not in depth}
                if not cur or (d <= MAX_EXPR_DEPTH and len(new_ins) <= self.max_inputs):
                    break
            cur.append(u)
            depth[u], ins = d, new_ins
        chunks.append(cur)
        return chunks

    def merge_groups(self, region: list[int]) -> bool:
        """Replace the groups ``region`` (a convex set) by one group, if it builds."""
        gs = [self.groups[u] for u in region]
        members = sorted(i for g in gs for i in g.members)
        home = {i for g in gs for i in g.home}
        roots = self.roots(members, home, set(region))
        if not roots:
            return False
        gid, keep = region[-1], gs[-1]
        try:
            ir = build_kernel([self.eqns[i] for i in members], keep.domain, keep.n_outer, roots,
                              self.max_inputs)
        except Unfusable:
            return False
        for u in region[:-1]:
            del self.groups[u]
            self.last_ir.pop(u, None)
        keep.members, keep.home = members, home
        self.last_ir[gid] = ir
        for i in members:
            self.home[i] = gid
            self.containing[i] = {gid}
        return True

    def fuse_all(self) -> None:
        """Consumers first; repeat until nothing merges (a producer may become fusible after it
        grew, e.g. a row-level epilogue once it joined its reduction)."""
        if not self.fuse:
            return
        self.merge_map_regions()
        failed: set[tuple] = set()
        progress = True
        while progress:
            progress = False
            for gid in sorted(self.groups, reverse=True):
                changed = gid in self.groups
                while changed:
                    changed = False
                    for pu in sorted(self.unit_deps(gid), reverse=True):
                        if pu < 0 or pu == gid or pu not in self.groups:
                            continue
                        key = (pu, gid, tuple(self.groups[pu].members), tuple(self.groups[gid].members))
                        if key in failed:
                            continue
                        if self.try_merge(pu, gid):
                            changed = progress = True
                            break
                        failed.add(key)

    # -- output --------------------------------------------------------------------------------
    def order_effects(self, units: dict[int, Step], deps: dict[int, set[int]]) -> None:
        """Each effectful step (a debug callback, a loop whose body has one) also waits for the
        previous one, so effects happen in program order (effectful equations are never fused, so
        each is its own unit). An edge that would close a cycle (possible only through a fused
        kernel) is left out."""
        prev = None
        for i, e in enumerate(self.eqns):
            u = self.home.get(i)
            if u is None or u not in units or not eqn_effectful(e):
                continue
            if prev is not None and u not in self.ancestors(prev):
                deps[u].add(prev)
            prev = u

    def steps(self) -> list[Step]:
        units: dict[int, Step] = {}
        for gid, g in self.groups.items():
            roots = self.roots(g.members, g.home, {gid})
            if not roots:
                continue
            eqns = [self.eqns[i] for i in g.members]
            if len(eqns) == 1 and _aliases(eqns[0]) and len(roots) == 1:
                units[gid] = Step(StepKind.ALIAS, "", eqns, [eqns[0].inputs[0]], roots)
                continue
            ir = build_kernel(eqns, g.domain, g.n_outer, roots, self.max_inputs, split=True)
            ins = list(ir.inputs)
            units[gid] = Step(StepKind.KERNEL, "", eqns, ins, roots, ir)
        for i, kind in self.call_kind.items():
            e = self.eqns[i]
            ins = list(e.inputs[:1]) if kind is StepKind.ALIAS else list(e.inputs)
            units[-1 - i] = Step(kind, "", [e], ins, list(e.outvars))
        # topological order (Kahn), ties by first equation index
        deps = {u: {d for d in self.unit_deps(u) if d in units} for u in units}
        self.order_effects(units, deps)
        first = {u: (min(self.groups[u].members) if u >= 0 else -1 - u) for u in units}
        ready = sorted((u for u in units if not deps[u]), key=lambda u: first[u])
        order: list[int] = []
        done: set[int] = set()
        while ready:
            u = ready.pop(0)
            order.append(u)
            done.add(u)
            for w in units:
                if w not in done and w not in order and w not in ready and deps[w] <= done:
                    ready.append(w)
            ready.sort(key=lambda u: first[u])
        if len(order) != len(units):
            raise AssertionError("schedule has a cycle")
        out = []
        counters: dict[str, int] = {}
        for u in order:
            s = units[u]
            k = counters.get(s.kind, 0)
            counters[s.kind] = k + 1
            s.name = {"kernel": "k", "gemm": "g", "call": "c", "fallback": "f", "alias": "a"}[s.kind] + str(k)
            out.append(s)
        return out


def build_schedule(p: Program, *, max_inputs: int = 16, fuse: bool = True) -> Schedule:
    """Partition ``p`` (static shapes) into kernels and calls; ``fuse=False`` gives one kernel per
    fusible equation (for ablation)."""
    f = _Fuser(p, max_inputs, fuse)
    f.classify()
    f.fuse_all()
    return Schedule(p, f.steps(), {"max_inputs": max_inputs, "fuse": fuse})

