"""check_grads (JVP and VJP against central finite differences, up to second order) on every
differentiable primitive of the registry, with inputs drawn from each primitive's domain."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import lax
from ember._src import core
from ember._src.prims import elementwise as ew
from ember._src.prims.movement import pad_p
from ember.test_util import check_grads

rng = np.random.default_rng(0)


def U(shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, shape)


def away(shape, lo=0.3, hi=1.5):
    """Values bounded away from zero, random signs."""
    return rng.uniform(lo, hi, shape) * rng.choice([-1.0, 1.0], shape)


def distinct(shape, scale=1.0):
    n = int(np.prod(shape))
    return (rng.permutation(n).reshape(shape) * 0.37 + U(shape, 0, 0.1)) * scale


def mid_frac(shape):
    """Values whose fractional part stays away from 0 and 0.5 (for floor/ceil/round)."""
    return rng.integers(-3, 3, shape) + rng.uniform(0.15, 0.35, shape)


def Ints(shape, lo=0, hi=5):
    return rng.integers(lo, hi, shape).astype(np.int32)


def C(shape):
    return U(shape) + 1j * U(shape)


def _f64(x):
    return lax.convert_element_type(x, np.float64)


def _nan_to_zero(y):
    return lax.select(lax.is_finite(y), y, lax.full_like(y, 0.0))


S = (2, 3)

# name -> list of (function, args[, check_grads kwargs])
CASES: dict[str, list] = {
    # unary math
    "neg": [(lax.neg, (U(S),))],
    "sign": [(lambda x: lax.sign(x) * x, (away(S),))],
    "floor": [(lambda x: lax.floor(x) * x, (mid_frac(S),))],
    "ceil": [(lambda x: lax.ceil(x) * x, (mid_frac(S),))],
    "round": [(lambda x: lax.round(x) + x, (mid_frac(S),)),
              (lambda x: lax.round(x, 1) * x, (mid_frac(S),))],
    "is_finite": [(lambda x: lax.select(lax.is_finite(x), x, x * 2.0), (U(S),))],
    "exp": [(lax.exp, (U(S),))],
    "exp2": [(lax.exp2, (U(S),))],
    "log": [(lax.log, (U(S, 0.5, 2.0),))],
    "log1p": [(lax.log1p, (U(S, -0.5, 2.0),))],
    "expm1": [(lax.expm1, (U(S),))],
    "tanh": [(lax.tanh, (U(S),))],
    "logistic": [(lax.logistic, (U(S, -3, 3),))],
    "sin": [(lax.sin, (U(S, -3, 3),))],
    "cos": [(lax.cos, (U(S, -3, 3),))],
    "tan": [(lax.tan, (U(S, -1.2, 1.2),))],
    "asin": [(lax.asin, (U(S, -0.8, 0.8),))],
    "acos": [(lax.acos, (U(S, -0.8, 0.8),))],
    "atan": [(lax.atan, (U(S, -3, 3),))],
    "sinh": [(lax.sinh, (U(S),))],
    "cosh": [(lax.cosh, (U(S),))],
    "asinh": [(lax.asinh, (U(S, -3, 3),))],
    "acosh": [(lax.acosh, (U(S, 1.2, 3),))],
    "atanh": [(lax.atanh, (U(S, -0.8, 0.8),))],
    "sqrt": [(lax.sqrt, (U(S, 0.3, 3),))],
    "rsqrt": [(lax.rsqrt, (U(S, 0.3, 3),))],
    "cbrt": [(lax.cbrt, (away(S),))],
    "abs": [(lax.abs, (away(S),)), (lax.abs, (C(S) + 0.5,))],
    "erf": [(lax.erf, (U(S, -2, 2),))],
    "erfc": [(lax.erfc, (U(S, -2, 2),))],
    "erf_inv": [(lax.erf_inv, (U(S, -0.8, 0.8),))],
    "lgamma": [(lax.lgamma, (U(S, 0.5, 4),))],
    "digamma": [(lax.digamma, (U(S, 0.5, 4),))],
    "polygamma": [(lambda x: lax.polygamma(1, x), (U(S, 0.5, 4),)),
                  (lambda x: lax.polygamma(2, x), (U(S, 0.8, 4),), {"order": 1})],
    "real": [(lax.real, (C(S),))],
    "imag": [(lax.imag, (C(S),))],
    "conj": [(lax.conj, (C(S),))],
    "complex": [(lax.complex, (U(S), U(S)))],
    "copy": [(ew.copy, (U(S),))],
    "integer_pow": [(lambda x: lax.integer_pow(x, 3), (U(S),)),
                    (lambda x: lax.integer_pow(x, -2), (away(S),)),
                    (lambda x: lax.integer_pow(x, 1) + lax.integer_pow(x, 0), (U(S),)),
                    (lambda x: lax.integer_pow(x, 2), (U(S),))],
    "convert_element_type": [
        (lambda x: lax.real(lax.convert_element_type(x, np.complex128)) * x, (U(S),)),
        (lambda x: _f64(lax.convert_element_type(x, np.int32)) * x, (mid_frac(S),)),
        (lambda x, i: x * _f64(i), (U(S), Ints(S)))],
    # binary arithmetic
    "add": [(lax.add, (U(S), U(S)))],
    "sub": [(lax.sub, (U(S), U(S)))],
    "mul": [(lax.mul, (U(S), U(S))), (lax.mul, (C(S), C(S)))],
    "div": [(lax.div, (U(S), away(S))), (lax.div, (C(S), C(S) + 2.0))],
    "rem": [(lax.rem, (U(S, 2.1, 2.9), U(S, 0.9, 1.1))), (lax.rem, (U(S, -2.9, -2.1), U(S, 0.9, 1.1)))],
    "pow": [(lax.pow, (U(S, 0.5, 2), U(S, -2, 2)))],
    "max": [(lax.max, (distinct(S), distinct(S) + 0.05))],
    "min": [(lax.min, (distinct(S), distinct(S) + 0.05))],
    "atan2": [(lax.atan2, (U(S), away(S)))],
    "nextafter": [(lambda x, y: lax.nextafter(x, y) * x, (U(S), U(S)))],
    # integer / boolean ops: a float operand carries the (zero) derivative through
    "and": [(lambda x, i, j: x * _f64(lax.bitwise_and(i, j)), (U(S), Ints(S), Ints(S)))],
    "or": [(lambda x, i, j: x * _f64(lax.bitwise_or(i, j)), (U(S), Ints(S), Ints(S)))],
    "xor": [(lambda x, i, j: x * _f64(lax.bitwise_xor(i, j)), (U(S), Ints(S), Ints(S)))],
    "not": [(lambda x, i: x * _f64(lax.bitwise_not(i)), (U(S), Ints(S)))],
    "population_count": [(lambda x, i: x * _f64(lax.population_count(i)), (U(S), Ints(S)))],
    "shift_left": [(lambda x, i, j: x * _f64(lax.shift_left(i, j)), (U(S), Ints(S), Ints(S, 0, 3)))],
    "shift_right_arithmetic": [(lambda x, i, j: x * _f64(lax.shift_right_arithmetic(i, j)),
                                (U(S), Ints(S, -9, 9), Ints(S, 0, 3)))],
    "shift_right_logical": [(lambda x, i, j: x * _f64(lax.shift_right_logical(i, j)),
                             (U(S), Ints(S), Ints(S, 0, 3)))],
    "eq": [(lambda x, y: lax.select(lax.eq(x, y), x, x * y), (U(S), U(S)))],
    "ne": [(lambda x, y: lax.select(lax.ne(x, y), x * y, x), (U(S), U(S)))],
    "lt": [(lambda x, y: lax.select(lax.lt(x, y), x * y, x + y), (distinct(S), distinct(S)))],
    "le": [(lambda x, y: lax.select(lax.le(x, y), x * y, x + y), (distinct(S), distinct(S)))],
    "gt": [(lambda x, y: lax.select(lax.gt(x, y), x * y, x + y), (distinct(S), distinct(S)))],
    "ge": [(lambda x, y: lax.select(lax.ge(x, y), x * y, x + y), (distinct(S), distinct(S)))],
    "select_n": [(lambda p, x, y: lax.select(p, x, y), (U(S) > 0, U(S), U(S))),
                 (lambda w, x, y, z: lax.select_n(w, x, y, z), (Ints(S, 0, 3), U(S), U(S), U(S)))],
    # movement
    "broadcast_in_dim": [(lambda x: lax.broadcast_in_dim(x, (2, 3, 4), (1,)), (U((3,)),)),
                         (lambda x: lax.broadcast_in_dim(x, (2, 3), (0, 1)), (U((1, 3)),)),
                         (lambda x: lax.broadcast_in_dim(x, (4,), ()), (U(()),))],
    "reshape": [(lambda x: lax.reshape(x, (3, 2)), (U(S),)), (lambda x: lax.reshape(x, (6,)), (U(S),))],
    "transpose": [(lambda x: lax.transpose(x, (2, 0, 1)), (U((2, 3, 4)),))],
    "squeeze": [(lambda x: lax.squeeze(x, (0, 2)), (U((1, 3, 1)),))],
    "rev": [(lambda x: lax.rev(x, (0, 1)), (U(S),)), (lambda x: lax.rev(x, (1,)), (U(S),))],
    "slice": [(lambda x: lax.slice(x, (0, 1), (2, 3)), (U(S),)),
              (lambda x: lax.slice(x, (1, 0), (5, 7), (2, 3)), (U((6, 7)),))],
    "pad": [(lambda x, v: lax.pad(x, v, ((1, 2, 0), (0, 1, 1))), (U(S), U(()))),
            (lambda x, v: lax.pad(x, v, ((-1, 1, 1), (2, -1, 0))), (U((3, 4)), U(()))),  # cropping
            (lambda x, v: pad_p.bind(x, v, padding_config=((1, -2, 2), (0, 0, 0))), (U((3, 4)), U(())))],
    "concatenate": [(lambda x, y, z: lax.concatenate([x, y, z], 1), (U((2, 1)), U((2, 3)), U((2, 2))))],
    "iota": [(lambda x: x * lax.iota(np.float64, 6), (U((6,)),))],
    "dynamic_slice": [(lambda x: lax.dynamic_slice(x, (1, 0), (2, 2)), (U((4, 3)),)),
                      (lambda x, i: lax.dynamic_slice(x, (i, 1), (2, 2)), (U((4, 3)), np.int32(7)))],
    "dynamic_update_slice": [(lambda x, u: lax.dynamic_update_slice(x, u, (1, 1)), (U((4, 3)), U((2, 2)))),
                             (lambda x, u, i: lax.dynamic_update_slice(x, u, (i, 0)),
                              (U((4, 3)), U((2, 2)), np.int32(9)))],
    # reductions
    "reduce_sum": [(lambda x: lax.reduce_sum(x, (1,)), (U((2, 3, 4)),)),
                   (lambda x: lax.reduce_sum(x, (0, 2)), (U((2, 3, 4)),))],
    "reduce_prod": [(lambda x: lax.reduce_prod(x, (1,)), (U((2, 3, 4)),)),
                    (lambda x: lax.reduce_prod(x, (0,)), (np.array([[0.0, 1.5], [2.0, 0.5], [0.7, 1.1]]),))],
    "reduce_max": [(lambda x: lax.reduce_max(x, (1,)), (distinct((2, 3, 4)),))],
    "reduce_min": [(lambda x: lax.reduce_min(x, (0, 2)), (distinct((2, 3, 4)),))],
    "reduce_and": [(lambda x, b: x * _f64(lax.reduce_and(b, (1,))), (U((2,)), U(S) > -0.5))],
    "reduce_or": [(lambda x, b: x * _f64(lax.reduce_or(b, (1,))), (U((2,)), U(S) > 0.5))],
    "argmax": [(lambda x: lax.reduce_sum(x, (1,)) * _f64(lax.argmax(x, 1)), (distinct(S),))],
    "argmin": [(lambda x: x * _f64(lax.argmin(x, 0)), (distinct((3, 2)),))],
    "cumsum": [(lambda x: lax.cumsum(x, 1), (U((2, 4)),)), (lambda x: lax.cumsum(x, 0, True), (U((3, 2)),))],
    "cumprod": [(lambda x: lax.cumprod(x, 1), (U((2, 4)),)),
                (lambda x: lax.cumprod(x, 0, True), (U((3, 2)),))],
    "cummax": [(lambda x: lax.cummax(x, 1), (distinct((2, 4)),)),
               (lambda x: lax.cummax(x, 0, True), (distinct((3, 2)),))],
    "cummin": [(lambda x: lax.cummin(x, 1), (distinct((2, 4)),)),
               (lambda x: lax.cummin(x, 0, True), (distinct((3, 2)),))],
    # gather / scatter
    "take": [(lambda x: lax.take(x, np.array([[2, 0], [1, 1]]), 1), (U((2, 3, 2)),)),
             (lambda x: lax.take(x, np.array([0, 5, 2]), 0, "clip"), (U((3, 2)),)),
             (lambda x: _nan_to_zero(lax.take(x, np.array([0, 5, 2]), 0, "fill")), (U((3, 2)),))],
    "scatter": [(lambda x, u: lax.scatter(x, np.array([1, 3, 1]), u, 0, "add"), (U((4, 2)), U((3, 2)))),
                (lambda x, u: lax.scatter(x, np.array([[2], [0]]), u, 1, "set"), (U((2, 3)), U((2, 2, 1)))),
                (lambda x, u: lax.scatter(x, np.array([0, 2]), u, 0, "mul"), (U((3, 2)), U((2, 2)))),
                (lambda x, u: lax.scatter(x, np.array([0, 2]), u, 0, "max"),
                 (distinct((3, 2)), distinct((2, 2)) + 0.1)),
                (lambda x, u: lax.scatter(x, np.array([0, 2]), u, 0, "min"),
                 (distinct((3, 2)), distinct((2, 2)) + 0.1)),
                (lambda x, u: lax.scatter(x, np.array([0, 7]), u, 0, "add"), (U((3, 2)), U((2, 2))))],
    "dot_general": [(lambda x, y: lax.dot_general(x, y, (((1,), (0,)), ((), ()))), (U((2, 3)), U((3, 4)))),
                    (lambda x, y: lax.dot_general(x, y, (((2,), (1,)), ((0,), (0,)))),
                     (U((2, 3, 4)), U((2, 4, 5)))),
                    (lambda x, y: lax.dot_general(x, y, (((0, 2), (2, 1)), ((), ()))),
                     (U((2, 3, 4)), U((5, 4, 2)))),
                    (lambda x, y: lax.dot_general(x, y, (((), ()), ((1,), (0,)))), (U((3, 2)), U((2, 4))))],
    # misc
    "sort": [(lambda x: lax.sort(x, 1), (distinct((2, 5)),)),
             (lambda x, y: lax.sort((x, y), 0, num_keys=1), (distinct((4, 2)), U((4, 2))))],
}

# derivatives checked elsewhere, or nothing to check with finite differences
NOT_CHECKED = {
    "stop_gradient": "finite differences see through stop_gradient; test_stop_gradient covers it",
    "custom_lin": "only appears inside linearized programs; covered by the custom_vjp tests",
    "dim_as_value": "no operands (a symbolic size as a value)",
    "ensure_shape": "restates symbolic sizes, so it appears only under dynamic axes: its gradient, "
                    "vmap and jvp are tested in tests/dynamic/test_ensure_shape.py",
    "threefry2x32": "integer hash: no differentiable inputs",
    "check_index": "a bounds check of integer indices: no differentiable inputs",
    "bitcast_convert_type": "bit reinterpretation: not differentiable",
    "random_gamma": "random sampling: its derivative is tested with the random module",
    "random_gamma_grad": "random sampling: its derivative is tested with the random module",
    "random_poisson": "random sampling: integer output",
}


def _custom_jvp_case():
    @ember.custom_jvp
    def f(x, y):
        return lax.sin(x) * y

    @f.defjvp
    def f_jvp(primals, tangents):
        (x, y), (tx, ty) = primals, tangents
        return f(x, y), lax.cos(x) * tx * y + lax.sin(x) * ty

    return f


def _custom_vjp_case():
    @ember.custom_vjp
    def f(x, y):
        return lax.exp(x) * y

    def fwd(x, y):
        e = lax.exp(x)
        return e * y, (e, y)

    def bwd(res, g):
        e, y = res
        return g * e * y, g * e

    f.defvjp(fwd, bwd)
    return f


CASES["custom_jvp_call"] = [(_custom_jvp_case(), (U(S), U(S)))]
CASES["custom_vjp_call"] = [(_custom_vjp_case(), (U(S), U(S)), {"modes": ("rev",)})]
CASES["checkpoint"] = [(ember.checkpoint(lambda x, y: lax.sin(lax.mul(x, y)) * x), (U(S), U(S)))]

_CORE_MODULES = {"ember._src.prims.elementwise", "ember._src.prims.movement", "ember._src.prims.reductions",
                 "ember._src.prims.indexing", "ember._src.prims.dot", "ember._src.prims.misc",
                 "ember._src.custom_derivatives"}


def test_every_core_primitive_has_a_gradient_case():
    missing = []
    for name, p in core.PRIMITIVES.items():
        mod = getattr(p.abstract_eval, "__module__", "")
        if mod in _CORE_MODULES and name not in CASES and name not in NOT_CHECKED:
            missing.append(name)
    assert not missing, f"primitives without a gradient test case: {sorted(missing)}"


def test_every_case_names_a_primitive():
    assert sorted(set(CASES) - set(core.PRIMITIVES)) == []
    assert sorted(set(CASES) & set(NOT_CHECKED)) == []


# one test per primitive with a case (the primitives without one: NOT_CHECKED says why for the core
# families, test_every_core_primitive_has_a_gradient_case checks that list; the others' gradients
# are tested beside them, e.g. linalg, fft, control flow, collectives)
@pytest.mark.parametrize("name", sorted(CASES))
def test_primitive_grads(name):
    for case in CASES[name]:
        fn, args = case[0], case[1]
        kw = {"order": 2, **(case[2] if len(case) > 2 else {})}
        check_grads(fn, args, **kw)


def test_stop_gradient():
    x = U(S)
    g = ember.grad(lambda x: (x * lax.stop_gradient(x)).sum())(x)
    np.testing.assert_allclose(g, x)
    y, t = ember.jvp(ember.stop_gradient, (x,), (np.ones(S),))
    np.testing.assert_allclose(y, x)
    np.testing.assert_allclose(t, 0 * x)
    tree = ember.stop_gradient({"a": x, "n": np.int32(3)})
    np.testing.assert_allclose(tree["a"], x)


def test_scatter_transposes_to_gather_and_back():
    x, idx = U((4, 3)), np.array([3, 0, 3])
    f = lambda x: lax.take(x, idx, 0)
    (g,) = ember.vjp(f, x)[1](np.ones((3, 3)))
    np.testing.assert_allclose(g, np.array([[1.0] * 3, [0.0] * 3, [0.0] * 3, [2.0] * 3]))
    prog = ember.make_program(lambda x: ember.vjp(f, x)[1](np.ones((3, 3))))(x)
    assert "scatter" in str(prog) and "mode='add'" in str(prog)


def test_max_min_split_ties_evenly():
    x = np.array([1.0, 2.0, 2.0])
    np.testing.assert_allclose(ember.grad(lambda x: lax.reduce_max(x, (0,)))(x), [0.0, 0.5, 0.5])
    g = ember.grad(lambda x, y: lax.max(x, y).sum(), argnums=(0, 1))(x, np.array([1.0, 3.0, 0.0]))
    np.testing.assert_allclose(g[0], [0.5, 0.0, 1.0])
    np.testing.assert_allclose(g[1], [0.5, 1.0, 0.0])


def test_select_masks_gradients():
    p = np.array([True, False, True])
    g = ember.grad(lambda x, y: lax.select(p, x, y).sum(), argnums=(0, 1))(np.ones(3), np.ones(3))
    np.testing.assert_allclose(g[0], [1.0, 0.0, 1.0])
    np.testing.assert_allclose(g[1], [0.0, 1.0, 0.0])


def test_take_fill_mode_zero_gradient_out_of_bounds():
    x = U((3,))
    g = ember.grad(lambda x: lax.take(x, np.array([1, 9, 1]), 0, "fill").sum() * 1.0)
    np.testing.assert_allclose(g(x), [0.0, 2.0, 0.0])


@pytest.mark.parametrize("shape,axis", [((0,), 0), ((3, 0), 1), ((0, 4), 0), ((2, 0, 3), 1)])
def test_product_gradients_over_an_empty_axis(shape, axis):
    """jvp and grad of ``cumprod`` and ``prod`` over an axis of size 0 (the fuzzer's seed 41, case
    662: the zero-safe product of the other elements sliced a first element the axis does not have).
    A cumulative product's tangent is empty; a product's is 0 (the empty product is a constant 1).
    Under jit and eagerly, against the hand-derived values; float64."""
    import ember.numpy as jnp

    x = np.ones(shape)
    cum = (lambda v: jnp.cumprod(v, axis=axis), True)
    prod = (lambda v: jnp.prod(v, axis=axis), False)
    for f, keeps_axis in (cum, prod):
        out_shape = shape if keeps_axis else tuple(d for i, d in enumerate(shape) if i != axis)
        _, t = ember.jvp(f, (x,), (np.ones_like(x),))
        assert np.asarray(t).shape == out_shape
        np.testing.assert_array_equal(np.asarray(t), np.zeros(out_shape))
        loss = ember.grad(lambda v, f=f: jnp.sum(f(v)))
        for g in (loss, ember.jit(loss)):
            got = np.asarray(g(x))
            assert got.shape == shape and got.dtype == np.float64
