"""Each pass on small programs: the rewrite happens, the program validates, and it computes the
same values as before (reference executor)."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember._src.native.rewrite import passes
from ember._src.native.rewrite.fused import gemm, gemm_p
from ember._src.program import Program, run_numpy, validate

RNG = np.random.default_rng(0)
X = RNG.standard_normal((4, 8)).astype(np.float32)
W = RNG.standard_normal((16, 8)).astype(np.float32)
B = RNG.standard_normal(16).astype(np.float32)


def prims(p: Program) -> list[str]:
    return [e.prim.name for e in p.eqns]


def consts(p: Program) -> list[np.ndarray]:
    return [np.asarray(getattr(c, "value", c)) for c in p.consts]


def same_values(p: Program, q: Program, *args: np.ndarray, rtol: float = 1e-5) -> None:
    validate(q)
    for a, b in zip(run_numpy(p, consts(p), list(args)), run_numpy(q, consts(q), list(args))):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-6)


def prog(f, *args) -> Program:
    return ember.make_program(f)(*args)


def test_simplify_identities():
    def f(x):
        y = x * 1.0 + 0.0 - 0.0
        y = y / 1.0
        z = lax.neg(lax.neg(y))
        c = lax.convert_element_type(z, np.float32)
        return lax.reshape(lax.reshape(c, (32,)), (4, 8)), lax.transpose(lax.transpose(x, (1, 0)), (1, 0))

    p = prog(f, X)
    q = passes.simplify(p)
    q = passes.dce(q)
    assert prims(q) == [] and q.outvars[0] is q.invars[0] and q.outvars[1] is q.invars[0]
    same_values(p, q, X)


def test_simplify_keeps_complex_products_and_quotients_by_one():
    """x * (1+0j) and x / (1+0j) spread a NaN part to both parts in NumPy (jnp.mean of one complex
    value divides by 1); simplify keeps them, and the native result is NumPy's."""
    z = np.array([complex(np.nan, -1.31), complex(np.inf, 2.0), complex(1.5, -0.5)], np.complex64)

    def f(x):
        return x / np.complex64(1), x * np.complex64(1), jnp.mean(x[:, None], axis=-1), x + 0

    q = passes.simplify(prog(f, z))
    assert prims(q).count("div") == 2 and prims(q).count("mul") == 1
    with np.errstate(all="ignore"):
        want = (z / np.complex64(1), z * np.complex64(1), z / np.complex64(1), z)
    for got, w in zip(ember.jit(f)(z), want):
        np.testing.assert_array_equal(np.asarray(got), w)


def test_simplify_splats_and_movement():
    def f(x):
        two = lax.broadcast_in_dim(np.float32(2.0), (4, 8), ())
        s = lax.exp(two) * lax.broadcast_in_dim(np.float32(3.0), (4, 8), ())  # folds to one splat
        t = lax.transpose(lax.reshape(x, (4, 1, 8)), (1, 0, 2))  # moves only a unit dim: a reshape
        return x + s, t, lax.squeeze(lax.reshape(x, (1, 4, 8)), (0,))

    p = prog(f, X)
    q = passes.dce(passes.simplify(passes.simplify(p)))
    assert "exp" not in prims(q) and "transpose" not in prims(q) and "squeeze" not in prims(q)
    same_values(p, q, X)


def test_cse_and_dce():
    def f(x):
        a = jnp.exp(x) + 1.0
        b = jnp.exp(x) + 1.0
        unused = jnp.tanh(x)  # noqa: F841
        return a * b

    p = prog(f, X)
    q = passes.dce(passes.cse(p))
    assert prims(q).count("exp") == 1 and "tanh" not in prims(q)
    same_values(p, q, X)


def test_dce_drops_unused_constants():
    c = np.arange(8, dtype=np.float32)
    p = prog(lambda x: (x + c, x)[1], X)
    assert len(p.constvars) == 1
    q = passes.dce(p)
    assert len(q.constvars) == 0 and len(q.consts) == 0


def test_absorb_transposes_into_dot():
    p = prog(lambda x, w: lax.dot(x, lax.transpose(w, (1, 0))), X, W)
    q = passes.dce(passes.absorb_transposes(p))
    assert prims(q) == ["dot_general"]
    assert q.eqns[0].params["dimension_numbers"] == (((1,), (1,)), ((), ()))
    same_values(p, q, X, W)


def test_absorb_transposes_keeps_free_dim_order():
    a = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    # the transposed operand's free dims come out permuted: not absorbed
    p = prog(lambda a, v: lax.dot_general(lax.transpose(a, (1, 0, 2)), v, (((2,), (0,)), ((), ()))),
             a, np.ones(5, np.float32))
    q = passes.dce(passes.absorb_transposes(p))
    assert "transpose" in prims(q)
    same_values(p, q, a, np.ones(5, np.float32))


@pytest.mark.parametrize("case", ["nn", "nt", "tn", "batched", "multi"])
def test_lower_matmul(case):
    a = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    b = RNG.standard_normal((2, 4, 5)).astype(np.float32)
    fs = {
        "nn": (lambda x, y: lax.dot(x, y), (X, W.T.copy())),
        "nt": (lambda x, y: lax.dot_general(x, y, (((1,), (1,)), ((), ()))), (X, W)),
        "tn": (lambda x, y: lax.dot_general(x, y, (((0,), (0,)), ((), ()))), (X.T.copy(), W.T.copy())),
        "batched": (lambda x, y: lax.dot_general(x, y, (((2,), (1,)), ((0,), (0,)))), (a, b)),
        "multi": (lambda x, y: lax.dot_general(x, y, (((1, 2), (0, 1)), ((), ()))),
                  (a.reshape(2, 3, 4), RNG.standard_normal((3, 4, 6)).astype(np.float32))),
    }
    f, args = fs[case]
    p = prog(f, *args)
    q = passes.dce(passes.lower_matmul(p))
    assert "dot_general" not in prims(q) and prims(q).count("native_gemm") == 1
    g = next(e for e in q.eqns if e.prim is gemm_p)
    assert (g.params["trans_a"], g.params["trans_b"]) == {"nn": (False, False), "nt": (False, True),
                                                          "tn": (True, False), "batched": (False, False),
                                                          "multi": (False, False)}[case]
    assert "transpose" not in prims(q)  # operands are read in place
    same_values(p, q, *args)


def test_lower_matmul_inserts_transpose_when_no_flag_fits():
    q4 = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    k4 = RNG.standard_normal((2, 3, 6, 5)).astype(np.float32)
    p = prog(lambda q, k: lax.dot_general(q, k, (((3, 1), (3, 1)), ((0,), (0,)))), q4, k4)
    q = passes.dce(passes.lower_matmul(p))
    assert "native_gemm" in prims(q) and "transpose" in prims(q)
    same_values(p, q, q4, k4)


def test_lower_matmul_int_and_preferred_type():
    a = RNG.integers(-5, 5, (3, 4)).astype(np.int32)
    b = RNG.integers(-5, 5, (4, 2)).astype(np.int32)
    p = prog(lambda x, y: lax.dot(x, y, preferred_element_type=np.float32), a, b)
    q = passes.dce(passes.lower_matmul(p))
    assert prims(q).count("convert_element_type") == 2 and "native_gemm" in prims(q)
    same_values(p, q, a, b)


def test_absorb_scale_and_bias():
    def f(x, w, b):
        return lax.dot(x, lax.transpose(w, (1, 0))) * 0.5 + b

    p = prog(f, X, W, B)
    q = passes.run_passes(p)
    assert prims(q) == ["native_gemm"]
    prm = q.eqns[0].params
    assert prm["trans_b"] and prm["alpha"] == 0.5 and prm["beta"] == 1.0 and prm["c_dims"] == (1,)
    same_values(p, q, X, W, B)


def test_absorb_scale_after_bias_scales_beta_and_input_scale():
    def f(x, w, b):
        return -((lax.dot(x * 2.0, w) + b) / 4.0)

    w = W.T.copy()
    p = prog(f, X, w, B)
    q = passes.run_passes(p)
    assert prims(q) == ["native_gemm"]
    prm = q.eqns[0].params
    assert prm["alpha"] == pytest.approx(-0.5) and prm["beta"] == pytest.approx(-0.25)
    same_values(p, q, X, w, B)


def test_absorb_bias_full_shape_and_scalar():
    c = RNG.standard_normal((4, 16)).astype(np.float32)
    w = W.T.copy()
    p = prog(lambda x, w, c: (lax.dot(x, w) + c, lax.dot(w.T, x.T) + 3.0), X, w, c)
    q = passes.run_passes(p)
    gs = [e for e in q.eqns if e.prim is gemm_p]
    assert len(gs) == 2 and all(len(g.inputs) == 3 for g in gs)
    same_values(p, q, X, w, c)


def test_a_bias_sliced_into_elementwise_work_keeps_its_add():
    """``x @ w + b`` read through slices by tanh/exp (a recurrent step's four gates with their
    bias): the add fuses into that map, so C is not first filled with the broadcast bias; the same
    sum read by a product is still absorbed."""
    w = W.T.copy()

    def gates(x, w, b):
        g = lax.dot(x, w) + b
        return jnp.tanh(g[:, :8]) * lax.exp(-g[:, 8:])

    p = prog(gates, X, w, B)
    q = passes.run_passes(p)
    assert [len(e.inputs) for e in q.eqns if e.prim is gemm_p] == [2] and "add" in prims(q)
    same_values(p, q, X, w, B)
    p2 = prog(lambda x, w, b: lax.dot((lax.dot(x, w) + b)[:, :8], w[:8, :8]), X, w, B)
    q2 = passes.run_passes(p2)
    assert sorted(len(e.inputs) for e in q2.eqns if e.prim is gemm_p) == [2, 3]
    same_values(p2, q2, X, w, B)


@pytest.mark.parametrize("loop_body", [False, True])
def test_a_residual_input_is_absorbed_except_in_a_loop_body(loop_body):
    """``relu(x @ w + r)`` with ``r`` an input: at the top level the product accumulates into a copy
    of ``r`` (the bias/ReLU then ride in the GEMM's store); in a loop body, where that copy would run
    serially at every step, the add stays (fused into the map after the product). An ``r`` computed
    in the body is absorbed either way."""
    r = RNG.standard_normal((4, 16)).astype(np.float32)
    w = W.T.copy()
    p = prog(lambda x, w, r: jnp.maximum(lax.dot(x, w) + r, 0.0), X, w, r)
    q = passes.run_passes(p, loop_body=loop_body)
    assert [len(e.inputs) for e in q.eqns if e.prim is gemm_p] == [2 if loop_body else 3]
    same_values(p, q, X, w, r)
    p2 = prog(lambda x, w, r: jnp.maximum(lax.dot(x, w) + 2.0 * r, 0.0), X, w, r)
    q2 = passes.run_passes(p2, loop_body=loop_body)
    assert [len(e.inputs) for e in q2.eqns if e.prim is gemm_p] == [3]
    same_values(p2, q2, X, w, r)


def test_bias_not_absorbed_when_gemm_output_is_shared():
    w = W.T.copy()
    p = prog(lambda x, w, b: (lax.dot(x, w) + b, lax.dot(x, w)), X, w, B)
    q = passes.run_passes(p)
    assert all(len(e.inputs) == 2 for e in q.eqns if e.prim is gemm_p)
    same_values(p, q, X, w, B)


def test_fold_constants_runs_after_absorption():
    w = W.copy()  # captured constant used transposed: absorbed, never materialized transposed
    scale = np.full(16, 2.0, np.float32)

    def f(x):
        return lax.dot(x, lax.transpose(w, (1, 0))) * lax.exp(lax.log(scale))  # exp(log(c)) folds

    p = prog(f, X)
    q = passes.run_passes(p)
    assert "exp" not in prims(q) and "log" not in prims(q) and "transpose" not in prims(q)
    assert all(c.shape != (8, 16) for c in consts(q))
    same_values(p, q, X)


def test_fold_constants_never_materializes_broadcasts():
    p = prog(lambda x: x + lax.broadcasted_iota(np.float32, (4, 8), 1) * 2.0, X)
    q = passes.fold_constants(passes.simplify(p))
    assert len(q.consts) == 0 and "iota" in prims(q)
    same_values(p, q, X)


def test_pass_list_is_switchable():
    p = prog(lambda x: x * 1.0, X)
    assert prims(passes.run_passes(p, [])) == prims(p)
    assert prims(passes.run_passes(p, ["simplify", "dce"])) == []
    with pytest.raises(ValueError, match="unknown pass"):
        passes.run_passes(p, ["nope"])


def test_gemm_primitive_reference():
    a = RNG.standard_normal((2, 4, 3)).astype(np.float32)
    b = RNG.standard_normal((2, 5, 4)).astype(np.float32)
    c = RNG.standard_normal(5).astype(np.float32)
    out = np.asarray(gemm(a, b, c, trans_a=True, trans_b=True, alpha=2.0, beta=0.5, c_dims=(2,)))
    want = 2 * np.swapaxes(a, 1, 2) @ np.swapaxes(b, 1, 2) + 0.5 * c
    np.testing.assert_allclose(out, want, rtol=1e-5)


@pytest.mark.parametrize("batched", [False, True])
def test_absorb_output_transpose_swaps_operands(batched):
    """transpose(op(x) op(y)) -> op(y)^T op(x)^T: one product, no transpose, same values (NumPy)."""
    a = RNG.standard_normal((3, 6, 4) if batched else (6, 4)).astype(np.float32)
    c = RNG.standard_normal((3, 6, 5) if batched else (6, 5)).astype(np.float32)
    perm = (0, 2, 1) if batched else (1, 0)
    p = prog(lambda x, y: lax.transpose(jnp.matmul(jnp.swapaxes(x, -1, -2), y) * 2.0, perm), a, c)
    q = passes.run_passes(p)
    assert prims(q) == ["native_gemm"], prims(q)
    same_values(p, q, a, c)
    want = np.swapaxes(np.swapaxes(a, -1, -2).astype(np.float64) @ c, -1, -2) * 2
    np.testing.assert_allclose(run_numpy(q, consts(q), [a, c])[0], want, rtol=1e-5, atol=1e-5)


def test_dense_layer_weight_gradient_has_no_transpose_copy():
    x = RNG.standard_normal((32, 64)).astype(np.float32)
    w = RNG.standard_normal((64, 48)).astype(np.float32)
    g = ember.grad(lambda w, x: jnp.sum(jnp.tanh(x @ w)))
    q = passes.run_passes(prog(g, w, x))
    assert "transpose" not in prims(q)
    want = x.T.astype(np.float64) @ (1 - np.tanh(x.astype(np.float64) @ w) ** 2)
    np.testing.assert_allclose(np.asarray(ember.jit(g, backend="native")(w, x)), want, rtol=1e-4, atol=1e-4)
