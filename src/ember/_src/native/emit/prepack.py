"""Constant operands packed once per program: a call step whose kernel operand is a program
constant packs it on the first call into a buffer that lives as long as the program (a derived
constant, :attr:`.calls.CallCode.keep`) instead of into the call's workspace on every call; the C
side is ``csrc/prepack.h``. Used by the convolution emitters (:mod:`.conv`, :mod:`.conv_winograd`)."""

from __future__ import annotations

import numpy as np

from ember._src.native.csrc import load
from ember._src.native.emit.calls import CallCode


def prepacked(cc: CallCode, elt: str, ws: str, nbytes: int) -> tuple[list[str], bool]:
    """C lines declaring ``wp_``, where a convolution's packing pass writes its kernel, and whether
    that buffer is kept: when the kernel operand is a finite program constant (``cc.const_ins[1]``)
    it is packed once into a buffer that lives as long as the program (``csrc/prepack.h``: the
    lines also declare ``pst_``, the buffer's state, and ``pcl_``, this call's claim, by which the
    packing pass is skipped or followed by ``em_prepack_done``); else ``wp_`` is the workspace
    ``ws``. A non-finite constant kernel is packed per call, where the packing notes it."""
    const = cc.const_ins[1] if len(cc.const_ins) > 1 else None
    if cc.keep is None or const is None or nbytes <= 0 \
            or not np.isfinite(np.asarray(getattr(const, "value", const))).all():
        return [f"{elt} *wp_ = {ws};"], False
    cc.helper("em_prepack", load("prepack.h"))
    kept = cc.keep(64 + 63 + nbytes)
    return [f"int64_t *pst_ = (int64_t *){kept}; const int pcl_ = em_prepack_claim(pst_);",
            f"{elt} *wp_ = pcl_ >= 0 ? ({elt} *)em_prepack_data({kept}) : {ws};"], True
