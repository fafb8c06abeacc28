"""Minimizing a failing fuzz case: candidate simpler cases (fewer layers, outputs, ops, smaller
arguments, no dynamic axes or edge values) are tried while the case still fails the same way.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable, Iterator

import numpy as np

from ember._src.fuzz_cases import Case, Layer, Op
from ember._src.fuzz_check import Finding
from ember._src.fuzz_workers import Pool

# -- minimizer ----------------------------------------------------------------------------------

def _shrinks(case: Case) -> Iterator[Case]:
    """Candidate simpler cases: fewer layers, fewer outputs, fewer ops (a use of the dropped op
    reads one of its operands instead), smaller arguments, no dynamic axes, no edge values."""
    if case.dynamic is not None:
        yield dataclasses.replace(case, dynamic=None)
    for j in range(len(case.layers) - 1, -1, -1):
        yield _drop_layer(case, j)
    if len(case.outs) > 1:
        yield dataclasses.replace(case, outs=case.outs[:1])
    for k in range(len(case.ops)):
        op = case.ops[k]
        for repl in dict.fromkeys(op.args):
            yield _drop_op(case, k, repl)
    used = {a for op in case.ops for a in op.args} | set(case.outs)
    for i in range(case.nargs - 1, -1, -1):
        if f"x{i}" not in used and case.nargs > 1 and all(la.argnum != i for la in case.layers):
            yield _drop_arg(case, i)
    for i, a in enumerate(case.args):
        for ax in range(a.ndim):
            if a.shape[ax] > 1:
                for sl in (slice(0, 1), slice(0, a.shape[ax] - 1), slice(1, None)):
                    yield _replace_arg(case, i, np.take(a, np.arange(a.shape[ax])[sl], axis=ax))
        if a.size > 1 and case.mode != "bool":
            flat = a.ravel()
            for j in range(flat.size):
                simple = np.zeros((), a.dtype) + (1 if a.dtype.kind != "b" else True)
                if flat[j] != simple:
                    b = flat.copy()
                    b[j] = simple
                    yield _replace_arg(case, i, b.reshape(a.shape))


def _drop_arg(case: Case, i: int) -> Case:
    def sub(name: str) -> str:
        m = re.fullmatch(r"x(\d+)", name)
        return f"x{int(m.group(1)) - 1}" if m and int(m.group(1)) > i else name

    ops = [dataclasses.replace(op, args=tuple(sub(a) for a in op.args)) for op in case.ops]
    layers = [dataclasses.replace(la, argnum=la.argnum - (la.argnum > i),
                                  in_axes=None if la.in_axes is None else la.in_axes[:i] + la.in_axes[i + 1:])
              for la in case.layers]
    dyn = None if case.dynamic is None else case.dynamic[:i] + case.dynamic[i + 1:]
    return dataclasses.replace(case, nargs=case.nargs - 1, ops=ops, outs=[sub(o) for o in case.outs],
                               layers=layers, args=case.args[:i] + case.args[i + 1:], dynamic=dyn)


def _replace_arg(case: Case, i: int, a: np.ndarray) -> Case:
    args = list(case.args)
    args[i] = a
    return dataclasses.replace(case, args=args)


def _drop_op(case: Case, k: int, repl: str) -> Case:
    def sub(name: str) -> str:
        if name == f"v{k}":
            return repl
        m = re.fullmatch(r"v(\d+)", name)
        return f"v{int(m.group(1)) - 1}" if m and int(m.group(1)) > k else name

    ops = [dataclasses.replace(op, args=tuple(sub(a) for a in op.args))
           for j, op in enumerate(case.ops) if j != k]
    outs = list(dict.fromkeys(sub(o) for o in case.outs))
    if not ops:
        ops, outs = [Op("neg", (outs[0],))], ["v0"]
    return dataclasses.replace(case, ops=ops, outs=outs)


def _drop_layer(case: Case, j: int) -> Case:
    la = case.layers[j]
    args = list(case.args)
    if la.kind in ("vmap", "scan"):
        # the axis the layer added: follow each argument's dims through the stack
        for i in range(case.nargs):
            labels = ["base"] * (args[i].ndim - sum(_adds(x, i) for x in case.layers))
            for jj, x in enumerate(case.layers):
                if _adds(x, i):
                    ax = 0 if x.kind == "scan" else x.in_axes[i]
                    labels.insert(ax if ax >= 0 else len(labels) + 1 + ax, jj)
            if j in labels:
                args[i] = np.take(args[i], 0, axis=labels.index(j))
    dyn = case.dynamic
    if dyn is not None:
        dyn = tuple(d if (a.ndim and d is not None) else None for d, a in zip(dyn, args))
    return dataclasses.replace(case, layers=case.layers[:j] + case.layers[j + 1:], args=args, dynamic=dyn)


def _adds(la: Layer, i: int) -> bool:
    return la.kind == "scan" or (la.kind == "vmap" and la.in_axes[i] is not None)


def minimize(case: Case, still_fails: Callable[[Case], bool], budget: int = 200,
             seconds: float = 300.0) -> Case:
    """Greedy shrinking: take the first candidate that still fails, repeat until none does (or
    ``budget`` candidates have been tried, or ``seconds`` have passed)."""
    tried = 0
    progress = True
    end = time.monotonic() + seconds
    while progress and tried < budget:
        progress = False
        for cand in _shrinks(case):
            tried += 1
            if tried > budget or time.monotonic() > end:
                tried = budget
                break
            try:
                ok = still_fails(cand)
            except Exception:  # noqa: BLE001 -- a candidate that does not build is no smaller repro
                ok = False
            if ok:
                case, progress = cand, True
                break
    return case


def same_failure(pool: Pool, finding: Finding) -> Callable[[Case], bool]:
    """A predicate for :func:`minimize`: the candidate fails the same way (same kind; for a
    mismatch the same pair of paths; for a crash the same stage)."""
    head = finding.detail.split(":")[0]

    def check(c: Case) -> bool:
        (_, res), = list(pool.map([c]))
        if res is not None and res[0] == finding.kind and res[1].split(":")[0] == head:
            check.detail = res[1]  # type: ignore[attr-defined]
            return True
        return False

    check.detail = finding.detail  # type: ignore[attr-defined]

    return check
