"""Shared helpers of the control-flow tests."""

from __future__ import annotations

from typing import Any

import numpy as np

from ember._src.program import Program, validate


def validate_all(p: Program) -> int:
    """Validate ``p`` and every sub-program in its params, recursively; returns how many."""
    validate(p)
    n = 1
    for e in p.eqns:
        for v in e.params.values():
            subs = [v] if isinstance(v, Program) else list(v) if isinstance(v, tuple) and v and \
                isinstance(v[0], Program) else []
            for s in subs:
                n += validate_all(s)
    return n


def prims(p: Program, name: str) -> list:
    """Every equation of primitive ``name`` in ``p`` and its sub-programs."""
    out = []
    for e in p.eqns:
        if e.prim.name == name:
            out.append(e)
        for v in e.params.values():
            subs = [v] if isinstance(v, Program) else list(v) if isinstance(v, tuple) and v and \
                isinstance(v[0], Program) else []
            for s in subs:
                out += prims(s, name)
    return out


def tree_allclose(a: Any, b: Any, **kw: Any) -> None:
    import ember
    la, lb = ember.tree.leaves(a), ember.tree.leaves(b)
    assert len(la) == len(lb), (a, b)
    for x, y in zip(la, lb):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), **kw)
