"""Kernels with bounds-checked reads, and their unchecked twins.

A kernel over symbolic sizes may read an operand that is empty for some bindings: a concatenate
piece, a padded operand, the operand of a ``take`` with ``mode="fill"``
(``scheduling/kernel.py``'s ``_Builder.checked_value``). Its index is clamped into the
operand's range, which is empty then, so each such load tests its offset against the buffer's
size (``(uint64_t)off < size ? p[off] : 0``). GCC does not vectorize a loop of such conditional
loads well: a dynamic-size ResNet's max pool, which reads its input's padding, took 7 ms
where the static one takes 0.2 ms.

So such a kernel is emitted twice: a twin ``<name>_u`` whose loads are plain, and the checked
kernel, which first tests whether every operand read through a checked load
(``KernelIR.nonempty``) has elements for this binding and, if so, calls the twin and returns.
With every such operand non-empty, every clamp lands inside its operand, so the plain reads are
in bounds; the checked body runs only for bindings that empty one of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ember._src.native.base import symdims as sd

if TYPE_CHECKING:
    from ember._src.native.emit.kernels import KernelEmitter
    from ember._src.native.scheduling.kernel import KernelIR


def nonempty_sizes(ir: KernelIR) -> list[Any]:
    """The symbolic element counts that must all be > 0 for ``ir``'s loads to need no bounds test
    (those of its split parts included); static sizes are left out (a static 0 is never read)."""
    found: dict[str, Any] = {}
    for x in (ir, *(ir.parts or ())):
        for n in x.nonempty:
            if sd.is_sym(n):
                found.setdefault(str(n), n)
    return list(found.values())


def emit_with_twin(em: KernelEmitter, make_twin: Any) -> tuple[str, str]:
    """``em``'s C function and call. Where ``em`` has checked loads the function text also holds
    the unchecked twin (first), and the checked function starts by calling it when no checked
    operand is empty. ``make_twin()`` builds a like emitter whose loads are unchecked."""
    sizes = nonempty_sizes(em.ir)
    if em.unchecked or not sizes:
        return em.emit_body()
    twin = make_twin()
    twin.fname = em.fname + "_u"
    twin_fn, twin_call = twin.emit_body()
    cond = " && ".join(f"({sd.cdim(n)}) > 0" for n in sizes)
    # the twin's call passes the same names as em's own parameters (buffers are named by id)
    em.twin_guard = f"if ({cond}) {{ {twin.fname}({twin.call_args()}); return; }}"
    fn, call = em.emit_body()
    if set(twin.params.values()) - set(em.params.values()):
        raise AssertionError(f"{em.fname}: the unchecked twin reads buffers the kernel does not")
    return twin_fn + fn, call
