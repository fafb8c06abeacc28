"""Schedule rule: fuse a bias add and ReLU that follow a float32 product into the GEMM kernel's store.

A dense layer ``max(x @ w + b, 0)`` schedules as a ``gemm`` step and then an elementwise kernel
reading the product once more (``add`` of the row-broadcast ``b``, ``max`` with 0). When the
product goes to :mod:`.gemm_library`'s kernel, that kernel can apply the epilogue while each output
tile is still in registers/L1, so the second pass over the output disappears.

:func:`fuse_gemm_epilogues` rewrites such a pair into one ``gemm`` step carrying a
:class:`GemmEpilogue` (its outputs are the kernel's, its inputs the product's plus the bias). The
patterns, with ``h`` the product ``f32[m, n]`` read by nothing else and ``b`` a ``f32[n]`` vector
(``broadcast_in_dim`` along the rows, ``broadcast_dimensions=(1,)``): ``h + b``, ``max(h + b, 0)``
and ``max(h, 0)`` (either operand order; the ReLU keeps NaN, like ``max``). A product the passes
already gave the bias as its accumulator (``gemm(a, b, bias)``, ``beta = 1``, ``bias`` broadcast
along the rows: C is first filled with the broadcast bias) takes the bias as its epilogue instead
(no fill), and may take a following ReLU too. A product accumulating into a full-shape ``c``
(``beta = 1``: a residual added by ``absorb_residual``) keeps it, and its bias and ReLU apply after
the sum. The kernel may read the product reshaped to rows of ``n`` (an NHWC convolution's output),
and a ReLU may also be ``select_n(v <= 0, v, 0)`` (``torch.relu`` exported). Codegen emits the
kernel call with the bias pointer and ReLU flag, and on the BLAS path (before the kernel library
loads, or under :data:`.gemm_library.BLAS_ONLY`) a loop applying the same epilogue after ``sgemm``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ember._src.native.base import symdims as sd
from ember._src.native.runtime import gemm_library as gemm_kernel
from ember._src.native.scheduling.kernel import Unfusable, build_kernel
from ember._src.native.scheduling.schedule import Schedule, Step, StepKind
from ember._src.program import Atom, Eqn, Literal, Var

__all__ = ["GemmEpilogue", "fuse_gemm_epilogues", "match_epilogue"]


@dataclass(frozen=True)
class GemmEpilogue:
    """What a fused ``gemm`` step applies to each product element ``(i, j)``: ``+ bias[j]`` (when
    ``bias`` is set), then ``max(., 0)`` with NaN kept (when ``relu``)."""

    bias: Var | None
    relu: bool

    def describe(self) -> str:
        """E.g. ``+ v4[j], relu``."""
        parts = [f"+ v{self.bias.id}[j]"] if self.bias is not None else []
        return ", ".join(parts + ["relu"] * self.relu)


def _is_zero(a: Atom) -> bool:
    return isinstance(a, Literal) and a.val.shape == () and float(a.val) == 0.0 and not np.signbit(a.val)


def match_epilogue(kernel: Step, h: Var) -> GemmEpilogue | None:
    """The epilogue that ``kernel`` (a single-output elementwise kernel step) applies to ``h`` (a
    product of shape ``(m, n)``, or a convolution's output with its features last), with the bias
    along ``h``'s last axis, or None when it does anything else. The kernel may read ``h``
    reshaped to rows of ``n`` (an NHWC convolution's output: ``(N, H, W, n)``), and its ReLU may be
    ``max(v, 0)`` or ``select_n(v <= 0, v, 0)`` (how ``torch.relu`` exports)."""
    if len(kernel.outputs) != 1:
        return None
    form = _forms(kernel, h)
    if form is None or any(len(e.outvars) != 1 or e.outvars[0].id not in form for e in kernel.eqns):
        return None
    return _epilogue_of(form.get(kernel.outputs[0].id))


def split_epilogue(kernel: Step, h: Var) -> tuple[GemmEpilogue, Var, list[Eqn]] | None:
    """``kernel`` as an epilogue of :func:`match_epilogue`'s forms applied to ``h`` followed by other
    work that reads only its result ``y`` (a ReLU then a max pool's padding: the stem of a ResNet):
    ``(epilogue, y, the other equations)``, the zero or bias broadcasts they read kept among them;
    None when the kernel is not of that shape."""
    form = _forms(kernel, h)
    if form is None:
        return None
    made = {v.id: e for e in kernel.eqns for v in e.outvars}
    rest = [e for e in kernel.eqns if len(e.outvars) != 1 or e.outvars[0].id not in form]
    if not rest or any(v.id in form for v in kernel.outputs):
        return None
    read = {a.id for e in rest for a in e.inputs if isinstance(a, Var) and a.id in form}
    ys = [v for v in read if form[v][0] in ("relu", "h+b")]
    if len(ys) != 1 or any(form[v][0] not in ("relu", "h+b", "zero") for v in read):
        return None
    keep = {id(made[v]) for v in read if form[v][0] == "zero"}  # a broadcast zero, recomputed
    y = made[ys[0]].outvars[0]
    return _epilogue_of(form[y.id]), y, [e for e in kernel.eqns if e in rest or id(e) in keep]


def _epilogue_of(res: tuple | None) -> GemmEpilogue | None:
    if res is None:
        return None
    if res[0] == "h+b":
        return GemmEpilogue(res[1], False)
    if res[0] == "relu":
        inner = res[1]
        return GemmEpilogue(inner[1] if inner[0] == "h+b" else None, True)
    return None


def _forms(kernel: Step, h: Var) -> dict[int, tuple] | None:
    """The symbolic value of each of ``kernel``'s values that is an epilogue form of ``h`` (``h``, a
    zero, the bias, ``h + b``, a ReLU of either); None when ``h`` is a scalar. Sizes may be
    symbolic (named dynamic axes: a view of ``h`` has the same element count as an expression)."""
    hshape = tuple(h.aval.shape)
    if not hshape:
        return None
    n, size = hshape[-1], math.prod(hshape)
    f32 = np.dtype(np.float32)
    form: dict[int, tuple] = {h.id: ("h",)}  # var id -> symbolic value
    shapes = {hshape, ()}  # the shapes of h's views (and scalars)
    for e in kernel.eqns:
        shape = tuple(e.outvars[0].aval.shape) if len(e.outvars) == 1 else ()
        if e.prim.name == "reshape" and e.inputs[0] is h and shape and shape[-1] == n \
                and math.prod(shape) == size:
            shapes.add(shape)

    def of(a: Atom) -> tuple | None:
        if isinstance(a, Var):
            return form.get(a.id)
        return ("zero",) if _is_zero(a) else None

    for e in kernel.eqns:
        if len(e.outvars) != 1:
            continue
        out = e.outvars[0]
        shape = tuple(out.aval.shape)
        name, ins = e.prim.name, e.inputs
        if name == "reshape" and ins[0] is h and shape in shapes:
            form[out.id] = ("h",)
            continue
        if np.dtype(out.aval.dtype) != (np.dtype(bool) if name == "le" else f32) or shape not in shapes:
            continue
        val: tuple | None = None
        if name == "broadcast_in_dim" and shape != ():
            x = ins[0]
            dims = tuple(e.params["broadcast_dimensions"])
            if _is_zero(x) and dims == ():
                val = ("zero",)
            elif (isinstance(x, Var) and dims == (len(shape) - 1,) and tuple(x.aval.shape) == (n,)
                  and np.dtype(x.aval.dtype) == f32 and x.id not in form):
                val = ("bias", x)
        elif name == "add" and len(ins) == 2:
            x, y = of(ins[0]), of(ins[1])
            if x == ("h",) and y is not None and y[0] == "bias":
                val = ("h+b", y[1])
            elif y == ("h",) and x is not None and x[0] == "bias":
                val = ("h+b", x[1])
        elif name == "max" and len(ins) == 2:
            ops = [of(a) for a in ins]
            rest = [t for t in ops if t != ("zero",)]
            if len(rest) == 1 and rest[0] is not None and rest[0][0] in ("h", "h+b"):
                val = ("relu", rest[0])
        elif name == "le" and len(ins) == 2:  # v <= 0 (false for NaN: the select keeps v)
            x = of(ins[0])
            if x is not None and x[0] in ("h", "h+b") and of(ins[1]) == ("zero",):
                val = ("le0", x)
        elif name == "select_n" and len(ins) == 3:  # select_n(v <= 0, v, 0)
            pred, x = of(ins[0]), of(ins[1])
            if pred is not None and pred[0] == "le0" and pred[1] == x and of(ins[2]) == ("zero",):
                val = ("relu", x)
        if val is not None:
            form[out.id] = val
    return form


def _row_bias(e: Eqn) -> Var | None:
    """The ``c`` of ``gemm(a, b, c)`` with ``beta == 1`` and ``c`` a ``f32[n]`` vector broadcast
    along the rows (how the passes fold ``a @ b + bias``), else None."""
    if len(e.inputs) != 3 or e.params["beta"] != 1.0:
        return None
    c, n = e.inputs[2], e.outvars[0].aval.shape[-1]
    if (isinstance(c, Var) and tuple(c.aval.shape) == (n,) and tuple(e.params["c_dims"] or ()) == (1,)
            and np.dtype(c.aval.dtype) == np.float32):
        return c
    return None


def _full_accumulator(e: Eqn) -> bool:
    """Whether ``gemm(a, b, c)`` accumulates into a full ``f32[m, n]`` ``c`` with ``beta == 1`` (a
    residual, ``absorb_residual``): its epilogue applies after the sum."""
    c, shape = e.inputs[2], tuple(e.outvars[0].aval.shape)
    return (isinstance(c, Var) and e.params["beta"] == 1.0 and tuple(c.aval.shape) == shape
            and tuple(e.params["c_dims"] or ()) == tuple(range(len(shape)))
            and np.dtype(c.aval.dtype) == np.float32)


def _fusable_gemm(step: Step, consts: frozenset[int] = frozenset()) -> bool:
    """A 2-D float32 ``gemm`` without an accumulator (or with a row bias as its ``c``) that goes to
    the kernel (``consts``: ids of the program's constants; a constant ``B`` takes the kernel's
    prepacked entry, whose size rule is wider). Its rows may be a symbolic size (a dynamic batch or
    sequence): the kernel's row rule is then tested per call, and a call outside it runs BLAS and
    the epilogue as a loop after it (``emit/gemm.py``'s ``_epilogue_loop``)."""
    if step.kind != "gemm" or len(step.eqns) != 1:
        return False
    e: Eqn = step.eqns[0]
    out = step.outputs[0]
    if len(e.inputs) == 3 and _row_bias(e) is None and not _full_accumulator(e) \
            or e.params.get("views") is not None:
        return False
    if np.dtype(out.aval.dtype) != np.float32 or len(out.aval.shape) != 2:
        return False
    if len(e.inputs[0].aval.shape) != 2:
        return False
    ta, tb = e.params["trans_a"], e.params["trans_b"]
    ash, bsh = e.inputs[0].aval.shape, e.inputs[1].aval.shape
    m, k = (ash[1], ash[0]) if ta else (ash[0], ash[1])
    n = bsh[0] if tb else bsh[1]
    if sd.is_sym(n) or sd.is_sym(k):
        return False
    b = e.inputs[1]
    packed = isinstance(b, Var) and b.id in consts
    if gemm_kernel.kernel_symbol() is None:
        return False
    if sd.is_sym(m):  # some binding's rows go to the kernel
        return gemm_kernel.kernel_rows(n, k, packed) > 0
    return (gemm_kernel.use_prepacked if packed else gemm_kernel.use_small_sgemm)(m, n, k)


def fuse_gemm_epilogues(sched: Schedule, prepack: bool = True) -> int:
    """Fuse each ``gemm`` step whose product only feeds one elementwise kernel of the
    :func:`match_epilogue` forms into that kernel's place (in ``sched``, in place); returns the
    number fused. ``prepack``: whether products with a constant ``B`` will take the kernel's
    prepacked entry (the backend option of that name)."""
    steps = sched.steps
    max_inputs = sched.options.get("max_inputs", 16)
    out_ids = {a.id for a in sched.program.outvars if isinstance(a, Var)}
    consts = frozenset(v.id for v in sched.program.constvars) if prepack else frozenset()
    readers: dict[int, list[int]] = {}
    for s, st in enumerate(steps):
        for a in st.inputs:
            if isinstance(a, Var):
                readers.setdefault(a.id, []).append(s)
    fused = 0
    drop: set[int] = set()
    for g, st in enumerate(steps):
        if not _fusable_gemm(st, consts):
            continue
        bias0 = _row_bias(st.eqns[0])
        if bias0 is not None:  # gemm(a, b, bias): the kernel adds the bias in its store instead
            st.epilogue = GemmEpilogue(bias0, False)
            fused += 1
        h = st.outputs[0]
        users = sorted(set(readers.get(h.id, [])))
        if h.id in out_ids or not users or any(steps[u].kind != "kernel" or u in drop for u in users):
            continue
        k, epi = next(((u, e) for u in users if (e := match_epilogue(steps[u], h)) is not None), (-1, None))
        if epi is None:
            continue
        ks = steps[k]
        if bias0 is not None:  # then only a ReLU may follow
            if epi.bias is not None:
                continue
            epi = GemmEpilogue(bias0, epi.relu)
        # other readers (after the epilogue's kernel) read its output instead of recomputing it
        rebuilt = {} if len(users) == 1 else None if users[0] != k else \
            _read_epilogue_output(ks, [steps[u] for u in users[1:]], h, max_inputs)
        if rebuilt is None:
            continue
        for u in users[1:]:
            steps[u] = rebuilt[id(steps[u])]
        ins = list(st.inputs) + ([epi.bias] if epi.bias is not None and bias0 is None else [])
        steps[k] = Step(StepKind.GEMM, st.name, st.eqns + ks.eqns, ins, list(ks.outputs), epilogue=epi)
        drop.add(g)
        fused += 1
    if fused:
        sched.steps = [st for s, st in enumerate(steps) if s not in drop]
    return fused


def _read_epilogue_output(epilogue: Step, others: list[Step], h: Var,
                          max_inputs: int) -> dict[int, Step] | None:
    """The kernel steps ``others``, which read the product ``h`` only through copies of the
    epilogue kernel's equations (fusion copies a cheap producer into each consumer: a ResNet block's
    ``relu(h + b)`` feeds the next block's product and, sliced, its strided shortcut), rebuilt to read
    the epilogue's output instead (``id(step) -> step``); None when one of them does anything else
    with ``h``, or does not build. The epilogue then fuses into the product, and the others read its
    result once rather than recompute it from the product."""
    shared = {id(e) for e in epilogue.eqns}
    made = {v.id: e for e in epilogue.eqns for v in e.outvars}  # the epilogue's values
    kept = {v.id for v in epilogue.outputs}
    out: dict[int, Step] = {}
    for st in others:
        if st.ir is None or not shared <= {id(e) for e in st.eqns}:
            return None
        own = [e for e in st.eqns if id(e) not in shared]
        # the epilogue's inner values the rest reads (a broadcast zero shared by ReLUs) stay in it,
        # with what they read, unless that is the product
        need, stack = set(), [a.id for e in own for a in e.inputs if isinstance(a, Var)]
        while stack:
            vid = stack.pop()
            if vid in made and vid not in kept and id(made[vid]) not in need:
                need.add(id(made[vid]))
                stack += [a.id for a in made[vid].inputs if isinstance(a, Var)]
        rest = [e for e in st.eqns if id(e) not in shared or id(e) in need]
        if not own or any(a is h for e in rest for a in e.inputs):
            return None
        try:
            ir = build_kernel(rest, st.ir.domain, st.ir.n_outer, st.outputs, max_inputs, split=True)
        except Unfusable:
            return None
        out[id(st)] = Step(StepKind.KERNEL, st.name, rest, list(ir.inputs), list(st.outputs), ir)
    return out
