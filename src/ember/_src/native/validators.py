"""The native backend's ``"planned"`` validators (arena overlap, alignment, lowerings), registered
with :func:`ember._src.validation.validator` when the backend is imported: the validation registry
sits below the backends and imports none of them."""

from __future__ import annotations

from typing import Any

from ember._src.native.plan.planner import ALIGN
from ember._src.validation import Finding, validator
from ember.errors import ValidationError

# ---------------------------------------------------------------------------------------------
# Plan validators
# ---------------------------------------------------------------------------------------------


@validator("planned", "arena_overlap", expensive=True)
def _arena_overlap(obj: Any) -> list[Finding]:
    """No two simultaneously live arena buffers share bytes, peak <= sum: ``MemoryPlan.check``."""
    try:
        obj.plan.check()
    except ValidationError as err:
        return [Finding("error", "planned", "arena_overlap", str(err))]
    return []


@validator("planned", "alignment")
def _alignment(obj: Any) -> list[Finding]:
    """Every arena buffer has a 64-byte aligned offset inside the arena."""
    plan = obj.plan
    out: list[Finding] = []
    for b in plan.buffers:
        if not b.in_arena or not isinstance(b.offset, int) or not isinstance(b.nbytes, int) or b.nbytes == 0:
            continue
        if b.offset < 0 or b.offset % ALIGN:
            out.append(Finding("error", "planned", "alignment",
                                f"buffer b{b.id} has unaligned offset {b.offset}"))
        elif b.offset + b.nbytes > plan.arena_bytes:
            out.append(Finding("error", "planned", "alignment", f"buffer b{b.id} ends past the arena "
                                f"({b.offset} + {b.nbytes} > {plan.arena_bytes})"))
    return out


_LOWERED_KINDS = {"kernel", "gemm", "call", "alias", "loop", "cond"}


@validator("planned", "lowerings")
def _lowerings(obj: Any) -> list[Finding]:
    """Every step has a native lowering; a fallback step (Python callback) is a warning naming its
    primitive (not for an effectful one: a debug callback calls Python by design), an unknown step
    kind or a kernel without IR an error."""
    out: list[Finding] = []
    for st in obj.schedule.steps:
        if st.kind == "fallback":
            if st.eqns[0].prim.effectful:
                continue
            out.append(Finding("warning", "planned", "lowerings", f"step {st.name} runs "
                                f"{st.eqns[0].prim.name} through the Python fallback (no native lowering)"))
        elif st.kind not in _LOWERED_KINDS:
            out.append(Finding("error", "planned", "lowerings",
                                f"step {st.name} has unknown kind {st.kind!r}"))
        elif st.kind == "kernel" and getattr(st, "ir", True) is None:
            out.append(Finding("error", "planned", "lowerings", f"kernel step {st.name} has no kernel IR"))
    return out
