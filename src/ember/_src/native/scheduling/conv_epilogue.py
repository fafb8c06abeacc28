"""Schedule rule: fuse a bias add and ReLU that follow a convolution into the convolution's stores.

After batch-norm folding (``fold_batch_norm``) a CNN's convolution is followed by one elementwise
kernel, ``max(conv + b, 0)`` (or the bias alone, or with torch's ``select_n(v <= 0, v, 0)``), which
reads the whole output once more. When the convolution's lowering applies such an epilogue itself
(the op-info registry's ``CallLowering.epilogue``: the convolution's tiles add the bias and apply the
ReLU in registers before they are stored, ``csrc/conv.h``'s ``em_cv_epi``), that second pass
disappears. :func:`fuse_conv_epilogues` rewrites such a pair into one call step carrying a
:class:`~.gemm_epilogue.GemmEpilogue` (the forms are :func:`~.gemm_epilogue.match_epilogue`'s, with
the bias along the output's last axis: features last, as the ``channels_last`` pass leaves a CNN);
its outputs are the kernel's, its inputs the convolution's plus the bias. Sizes may be symbolic
(named dynamic axes) where the feature count is static.
"""

from __future__ import annotations

from ember._src.native import opinfo
from ember._src.native.scheduling.gemm_epilogue import GemmEpilogue, match_epilogue, split_epilogue
from ember._src.native.scheduling.kernel import Unfusable, build_kernel
from ember._src.native.scheduling.schedule import Schedule, Step, StepKind
from ember._src.program import Var

__all__ = ["fuse_conv_epilogues"]


def _features_last(st: Step) -> bool:
    e = st.eqns[0]
    out = e.params.get("dimension_numbers", (None, None, None))[2]
    return out is not None and out[1] == len(e.outvars[0].aval.shape) - 1


def fuse_conv_epilogues(sched: Schedule) -> int:
    """Fuse each call step whose lowering takes an epilogue, and whose one output only feeds one
    elementwise kernel of the epilogue forms, into that kernel's place (in ``sched``, in place); a
    kernel that applies the epilogue and then more (:func:`~.gemm_epilogue.split_epilogue`) gives the
    epilogue to the step and is rebuilt to read its result. A step with a bias alone may take a
    following ReLU too (a bias add and a ReLU in two kernels: a ResNet stem's, whose ReLU shares a
    kernel with the max pool's padding). Returns the number fused."""
    steps = sched.steps
    out_ids = {a.id for a in sched.program.outvars if isinstance(a, Var)}
    readers: dict[int, set[int]] = {}
    for s, st in enumerate(steps):
        for a in st.inputs:
            if isinstance(a, Var):
                readers.setdefault(a.id, set()).add(s)
    drop: set[int] = set()
    fused = 0
    max_inputs = sched.options.get("max_inputs", 16)
    for s in range(len(steps)):
        st = steps[s]
        if (st.kind != StepKind.CALL or len(st.outputs) != 1 or not st.eqns
                or st.eqns[0].prim.name != "conv"):
            continue
        e = st.eqns[0]
        low = opinfo.call_lowering(e.prim)
        before = st.epilogue
        if low is None or not _features_last(st) or not low.epilogue(e) or before is not None and before.relu:
            continue
        h = st.outputs[0]
        users = readers.get(h.id, set())
        if h.id in out_ids or len(users) != 1:
            continue
        k = next(iter(users))
        ks = steps[k]
        if ks.kind != StepKind.KERNEL or k in drop or k < s:
            continue
        epi = match_epilogue(ks, h)
        split = None if epi is not None else split_epilogue(ks, h)
        if split is not None:
            epi = split[0]
        if epi is None or before is not None and epi.bias is not None:
            continue
        bias = before.bias if before is not None else epi.bias
        ins = list(st.inputs) + ([epi.bias] if epi.bias is not None else [])
        if split is None:
            steps[k] = Step(StepKind.CALL, st.name, st.eqns + ks.eqns, ins, list(ks.outputs),
                            epilogue=GemmEpilogue(bias, epi.relu))
            drop.add(s)
            fused += 1
            continue
        # the kernel applies the epilogue and then more (a ResNet stem's ReLU and the max pool's
        # padding): the epilogue goes into the convolution, the rest reads its result
        _, y, rest = split
        if ks.ir is None:
            continue
        try:
            ir = build_kernel(rest, ks.ir.domain, ks.ir.n_outer, ks.outputs, max_inputs, split=True)
        except Unfusable:
            continue
        kept = [q for q in ks.eqns if q not in rest]
        steps[s] = Step(StepKind.CALL, st.name, st.eqns + kept, ins, [y],
                        epilogue=GemmEpilogue(bias, epi.relu))
        steps[k] = Step(StepKind.KERNEL, ks.name, rest, list(ir.inputs), list(ks.outputs), ir)
        readers.setdefault(y.id, set()).add(k)
        fused += 1
    if drop:
        sched.steps = [st for s, st in enumerate(steps) if s not in drop]
    return fused
