"""The ``check_index`` primitive (prims/indexing.py): the indices unchanged, or an ``IndexError``
naming the first bad index and the bound; natively a call step that reports a failure through the
fallback callback, at the top level and inside a compiled loop body."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember._src.prims.indexing import check_index
from tests.native.conftest import requires_cc

pytestmark = requires_cc


def _gather(w, i):
    return jnp.take(w, check_index(i, w.shape[0], "rows of w"), axis=0)


W = np.arange(12.0, dtype=np.float32).reshape(4, 3)


def test_in_range_indices_pass_through_natively():
    f = ember.jit(_gather)
    i = np.array([3, 0, 2], np.int32)
    np.testing.assert_array_equal(np.asarray(f(W, i)), W[i])
    exe = f.lower(W, i).executable
    assert exe.schedule.count("fallback") == 0, str(exe.schedule)
    assert any(st.kind == "call" and st.eqns[0].prim.name == "check_index" for st in exe.schedule.steps)


@pytest.mark.parametrize("bad, text", [(4, "index 4 (at [1] of the index)"), (-1, "index -1 (at [1]")])
def test_out_of_range_raises_and_the_program_recovers(bad, text):
    f = ember.jit(_gather)
    for _ in range(2):  # the second call goes through the C dispatcher
        with pytest.raises(IndexError, match=r"rows of w: " + text.replace("[", r"\[").replace("(", r"\(")
                           .replace(")", r"\)") + r".* size 4 \(valid: 0 <= index < 4\)"):
            f(W, np.array([0, bad, 1], np.int32))
        np.testing.assert_array_equal(np.asarray(f(W, np.array([1, 1], np.int32))), W[[1, 1]])


def test_negative_mode_and_unsigned_indices():
    g = ember.jit(lambda i: check_index(i, 4, "t", negative=True))
    np.testing.assert_array_equal(np.asarray(g(np.array([-4, 3], np.int64))), [-4, 3])
    with pytest.raises(IndexError, match=r"index -5 .*valid: -4 <= index < 4"):
        g(np.array([-5, 3], np.int64))
    u = ember.jit(lambda i: check_index(i, 4, "u"))
    with pytest.raises(IndexError, match="index 7"):
        u(np.array([1, 7], np.uint8))


def test_inside_a_compiled_loop_body():
    """The body's step sets the callback-failure flag; the loop step returns the error."""
    def f(w, idx):
        def body(carry, i):
            return carry + jnp.sum(_gather(w, i[None])), None
        return lax.scan(body, jnp.float32(0), idx)[0]

    jf = ember.jit(f)
    np.testing.assert_allclose(float(jf(W, np.array([0, 3, 1], np.int32))), W[[0, 3, 1]].sum())
    with pytest.raises(IndexError, match="index 9"):
        jf(W, np.array([0, 9, 1], np.int32))


def test_eager_vmap_and_grad():
    with pytest.raises(IndexError, match="index 4"):
        _gather(W, np.array([4], np.int32))
    out = ember.vmap(_gather, in_axes=(None, 0))(W, np.array([[0, 1], [2, 3]], np.int32))
    np.testing.assert_array_equal(np.asarray(out), W[[[0, 1], [2, 3]]])
    g = ember.grad(lambda w: jnp.sum(_gather(w, np.array([1, 1, 2], np.int32))))(W)
    want = np.zeros_like(W)
    want[1] = 2
    want[2] = 1
    np.testing.assert_array_equal(np.asarray(g), want)
