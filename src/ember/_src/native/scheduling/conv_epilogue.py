"""Schedule rule: fuse a bias add and ReLU that follow a convolution into the convolution's stores.

After batch-norm folding (``fold_batch_norm``) a CNN's convolution is followed by one elementwise
kernel, ``max(conv + b, 0)`` (or the bias alone, or with torch's ``select_n(v <= 0, v, 0)``), which
reads the whole output once more. When the convolution's lowering applies such an epilogue itself
(the op-info registry's ``CallLowering.epilogue``: the convolution's tiles add the bias and apply the
ReLU in registers before they are stored, ``csrc/conv.h``'s ``em_cv_epi``), that second pass
disappears. :func:`fuse_conv_epilogues` rewrites such a pair into one call step carrying a
:class:`~.gemm_epilogue.GemmEpilogue` (the forms are :func:`~.gemm_epilogue.match_epilogue`'s, with
the bias along the output's last axis: features last, as the ``channels_last`` pass leaves a CNN);
its outputs are the kernel's, its inputs the convolution's plus the bias. Static programs only.
"""

from __future__ import annotations

from ember._src.native import opinfo
from ember._src.native.scheduling.gemm_epilogue import match_epilogue
from ember._src.native.scheduling.schedule import Schedule, Step, StepKind
from ember._src.program import Var

__all__ = ["fuse_conv_epilogues"]


def _features_last(st: Step) -> bool:
    e = st.eqns[0]
    out = e.params.get("dimension_numbers", (None, None, None))[2]
    return out is not None and out[1] == len(e.outvars[0].aval.shape) - 1


def fuse_conv_epilogues(sched: Schedule) -> int:
    """Fuse each call step whose lowering takes an epilogue, and whose one output only feeds one
    elementwise kernel of the epilogue forms, into that kernel's place (in ``sched``, in place);
    returns the number fused."""
    steps = sched.steps
    out_ids = {a.id for a in sched.program.outvars if isinstance(a, Var)}
    readers: dict[int, set[int]] = {}
    for s, st in enumerate(steps):
        for a in st.inputs:
            if isinstance(a, Var):
                readers.setdefault(a.id, set()).add(s)
    drop: set[int] = set()
    for s, st in enumerate(steps):
        if st.kind != StepKind.CALL or len(st.eqns) != 1 or len(st.eqns[0].outvars) != 1:
            continue
        e = st.eqns[0]
        low = opinfo.call_lowering(e.prim)
        if low is None or e.prim.name != "conv" or not _features_last(st) or not low.epilogue(e):
            continue
        h = e.outvars[0]
        users = readers.get(h.id, set())
        if h.id in out_ids or len(users) != 1:
            continue
        k = next(iter(users))
        ks = steps[k]
        if ks.kind != StepKind.KERNEL or k in drop:
            continue
        epi = match_epilogue(ks, h)
        if epi is None:
            continue
        ins = list(st.inputs) + ([epi.bias] if epi.bias is not None else [])
        steps[k] = Step(StepKind.CALL, st.name, st.eqns + ks.eqns, ins, list(ks.outputs), epilogue=epi)
        drop.add(s)
    if drop:
        sched.steps = [st for s, st in enumerate(steps) if s not in drop]
    return len(drop)
