"""``ember.numpy`` refuses Python lists where ``jax.numpy`` does (JAX's ``check_arraylike``):
the same functions raise ``TypeError`` for a list in the same argument, and accept arrays, NumPy
arrays and scalars with JAX's results. JAX, imported in the same run, is the reference."""

from __future__ import annotations

import numpy as np
import pytest

import ember.numpy as enp
from ember._src.numpy import arraylike

jax = pytest.importorskip("jax", reason="JAX is the reference")
jnp = pytest.importorskip("jax.numpy", reason="JAX is the reference")

V = [0.5, 1.5, 2.5]
A = np.asarray(V, np.float32)
# (name, arguments with arrays, the position to replace by a list); a representative set over the
# ufuncs, reductions, statistics, manipulation, searching, sets, polynomials and linear algebra
CASES = [
    ("sin", (A,), 0), ("exp", (A,), 0), ("sqrt", (A,), 0), ("isnan", (A,), 0), ("round", (A,), 0),
    ("add", (A, A), 1), ("multiply", (A, A), 0), ("power", (A, A), 1), ("maximum", (A, A), 0),
    ("arctan2", (A, A), 1), ("equal", (A, A), 0), ("logical_and", (A > 1, A > 2), 1),
    ("sum", (A,), 0), ("mean", (A,), 0), ("max", (A,), 0), ("argmax", (A,), 0), ("std", (A,), 0),
    ("cumsum", (A,), 0), ("median", (A,), 0), ("quantile", (A, np.float32(0.5)), 0),
    ("reshape", (A, (3, 1)), 0), ("transpose", (A,), 0), ("flip", (A,), 0), ("sort", (A,), 0),
    ("ravel", (A,), 0), ("diff", (A,), 0), ("where", (A > 1, A, A), 1), ("clip", (A, 1.0, 2.0), 0),
    ("dot", (A, A), 1), ("matmul", (A, A), 0), ("outer", (A, A), 0), ("take", (A, np.arange(2)), 1),
    ("searchsorted", (A, A), 1), ("unique", (A,), 0), ("isin", (A, A), 1), ("polyval", (A, A), 0),
    ("zeros_like", (A,), 0), ("full_like", (A, 2.0), 0), ("full", ((3,), A), 1), ("diag", (A,), 0),
    ("interp", (A, A, A), 2), ("atleast_2d", (A, A), 1), ("broadcast_arrays", (A, A), 0),
]


def _raises_type_error(fn, args) -> bool:
    try:
        fn(*args)
    except TypeError:
        return True
    return False


@pytest.mark.parametrize("name,args,pos", CASES, ids=[c[0] for c in CASES])
def test_list_refused_where_jax_refuses_it(name, args, pos):
    listed = list(args)
    listed[pos] = [float(v) for v in np.ravel(args[pos])] if np.ndim(args[pos]) else [args[pos]]
    assert _raises_type_error(getattr(jnp, name), listed)  # the reference refuses it ...
    with pytest.raises(TypeError, match="requires ndarray or scalar arguments"):
        getattr(enp, name)(*listed)  # ... and so does ember
    want, got = getattr(jnp, name)(*args), getattr(enp, name)(*args)  # arrays are fine in both
    for w, g in zip(jax.tree_util.tree_leaves(want), jax.tree_util.tree_leaves(tuple(got) if isinstance(
            got, (tuple, list)) else got)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-6)


def test_sequences_of_arrays_accepted_nested_lists_refused():
    for name in ("concatenate", "stack", "vstack", "hstack"):
        want = getattr(jnp, name)([A, A])
        np.testing.assert_array_equal(np.asarray(getattr(enp, name)([A, A])), np.asarray(want))
        np.testing.assert_array_equal(np.asarray(getattr(enp, name)((A, A))), np.asarray(want))
        assert _raises_type_error(getattr(jnp, name), ([V, V],))
        with pytest.raises(TypeError):
            getattr(enp, name)([V, V])


def test_scalars_and_numpy_arrays_accepted_where_jax_accepts_them():
    for name, args in [("sin", (0.5,)), ("add", (1, 2.5)), ("sum", (np.float32(3),)), ("add", (A, 1))]:
        np.testing.assert_allclose(np.asarray(getattr(enp, name)(*args)),
                                   np.asarray(getattr(jnp, name)(*args)), rtol=1e-6)


def test_array_creation_still_takes_lists():
    for name in ("array", "asarray"):
        np.testing.assert_array_equal(np.asarray(getattr(enp, name)(V)), np.asarray(getattr(jnp, name)(V)))


def test_every_function_checked_at_its_first_argument_refuses_a_list_there():
    # the table (arraylike.POSITIONS) was read off JAX: each of these raised JAX's TypeError
    for name, positions in arraylike.POSITIONS.items():
        if positions[0] != 0:
            continue
        fn = getattr(enp, name)
        with pytest.raises(TypeError, match="requires ndarray"):
            fn(V)
