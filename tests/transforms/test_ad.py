"""Autodiff: jvp, vjp, grad, Jacobians, Hessians, custom derivatives, checkpoint, and their
compositions with jit (and vmap), checked against finite differences and closed forms."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember._src.ad_util import float0
from ember._src.program import run_numpy
from ember.test_util import check_grads

rng = np.random.default_rng(42)


def U(*shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, shape)


def f_scalar(x):
    return jnp.sum(jnp.sin(x) * x ** 2 + jnp.exp(-x))


def df_scalar(x):
    return np.cos(x) * x ** 2 + 2 * x * np.sin(x) - np.exp(-x)


def num_grad(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        g[i] = (float(f(jnp.asarray(x + e))) - float(f(jnp.asarray(x - e)))) / (2 * eps)
    return g


# ---------------------------------------------------------------------------------------------
# Basics
# ---------------------------------------------------------------------------------------------


def test_grad_closed_form_and_value_and_grad():
    x = U(5)
    np.testing.assert_allclose(ember.grad(f_scalar)(x), df_scalar(x), rtol=1e-12)
    v, g = ember.value_and_grad(f_scalar)(x)
    np.testing.assert_allclose(v, np.sum(np.sin(x) * x ** 2 + np.exp(-x)), rtol=1e-12)
    np.testing.assert_allclose(g, df_scalar(x), rtol=1e-12)


def test_jvp_and_vjp_on_pytrees():
    def f(p, x):
        return {"y": jnp.tanh(p["w"] @ x + p["b"]), "s": jnp.sum(x)}

    p = {"w": U(3, 4), "b": U(3)}
    x = U(4)
    tp = {"w": U(3, 4), "b": U(3)}
    tx = U(4)
    out, tout = ember.jvp(f, (p, x), (tp, tx))
    eps = 1e-6
    plus = f({k: p[k] + eps * tp[k] for k in p}, x + eps * tx)
    minus = f({k: p[k] - eps * tp[k] for k in p}, x - eps * tx)
    for k in ("y", "s"):
        fd = (np.asarray(plus[k]) - np.asarray(minus[k])) / (2 * eps)
        np.testing.assert_allclose(tout[k], fd, rtol=1e-6)
    out2, f_vjp = ember.vjp(f, p, x)
    np.testing.assert_allclose(out2["y"], out["y"])
    ct = {"y": U(3), "s": 1.0}
    gp, gx = f_vjp(ct)
    assert set(gp) == {"w", "b"} and gp["w"].shape == (3, 4)
    # <ct, J t> == <J^T ct, t>
    lhs = np.dot(ct["y"], tout["y"]) + ct["s"] * float(tout["s"])
    rhs = np.sum(gp["w"] * tp["w"]) + np.dot(gp["b"], tp["b"]) + np.dot(gx, tx)
    np.testing.assert_allclose(lhs, rhs, rtol=1e-10)


def test_argnums_has_aux_and_kwargs():
    def f(x, y, z, scale=1.0):
        return jnp.sum(x * y * z) * scale, {"aux": x + 1}

    x, y, z = U(3), U(3), U(3)
    g, aux = ember.grad(f, argnums=(0, 2), has_aux=True)(x, y, z, scale=2.0)
    np.testing.assert_allclose(g[0], 2 * y * z)
    np.testing.assert_allclose(g[1], 2 * x * y)
    np.testing.assert_allclose(aux["aux"], x + 1)
    (v, aux2), g1 = ember.value_and_grad(f, argnums=1, has_aux=True)(x, y, z)
    np.testing.assert_allclose(g1, x * z)
    np.testing.assert_allclose(v, np.sum(x * y * z))
    g_neg = ember.grad(lambda a, b: jnp.sum(a * b), argnums=-1)(x, y)
    np.testing.assert_allclose(g_neg, x)


def test_python_control_flow_on_concrete_values():
    def f(x):
        if x > 0:
            return x ** 3
        return -x

    assert float(ember.grad(f)(2.0)) == pytest.approx(12.0)
    assert float(ember.grad(f)(-2.0)) == pytest.approx(-1.0)
    assert float(ember.grad(ember.grad(f))(2.0)) == pytest.approx(12.0)


def test_python_scalar_inputs_and_constant_outputs():
    assert float(ember.grad(lambda x: x * x)(3.0)) == pytest.approx(6.0)
    g = ember.grad(lambda x: jnp.sum(jnp.ones(3)) + 0.0 * 0)(np.float64(1.0))
    assert float(g) == 0.0
    g = ember.grad(lambda x, y: jnp.sum(y))(U(3), U(2))
    np.testing.assert_array_equal(g, np.zeros(3))


def test_nested_grad_no_perturbation_confusion():
    # d/dx [ d/dy (x * y) at y=1 ] = d/dx x = 1
    g = ember.grad(lambda x: ember.grad(lambda y: x * y)(1.0))(2.0)
    assert float(g) == pytest.approx(1.0)
    # d/dx x * (d/dy (x + y)) = 1
    g = ember.grad(lambda x: x * ember.grad(lambda y: x + y)(1.0))(2.0)
    assert float(g) == pytest.approx(1.0)


def test_grad_of_grad_and_higher_order():
    x = 0.7
    d = lambda f: ember.grad(f)
    f = lambda x: jnp.sin(x)
    assert float(d(d(d(f)))(x)) == pytest.approx(-np.cos(x))
    assert float(d(d(d(d(f))))(x)) == pytest.approx(np.sin(x))


def test_integer_inputs_get_float0_cotangents():
    def f(x, n):
        return jnp.sum(x * n)

    x, n = U(3), np.arange(3, dtype=np.int32)
    out, f_vjp = ember.vjp(f, x, n)
    gx, gn = f_vjp(1.0)
    np.testing.assert_allclose(gx, n)
    assert gn.dtype == float0 and gn.shape == (3,)
    _, t = ember.jvp(f, (x, n), (np.ones(3), np.zeros(3, float0)))
    assert float(t) == pytest.approx(3.0)
    g = ember.grad(f, argnums=(0, 1), allow_int=True)(x, n)
    assert g[1].dtype == float0
    # bool inputs too
    _, f_vjp = ember.vjp(lambda x, m: jnp.sum(jnp.where(m, x, 0.0)), x, np.array([True, False, True]))
    assert f_vjp(1.0)[1].dtype == float0


def test_integer_outputs_have_float0_tangents():
    out, t = ember.jvp(lambda x: (x * 2, jnp.argmax(x)), (U(4),), (U(4),))
    assert t[1].dtype == float0


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------


def test_grad_errors():
    with pytest.raises(TypeError, match=r"scalar-output.*\(3,\)"):
        ember.grad(lambda x: x * 2)(U(3))
    with pytest.raises(TypeError, match="real-valued outputs.*int32"):
        ember.grad(lambda x: jnp.argmax(x))(U(3))
    with pytest.raises(TypeError, match=r"argument 'n' \(argnums=1\).*int32"):
        ember.grad(lambda x, n: jnp.sum(x) * n, argnums=1)(U(3), np.int32(2))
    # a complex input of a real function: df/dx - i df/dy (Re z^2 = x^2 - y^2 at 1 + 1j: 2 + 2j)
    np.testing.assert_allclose(ember.grad(lambda z: jnp.real(z * z))(np.complex128(1 + 1j)), 2 + 2j)
    with pytest.raises(TypeError, match="holomorphic=True"):
        ember.grad(lambda z: z * z)(np.complex128(1 + 1j))
    with pytest.raises(TypeError, match="argnums"):
        ember.grad(lambda x: x, argnums=3)(1.0)
    with pytest.raises(TypeError, match="pair"):
        ember.grad(lambda x: x, has_aux=True)(1.0)
    with pytest.raises(TypeError, match="2 primal arguments but 1 tangent"):
        ember.jvp(lambda x, y: x, (1.0, 2.0), (1.0,))
    with pytest.raises(TypeError, match="tree structure"):
        ember.jvp(lambda x: x, ((1.0, 2.0),), ([1.0, 2.0],))
    with pytest.raises(ValueError, match="shape"):
        ember.jvp(lambda x: x, (U(3),), (U(4),))
    with pytest.raises(TypeError, match="dtype"):
        ember.jvp(lambda x: x, (U(3),), (np.ones(3, np.int32),))


def test_missing_rule_error_names_primitive():
    from ember._src.core import PRIMITIVES, Primitive
    p = PRIMITIVES.get("test_no_jvp") or Primitive("test_no_jvp")
    p.impl, p.abstract_eval = (lambda x: x), (lambda x: x)
    try:
        with pytest.raises(NotImplementedError, match="test_no_jvp"):
            ember.grad(lambda x: p.bind(x))(1.5)
    finally:
        del PRIMITIVES["test_no_jvp"]  # keep the registry test's view clean


def test_holomorphic_grad():
    z = np.complex128(0.3 + 0.4j)
    g = ember.grad(lambda z: z * z * z, holomorphic=True)(z)
    np.testing.assert_allclose(g, 3 * z * z)
    jf = ember.jacfwd(lambda z: jnp.exp(z), holomorphic=True)(np.array([z, 2 * z]))
    jr = ember.jacrev(lambda z: jnp.exp(z), holomorphic=True)(np.array([z, 2 * z]))
    np.testing.assert_allclose(jf, np.diag(np.exp([z, 2 * z])))
    np.testing.assert_allclose(jr, jf)


# ---------------------------------------------------------------------------------------------
# Broadcasting through ember.numpy
# ---------------------------------------------------------------------------------------------

NUMPY_CASES = [
    (lambda x, y: jnp.add(x, y), (U(3, 1), U(4))),
    (lambda x, y: x * y - y / (x + 3.0), (U(2, 1, 3), U(4, 1))),
    (lambda x, y: jnp.maximum(x, y) + jnp.minimum(x, 0.25), (U(3, 1), U(1, 5))),
    (lambda x, y: jnp.where(x > 0, x * y, y ** 2), (U(3, 4), U(4))),
    (lambda x: jnp.sum(x, axis=1) + jnp.mean(x, axis=0)[:2], (U(2, 3),)),
    (lambda x: jnp.max(x, axis=-1) * jnp.prod(x, axis=0)[:3], (U(3, 4) + np.arange(4),)),
    (lambda x, y: jnp.matmul(x, y), (U(2, 3, 4), U(4, 5))),
    (lambda x, y: x @ y, (U(4), U(4, 2))),
    (lambda x: jnp.exp(x) / jnp.sum(jnp.exp(x), axis=-1, keepdims=True), (U(2, 5),)),
    (lambda x: x[1:, ::2] * 2.0 + x[0, 1], (U(3, 4),)),
    (lambda x: x[np.array([2, 0, 2])] * x[:, None, 0], (U(3, 2),)),
    (lambda x, u: jnp.asarray(x).at[np.array([0, 2, 0])].add(u), (U(4, 2), U(3, 2))),
    (lambda x, u: jnp.asarray(x).at[1:3, 0].set(u), (U(4, 2), U(2))),
    (lambda x: jnp.concatenate([x, 2 * x[::-1]], axis=0).reshape(4, -1).T, (U(2, 3),)),
    (lambda x: jnp.var(x, axis=0) + jnp.std(x), (U(4, 3),)),
    (lambda x: jnp.cumsum(x, axis=1) * jnp.cumprod(x, axis=1), (U(2, 4),)),
    (lambda x: jnp.sort(x, axis=-1) * np.arange(4.0), (U(3, 4),)),
    (lambda x, y: jnp.einsum("ij,jk->ik", x, y), (U(2, 3), U(3, 2))),
    (lambda x: jnp.sqrt(jnp.sum(x * x)) + jnp.linalg.norm(x, axis=0).sum() if hasattr(jnp, "linalg")
     else jnp.sqrt(jnp.sum(x * x)), (U(3, 2),)),
]


@pytest.mark.parametrize("i", range(len(NUMPY_CASES)))
def test_check_grads_through_numpy_broadcasting(i):
    f, args = NUMPY_CASES[i]
    check_grads(f, args, order=2)


def test_broadcast_gradient_reduces_to_input_shape():
    x, y = U(3, 1), U(1, 4)
    gx, gy = ember.grad(lambda x, y: jnp.sum(x * y), argnums=(0, 1))(x, y)
    assert gx.shape == (3, 1) and gy.shape == (1, 4)
    np.testing.assert_allclose(gx, np.full((3, 1), y.sum()))
    np.testing.assert_allclose(gy, np.full((1, 4), x.sum()))


# ---------------------------------------------------------------------------------------------
# Jacobians and Hessians
# ---------------------------------------------------------------------------------------------


def test_jacfwd_equals_jacrev():
    def f(x):
        return jnp.stack([jnp.sin(x[0]) * x[1], x[0] ** 2 + x[2], jnp.exp(x[1] * x[2]), jnp.sum(x)])

    x = U(3)
    jf, jr = ember.jacfwd(f)(x), ember.jacrev(f)(x)
    assert jf.shape == (4, 3)
    np.testing.assert_allclose(jf, jr, rtol=1e-12)
    J = np.stack([num_grad(lambda v, i=i: f(v)[i], x) for i in range(4)])
    np.testing.assert_allclose(jf, J, rtol=1e-6, atol=1e-8)


def test_jacobians_of_pytrees_and_matrices():
    def f(a, b):
        return {"m": a @ b, "v": jnp.tanh(a).sum(axis=1)}

    a, b = U(2, 3), U(3, 2)
    jf = ember.jacfwd(f, argnums=(0, 1))(a, b)
    jr = ember.jacrev(f, argnums=(0, 1))(a, b)
    assert jf["m"][0].shape == (2, 2, 2, 3) and jf["m"][1].shape == (2, 2, 3, 2)
    assert jf["v"][0].shape == (2, 2, 3)
    for k in ("m", "v"):
        for i in range(2):
            np.testing.assert_allclose(jf[k][i], jr[k][i], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(jf["m"][0], np.einsum("ik,lj->ijkl", np.eye(2), b))  # d(ab)_ij/da_kl


def test_hessian_against_finite_differences_of_grad():
    def f(x):
        return jnp.sum(jnp.sin(x) * x[::-1] ** 2) + jnp.prod(x)

    x = U(4)
    H = ember.hessian(f)(x)
    g = ember.grad(f)
    eps = 1e-5
    Hn = np.stack([(np.asarray(g(x + eps * e)) - np.asarray(g(x - eps * e))) / (2 * eps) for e in np.eye(4)])
    np.testing.assert_allclose(H, Hn.T, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(H, H.T, rtol=1e-10, atol=1e-12)


def test_jacobian_has_aux_and_errors():
    j, aux = ember.jacrev(lambda x: (x * 2, x.sum()), has_aux=True)(U(3))
    np.testing.assert_allclose(j, 2 * np.eye(3))
    with pytest.raises(TypeError, match="real-valued inputs"):
        ember.jacfwd(lambda x: x)(np.arange(3))


# ---------------------------------------------------------------------------------------------
# linearize and linear_transpose
# ---------------------------------------------------------------------------------------------


def test_linearize_matches_jvp():
    x, t = U(4), U(4)
    y, f_jvp = ember.linearize(lambda x: jnp.sin(x) * jnp.exp(x), x)
    y2, t2 = ember.jvp(lambda x: jnp.sin(x) * jnp.exp(x), (x,), (t,))
    np.testing.assert_allclose(y, y2)
    np.testing.assert_allclose(f_jvp(t), t2, rtol=1e-12)
    np.testing.assert_allclose(f_jvp(2 * t), 2 * np.asarray(t2), rtol=1e-12)


def test_linear_transpose():
    A = U(3, 4)
    f = lambda x, y: (A @ x - 2.0 * y[:3], jnp.sum(x))
    f_t = ember.linear_transpose(f, np.zeros(4), np.zeros(5))
    ct = (U(3), 2.0)
    gx, gy = f_t(ct)
    np.testing.assert_allclose(gx, A.T @ ct[0] + 2.0)
    np.testing.assert_allclose(gy, np.concatenate([-2.0 * ct[0], [0.0, 0.0]]))
    with pytest.raises(TypeError, match="float"):
        ember.linear_transpose(lambda n: n, np.arange(3))


# ---------------------------------------------------------------------------------------------
# Compositions with jit and vmap
# ---------------------------------------------------------------------------------------------


def test_jit_of_grad_and_grad_of_jit():
    x = U(5)
    expected = df_scalar(x)
    jg = ember.jit(ember.grad(f_scalar))
    np.testing.assert_allclose(jg(x), expected, rtol=1e-12)
    np.testing.assert_allclose(jg(x), expected, rtol=1e-12)
    assert jg.cache_info()["traces"] == 1
    np.testing.assert_allclose(ember.grad(ember.jit(f_scalar))(x), expected, rtol=1e-12)
    np.testing.assert_allclose(ember.jit(ember.grad(ember.jit(f_scalar)))(x), expected, rtol=1e-12)


def test_jvp_of_grad_and_grad_of_grad():
    x, t = U(4), U(4)
    _, hvp = ember.jvp(ember.grad(f_scalar), (x,), (t,))
    H = ember.hessian(f_scalar)(x)
    np.testing.assert_allclose(hvp, H @ t, rtol=1e-10)
    g2 = ember.grad(lambda x: jnp.sum(ember.grad(f_scalar)(x) * t))(x)
    np.testing.assert_allclose(g2, H @ t, rtol=1e-10)
    np.testing.assert_allclose(ember.jit(ember.hessian(f_scalar))(x), H, rtol=1e-12)


def test_vmap_compositions():
    xs = U(3, 4)
    per = np.stack([df_scalar(x) for x in xs])
    np.testing.assert_allclose(ember.vmap(ember.grad(f_scalar))(xs), per, rtol=1e-12)
    np.testing.assert_allclose(ember.jit(ember.vmap(ember.grad(f_scalar)))(xs), per, rtol=1e-12)
    g = ember.grad(lambda xs: jnp.sum(ember.vmap(f_scalar)(xs)))(xs)
    np.testing.assert_allclose(g, per, rtol=1e-12)


def test_make_program_of_grad_prints_and_runs():
    x = U(3)
    prog = ember.make_program(ember.grad(f_scalar))(x)
    text = str(prog)
    assert "lambda" in text and "sin" in text and "cos" in text and "mul" in text
    (out,) = run_numpy(prog, [np.asarray(c) for c in prog.consts], [x])
    np.testing.assert_allclose(out, df_scalar(x), rtol=1e-12)
    prog_vjp = ember.make_program(lambda x, ct: ember.vjp(jnp.tanh, x)[1](ct))(x, x)
    assert "tanh" in str(prog_vjp)


# ---------------------------------------------------------------------------------------------
# Custom derivatives
# ---------------------------------------------------------------------------------------------


@ember.custom_jvp
def log1pexp(x):
    return jnp.log(1.0 + jnp.exp(x))


@log1pexp.defjvp
def _log1pexp_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return log1pexp(x), t * (1.0 - 1.0 / (1.0 + jnp.exp(x)))


def test_custom_jvp_numerically_stable_rule_under_jit_and_vmap():
    x = np.array([0.0, 2.0, 1000.0])
    g = ember.grad(lambda x: jnp.sum(log1pexp(x)))(x)
    np.testing.assert_allclose(g, [0.5, 1 / (1 + np.exp(-2.0)), 1.0])  # no NaN at 1000
    np.testing.assert_allclose(ember.jit(ember.grad(lambda x: jnp.sum(log1pexp(x))))(x), g)
    np.testing.assert_allclose(ember.vmap(ember.grad(log1pexp))(x), g)
    np.testing.assert_allclose(ember.grad(lambda x: jnp.sum(ember.vmap(log1pexp)(x)))(x), g)
    np.testing.assert_allclose(ember.jit(ember.vmap(ember.grad(log1pexp)))(x), g)
    _, t = ember.jvp(log1pexp, (x,), (np.ones(3),))
    np.testing.assert_allclose(t, g)
    np.testing.assert_allclose(ember.jit(log1pexp)(np.array([1.0])), np.log1p(np.e))
    assert "custom_jvp_call" in str(ember.make_program(log1pexp)(x))
    check_grads(lambda x: log1pexp(x), (U(3),), order=2)


def test_custom_jvp_rule_is_used_and_defjvps_nondiff():
    @ember.custom_jvp
    def f(x, y):
        return x * y

    f.defjvps(lambda tx, out, x, y: 10.0 * tx, None)  # deliberately "wrong": shows the rule is used
    g = ember.grad(lambda x, y: jnp.sum(f(x, y)), argnums=(0, 1))(U(2), U(2))
    np.testing.assert_allclose(g[0], [10.0, 10.0])
    np.testing.assert_allclose(g[1], [0.0, 0.0])

    def apply(fn, x):
        return fn(x)

    h = ember.custom_jvp(apply, nondiff_argnums=(0,))
    h.defjvp(lambda fn, primals, tangents: (fn(primals[0]), 3.0 * tangents[0]))
    assert float(ember.grad(lambda x: h(jnp.sin, x))(0.2)) == pytest.approx(3.0)
    assert float(ember.jit(ember.grad(lambda x: h(jnp.sin, x)))(0.2)) == pytest.approx(3.0)
    with pytest.raises(AttributeError, match="No JVP defined"):
        ember.custom_jvp(lambda x: x)(1.0)


def _clip_gradient_fn():
    @ember.custom_vjp
    def clip_grad(x, lo, hi):
        return x

    def fwd(x, lo, hi):
        return x, (lo, hi)

    def bwd(res, g):
        lo, hi = res
        return jnp.clip(g, lo, hi), None, None

    clip_grad.defvjp(fwd, bwd)
    return clip_grad


def test_custom_vjp_under_jit_and_vmap():
    clip_grad = _clip_gradient_fn()
    f = lambda x: jnp.sum(clip_grad(x, -0.5, 0.5) * np.array([2.0, 0.1, -3.0]))
    x = U(3)
    expected = [0.5, 0.1, -0.5]
    np.testing.assert_allclose(ember.grad(f)(x), expected)
    np.testing.assert_allclose(ember.jit(ember.grad(f))(x), expected)
    np.testing.assert_allclose(ember.grad(ember.jit(f))(x), expected)
    np.testing.assert_allclose(ember.vmap(ember.grad(f))(np.stack([x, x])), [expected, expected])
    gv = ember.grad(lambda x: jnp.sum(ember.vmap(lambda r: clip_grad(r, -0.5, 0.5))(x) * 3.0))(U(2, 3))
    np.testing.assert_allclose(gv, np.full((2, 3), 0.5))
    np.testing.assert_allclose(clip_grad(x, -0.5, 0.5), x)  # eager primal
    np.testing.assert_allclose(ember.jit(lambda x: clip_grad(x, -0.5, 0.5))(x), x)
    with pytest.raises(TypeError, match="forward-mode"):
        ember.jvp(f, (x,), (x,))


def test_custom_vjp_residuals_nondiff_and_second_order():
    @ember.custom_vjp
    def cube(x):
        return x ** 3

    def fwd(x):
        return cube(x), x

    def bwd(x, g):
        return (3.0 * x ** 2 * g,)

    cube.defvjp(fwd, bwd)
    x = U(3)
    np.testing.assert_allclose(ember.grad(lambda x: jnp.sum(cube(x)))(x), 3 * x ** 2)
    # reverse-over-reverse differentiates bwd itself
    np.testing.assert_allclose(ember.grad(lambda x: jnp.sum(ember.grad(lambda y: jnp.sum(cube(y)))(x)))(x),
                               6 * x)
    check_grads(cube, (x,), order=2, modes=("rev",))

    def scaled(k, x):
        return k * x

    s = ember.custom_vjp(scaled, nondiff_argnums=(0,))
    s.defvjp(lambda k, x: (k * x, None), lambda k, res, g: (k * k * g,))
    assert float(ember.grad(lambda x: s(3.0, x))(1.0)) == pytest.approx(9.0)
    with pytest.raises(AttributeError, match="No VJP defined"):
        ember.custom_vjp(lambda x: x)(1.0)


# ---------------------------------------------------------------------------------------------
# checkpoint
# ---------------------------------------------------------------------------------------------


def _block(x, w):
    return jnp.tanh(jnp.sin(x @ w) * x)


def test_checkpoint_same_grads_as_without():
    x, w = U(4, 4), U(4, 4)

    def loss(ck):
        blk = ember.checkpoint(_block) if ck else _block
        return lambda x, w: jnp.sum(blk(blk(x, w), w) ** 2)

    g0 = ember.grad(loss(False), argnums=(0, 1))(x, w)
    g1 = ember.grad(loss(True), argnums=(0, 1))(x, w)
    g2 = ember.jit(ember.grad(loss(True), argnums=(0, 1)))(x, w)
    for a, b, c in zip(g0, g1, g2):
        np.testing.assert_allclose(a, b, rtol=1e-12)
        np.testing.assert_allclose(a, c, rtol=1e-12)
    np.testing.assert_allclose(ember.remat(_block)(x, w), _block(x, w))
    H0 = ember.hessian(lambda v: loss(False)(v.reshape(4, 4), w))(x.reshape(-1))
    H1 = ember.hessian(lambda v: loss(True)(v.reshape(4, 4), w))(x.reshape(-1))
    np.testing.assert_allclose(H0, H1, rtol=1e-10, atol=1e-12)
    gv = ember.vmap(ember.grad(lambda x: jnp.sum(ember.checkpoint(_block)(x, w))))(U(2, 4, 4))
    assert gv.shape == (2, 4, 4)


def test_checkpoint_recomputes_in_backward_pass():
    x, w = U(4, 4), U(4, 4)

    def count(ck, name):
        blk = ember.checkpoint(_block) if ck else _block
        prog = ember.make_program(ember.grad(lambda x: jnp.sum(blk(x, w))))(x)
        return sum(1 for e in prog.eqns if e.prim.name == name)

    assert count(False, "sin") == 1
    assert count(True, "sin") == 2  # once forward, once recomputed inside the backward pass
    assert count(True, "tanh") == 2


def test_checkpoint_static_argnums_and_policy_accepted():
    f = ember.checkpoint(lambda x, n: x ** n, static_argnums=(1,), policy=lambda *a: True)
    assert float(ember.grad(f)(2.0, 3)) == pytest.approx(12.0)


# ---------------------------------------------------------------------------------------------
# An MLP training step
# ---------------------------------------------------------------------------------------------


def _mlp_data(n=64, d=4, k=3):
    r = np.random.default_rng(7)
    X = r.standard_normal((n, d))
    teacher = r.standard_normal((d, k))
    y = np.argmax(X @ teacher, axis=1)
    return X, y


def _init(sizes, seed=0):
    r = np.random.default_rng(seed)
    return [{"w": r.standard_normal((a, b)) / np.sqrt(a), "b": np.zeros(b)} for a, b in zip(sizes, sizes[1:])]


def _loss(params, X, y):
    h = X
    for layer in params[:-1]:
        h = jnp.tanh(h @ layer["w"] + layer["b"])
    logits = h @ params[-1]["w"] + params[-1]["b"]
    m = jnp.max(logits, axis=1, keepdims=True)
    logp = logits - m - jnp.log(jnp.sum(jnp.exp(logits - m), axis=1, keepdims=True))
    onehot = (y[:, None] == jnp.arange(logits.shape[1])).astype(logits.dtype)
    return -jnp.mean(jnp.sum(onehot * logp, axis=1))


def test_mlp_training_step_under_jit():
    X, y = _mlp_data()
    params = _init([4, 16, 16, 3])

    @ember.jit
    def step(params, X, y):
        loss, g = ember.value_and_grad(_loss)(params, X, y)
        return loss, ember.tree.map(lambda p, gp: p - 0.5 * gp, params, g)

    losses = []
    for _ in range(25):
        loss, params = step(params, X, y)
        losses.append(float(loss))
    assert step.cache_info()["traces"] == 1
    assert losses[-1] < 0.6 * losses[0], losses
    assert all(np.isfinite(losses))
    # the gradient matches finite differences (float64)
    p0 = _init([4, 8, 3], seed=3)
    check_grads(lambda p: _loss(p, X[:16], y[:16]), (p0,), order=1, modes=("rev",))
    g = ember.grad(_loss)(p0, X[:16], y[:16])
    w = p0[0]["w"]
    num = num_grad(lambda v: _loss([{"w": v, "b": p0[0]["b"]}, p0[1]], X[:16], y[:16]), w)
    np.testing.assert_allclose(g[0]["w"], num, rtol=1e-5, atol=1e-8)


def test_custom_rules_reject_closed_over_differentiated_values():
    def outer_vjp(w):
        @ember.custom_vjp
        def f(x):
            return x * w

        f.defvjp(lambda x: (f(x), None), lambda r, g: (g * w,))
        return f(2.0)

    def outer_jvp(w):
        f = ember.custom_jvp(lambda x: x * w)
        f.defjvp(lambda p, t: (f(p[0]), t[0] * w))
        return f(2.0)

    for outer in (outer_vjp, outer_jvp):
        with pytest.raises(TypeError, match="closed-over value"):
            ember.grad(outer)(3.0)
    # closing over a value that is not differentiated is fine
    w = jnp.asarray([3.0, 4.0])
    f = ember.custom_jvp(lambda x: x * w)
    f.defjvp(lambda p, t: (f(p[0]), t[0] * w))
    np.testing.assert_allclose(ember.jit(ember.grad(lambda x: jnp.sum(f(x))))(np.ones(2)), [3.0, 4.0])


def test_more_compositions():
    f = lambda x: jnp.sum(jnp.tanh(x) ** 2 * x)
    xs = U(3, 4)
    H = np.stack([ember.hessian(f)(x) for x in xs])
    np.testing.assert_allclose(ember.vmap(ember.hessian(f))(xs), H, rtol=1e-12)
    np.testing.assert_allclose(ember.jit(ember.vmap(ember.jacfwd(ember.grad(f))))(xs), H, rtol=1e-12)
    s = ember.eval_shape(ember.grad(f), xs[0])
    assert tuple(s.shape) == (4,) and s.dtype == np.float64
    t = ember.jit(lambda x: ember.jvp(ember.grad(f), (x,), (x,))[1])(xs[0])
    np.testing.assert_allclose(t, H[0] @ xs[0], rtol=1e-12)
    assert float(ember.grad(lambda x: 1.0)(2.0)) == 0.0
    out, t, aux = ember.jvp(lambda x: (x * 2, x.sum()), (xs[0],), (xs[0],), has_aux=True)
    np.testing.assert_allclose(t, 2 * xs[0])
    np.testing.assert_allclose(aux, xs[0].sum())
    assert ember.jacfwd(lambda x: x * 2)(np.zeros(0)).shape == (0, 0)
    assert ember.jacrev(lambda x: x[:0])(np.ones(3)).shape == (0, 3)


COMPLEX_REAL_FUNCTIONS = [
    lambda m, z: m.abs(z) ** 2,
    lambda m, z: m.real(z * m.conj(z) + m.sin(z)),
    lambda m, z: m.sum(m.abs(m.exp(z)) + m.imag(z) ** 3),
    lambda m, z: m.angle(z).sum() * m.real(z).sum(),
]


@pytest.mark.parametrize("case", range(len(COMPLEX_REAL_FUNCTIONS)))
def test_grad_of_real_function_of_complex_input_matches_jax(case):
    jax = pytest.importorskip("jax", reason="the reference is JAX")
    f = COMPLEX_REAL_FUNCTIONS[case]
    z = np.array([1 + 2j, -0.5 + 0.3j], np.complex64) if case >= 2 else np.complex64(1 + 2j)
    want = jax.grad(lambda v: f(jax.numpy, v))(z)
    got = ember.grad(lambda v: f(jnp, v))(z)
    assert got.dtype == np.complex64
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ember.jit(ember.grad(lambda v: f(jnp, v)))(z), want, rtol=1e-5, atol=1e-6)
    # the convention, by finite differences on the real and imaginary parts (float64)
    z64 = np.asarray(z, np.complex128)
    g = np.asarray(ember.grad(lambda v: f(jnp, v))(z64))
    h = 1e-6
    for idx in np.ndindex(z64.shape):
        e = np.zeros(z64.shape, np.complex128)
        e[idx] = 1
        dx = (float(f(jnp, z64 + h * e)) - float(f(jnp, z64 - h * e))) / (2 * h)
        dy = (float(f(jnp, z64 + 1j * h * e)) - float(f(jnp, z64 - 1j * h * e))) / (2 * h)
        np.testing.assert_allclose(g[idx], dx - 1j * dy, rtol=1e-6, atol=1e-8)


def test_value_and_grad_and_jacrev_with_complex_inputs():
    jax = pytest.importorskip("jax", reason="the reference is JAX")
    z = np.array([1 + 2j, 3 - 1j], np.complex64)
    w = np.array([0.5, -1.5], np.float32)
    f = lambda m: lambda p: m.sum(m.abs(p["z"]) ** 2 * p["w"])  # noqa: E731
    v, g = ember.value_and_grad(f(jnp))({"z": z, "w": w})
    jv, jg = jax.value_and_grad(f(jax.numpy))({"z": z, "w": w})
    np.testing.assert_allclose(v, jv, rtol=1e-6)
    for k in ("z", "w"):
        np.testing.assert_allclose(g[k], jg[k], rtol=1e-5)
        assert g[k].dtype == jg[k].dtype
    jr = ember.jacrev(lambda p: jnp.abs(p) ** 2)(z)
    np.testing.assert_allclose(jr, jax.jacrev(lambda p: jax.numpy.abs(p) ** 2)(z), rtol=1e-5)
