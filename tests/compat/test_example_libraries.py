"""ember.example_libraries (stax, optimizers) against NumPy formulas and JAX's own example libraries."""

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember.example_libraries import optimizers, stax

KEY = ember.random.PRNGKey(0)
RNG = np.random.default_rng(1)


def test_dense_mlp_shapes_and_numpy_forward():
    init, apply = stax.serial(stax.Dense(8), stax.Relu, stax.Dense(3), stax.LogSoftmax)
    out_shape, params = init(KEY, (-1, 5))
    assert out_shape == (-1, 3)
    assert [tuple(np.shape(p)) for layer in params for p in layer] == [(5, 8), (8,), (8, 3), (3,)]
    x = RNG.normal(size=(4, 5)).astype(np.float32)
    (w1, b1), _, (w2, b2), _ = [tuple(np.asarray(p, np.float64) for p in layer) for layer in params]
    h = np.maximum(x @ w1 + b1, 0) @ w2 + b2
    want = h - np.log(np.exp(h).sum(-1, keepdims=True))
    np.testing.assert_allclose(apply(params, x), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ember.jit(apply)(params, x), want, rtol=1e-5, atol=1e-5)


def test_fan_and_parallel_combinators():
    init, apply = stax.serial(stax.FanOut(2), stax.parallel(stax.Dense(4), stax.Identity),
                              stax.FanInConcat())
    shape, params = init(KEY, (2, 3))
    assert shape == (2, 7)
    x = RNG.normal(size=(2, 3)).astype(np.float32)
    out = np.asarray(apply(params, x))
    np.testing.assert_allclose(out[:, 4:], x, rtol=1e-6)
    init, apply = stax.serial(stax.FanOut(2), stax.parallel(stax.Identity, stax.Identity), stax.FanInSum)
    np.testing.assert_allclose(apply(init(KEY, (2, 3))[1], x), 2 * x, rtol=1e-6)


def test_dropout_needs_key_and_keeps_rate():
    init, apply = stax.Dropout(0.75)
    x = jnp.ones((200, 50))
    with pytest.raises(ValueError, match="PRNG key"):
        apply((), x)
    y = np.asarray(apply((), x, rng=KEY))
    assert set(np.unique(y)) <= {0.0, np.float32(1 / 0.75)}
    assert abs((y > 0).mean() - 0.75) < 0.02


def _jax_stax():
    jax = pytest.importorskip("jax", reason="JAX comparison")
    from jax.example_libraries import stax as jstax
    return jax, jstax


@pytest.mark.parametrize("layers", [
    lambda s: [s.Conv(4, (3, 3), padding="SAME"), s.Relu, s.MaxPool((2, 2), strides=(2, 2))],
    lambda s: [s.Conv(3, (2, 2), strides=(2, 1)), s.AvgPool((2, 2), padding="SAME"), s.Flatten, s.Dense(5)],
    lambda s: [s.Conv(2, (3, 3)), s.BatchNorm(), s.SumPool((2, 2)), s.Tanh, s.Flatten, s.Softmax],
    lambda s: [s.Dense(6), s.Gelu, s.Dense(2), s.Sigmoid, s.Elu, s.Softplus, s.Selu, s.LeakyRelu],
    lambda s: [s.ConvTranspose(3, (3, 3), strides=(2, 2), padding="SAME"), s.Relu],
    lambda s: [s.ConvTranspose(2, (2, 3), padding="VALID"), s.Flatten],
])
def test_layers_match_jax_stax(layers):
    jax, jstax = _jax_stax()
    x = RNG.normal(size=(2, 6, 6, 3)).astype(np.float32)
    init, apply = stax.serial(*layers(stax))
    shape, params = init(KEY, x.shape)
    jinit, japply = jstax.serial(*layers(jstax))
    jshape, _ = jinit(jax.random.PRNGKey(0), x.shape)
    assert tuple(shape) == tuple(jshape)
    params_np = jax.tree.map(np.asarray, params)
    want = np.asarray(japply(params_np, x))
    np.testing.assert_allclose(apply(params, x), want, rtol=1e-4, atol=1e-5)


def _grads(n=5):
    return [{"w": RNG.normal(size=(3, 2)).astype(np.float32), "b": RNG.normal(size=(2,)).astype(np.float32)}
            for _ in range(n)]


def _run(opt, grads, params, jit=False):
    init, update, get_params = opt
    state = init(params)
    upd = ember.jit(update) if jit else update
    for i, g in enumerate(grads):
        state = upd(i, g, state)
    return {k: np.asarray(v) for k, v in get_params(state).items()}


def test_adam_formula_jitted():
    grads = _grads()
    p0 = {"w": np.ones((3, 2), np.float32), "b": np.zeros(2, np.float32)}
    got = _run(optimizers.adam(1e-2), grads, p0, jit=True)
    for k in p0:
        x, m, v = p0[k].astype(np.float64), 0.0, 0.0
        for i, g in enumerate(grads):
            g = g[k].astype(np.float64)
            m, v = 0.1 * g + 0.9 * m, 0.001 * g * g + 0.999 * v
            x = x - 1e-2 * (m / (1 - 0.9 ** (i + 1))) / (np.sqrt(v / (1 - 0.999 ** (i + 1))) + 1e-8)
        np.testing.assert_allclose(got[k], x, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name,args", [
    ("sgd", (0.1,)), ("momentum", (0.1, 0.9)), ("nesterov", (0.1, 0.9)), ("adagrad", (0.1,)),
    ("rmsprop", (0.01,)), ("rmsprop_momentum", (0.01,)), ("adam", (0.01,)), ("adamax", (0.01,)),
    ("sm3", (0.1,))])
def test_optimizers_match_jax(name, args):
    pytest.importorskip("jax", reason="JAX comparison")
    from jax.example_libraries import optimizers as jopt
    grads = _grads()
    p0 = {"w": np.ones((3, 2), np.float32), "b": np.zeros(2, np.float32)}
    want = _run(getattr(jopt, name)(*args), grads, p0)
    got = _run(getattr(optimizers, name)(*args), grads, p0)
    for k in p0:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)


def test_schedules_and_clipping():
    np.testing.assert_allclose(float(optimizers.exponential_decay(1.0, 10, 0.5)(20)), 0.25)
    np.testing.assert_allclose(float(optimizers.inverse_time_decay(1.0, 2, 1.0, staircase=True)(5)), 1 / 3)
    np.testing.assert_allclose(float(optimizers.polynomial_decay(1.0, 4, 0.0)(2)), 0.5)
    pc = optimizers.piecewise_constant([2, 4], [1.0, 0.5, 0.1])
    np.testing.assert_allclose([float(pc(i)) for i in (0, 2, 3, 5)], [1.0, 1.0, 0.5, 0.1])
    g = {"a": jnp.asarray([3.0, 4.0])}
    np.testing.assert_allclose(float(optimizers.l2_norm(g)), 5.0)
    np.testing.assert_allclose(optimizers.clip_grads(g, 1.0)["a"], [0.6, 0.8], rtol=1e-6)


def test_conv1d_transpose_and_state_packing():
    init, apply = stax.Conv1DTranspose(4, (3,), strides=(2,))
    shape, params = init(KEY, (2, 5, 3))
    out = apply(params, np.ones((2, 5, 3), np.float32))
    assert tuple(out.shape) == tuple(shape) == (2, 11, 4)
    opt_init, opt_update, get_params = optimizers.momentum(0.1, 0.9)
    state = opt_update(0, {"a": jnp.ones(2)}, opt_init({"a": jnp.zeros(2)}))
    marked = optimizers.unpack_optimizer_state(state)
    assert isinstance(marked["a"], optimizers.JoinPoint)
    again = optimizers.pack_optimizer_state(marked)
    np.testing.assert_allclose(get_params(again)["a"], get_params(state)["a"])
    np.testing.assert_allclose(get_params(opt_update(1, {"a": jnp.ones(2)}, again))["a"], [-0.29, -0.29],
                               rtol=1e-6)  # v = 1.9, x = -0.1 - 0.1 * 1.9
