"""JAX's own tutorials (``docs/*.md`` of jax-ml/jax; their code cells in ``tests/x32/jax_docs``) run
with only the imports changed from ``jax`` to ``ember``, and compared with JAX run on the same cells
in the same process: after every cell, each variable both runs defined that holds numbers (arrays,
scalars, containers of them) must agree, and a cell the tutorial shows raising must raise in both.
IPython magics (``%timeit``) are left out of both runs."""

from __future__ import annotations

import contextlib
import io
import re

import numpy as np
import pytest

from tests.x32.jax_docs import (
    automatic_differentiation,
    control_flow,
    pytrees,
    random_numbers,
    stateful_computations,
)

jax = pytest.importorskip("jax", reason="JAX is the reference")

TUTORIALS = {"random-numbers": random_numbers.CELLS, "pytrees": pytrees.CELLS,
             "control-flow": control_flow.CELLS, "automatic-differentiation": automatic_differentiation.CELLS,
             "stateful-computations": stateful_computations.CELLS}


# finite differences of float32 losses with a 1e-4 step: quotients of rounding-level differences
LOOSE = {("automatic-differentiation", "W_grad_numerical"): 2e-2,
         ("automatic-differentiation", "b_grad_numerical"): 2e-2}


def to_ember(code: str) -> str:
    """``code`` with its imports of ``jax`` changed to imports of ``ember`` (nothing else)."""
    code = re.sub(r"^(\s*)import jax\s*$", r"\1import ember as jax", code, flags=re.M)
    code = re.sub(r"^(\s*)import jax\.(\S+) as", r"\1import ember.\2 as", code, flags=re.M)
    return re.sub(r"^(\s*)from jax(\.\S+)? import", r"\1from ember\2 import", code, flags=re.M)


def _source(code: str) -> str:
    lines = code.split("\n")
    return "\n".join("pass  # (magic)" if ln.lstrip().startswith(("%", "!")) else ln for ln in lines)


def _numbers(v, depth=0):
    """``v`` as a list of NumPy arrays when it is numbers (an array, a scalar, a list/tuple/dict of
    them), else None."""
    if depth > 3:
        return None
    if isinstance(v, (bool, int, float, complex, np.ndarray, np.generic)) or hasattr(v, "__array__") and \
            hasattr(v, "shape") and hasattr(v, "dtype"):
        try:
            a = np.asarray(v)
        except Exception:  # a key array, an abstract value: not numbers
            return None
        return [a] if a.dtype.kind in "biufc" else None
    if isinstance(v, (list, tuple)) and v:
        parts = [_numbers(x, depth + 1) for x in v]
        return None if any(p is None for p in parts) else [a for p in parts for a in p]
    if isinstance(v, dict) and v:
        parts = [_numbers(v[k], depth + 1) for k in sorted(v, key=str)]
        return None if any(p is None for p in parts) else [a for p in parts for a in p]
    return None


def _run(cells, convert):
    """Run the cells one at a time (a generator: the two runs alternate), each run with NumPy's
    global random state of its own, seeded alike (tutorials draw data with ``np.random``)."""
    ns: dict = {"__name__": "__tutorial__"}
    np.random.seed(0)
    state = np.random.get_state()
    for code, raises in cells:
        err = None
        np.random.set_state(state)
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                exec(compile(_source(convert(code)), "<cell>", "exec"), ns)  # noqa: S102 - a tutorial cell
            except Exception as e:  # compared below: a cell shown raising must raise
                err = e
        state = np.random.get_state()
        yield code, raises, err, ns


@pytest.mark.parametrize("name", sorted(TUTORIALS))
def test_tutorial_runs_like_jax(name):
    cells = TUTORIALS[name]
    ours, theirs = _run(cells, to_ember), _run(cells, lambda c: c)
    for i, ((code, raises, err, ns), (_, _, jerr, jns)) in enumerate(zip(ours, theirs)):
        where = f"{name} cell {i}:\n{code}"
        if raises:
            assert jerr is not None and err is not None, where
            continue
        if isinstance(jerr, ModuleNotFoundError) and isinstance(err, ModuleNotFoundError):
            continue  # a plotting cell: matplotlib is not a test dependency
        assert jerr is None, f"JAX failed: {jerr!r}\n{where}"
        assert err is None, f"{err!r}\n{where}"
        for k in sorted(set(ns) & set(jns)):
            if k.startswith("_"):
                continue
            a, b = _numbers(ns[k]), _numbers(jns[k])
            if a is None or b is None:
                continue
            assert len(a) == len(b), f"{k}: {len(a)} arrays, JAX {len(b)}\n{where}"
            for x, y in zip(a, b):
                assert x.shape == y.shape, f"{k}: shape {x.shape}, JAX {y.shape}\n{where}"
                np.testing.assert_allclose(x.astype(np.result_type(x, np.float64)), y.astype(
                    np.result_type(y, np.float64)), rtol=LOOSE.get((name, k), 2e-5), atol=1e-6,
                    err_msg=f"{k}\n{where}")
