"""JAX-style programs written only against JAX's API, run with the import changed.

Each program is one source text; ``MOD`` is replaced by ``ember`` or ``jax`` (and ``OPTIM`` by
``ember.optim`` or ``optax``). The ember run is checked on its own (the loss falls, gradients match
finite differences or closed forms) and against the JAX run when JAX is installed.
"""

import numpy as np
import pytest

import ember

RNG = np.random.default_rng(7)


def _load(source: str, mod: str) -> dict:
    text = source.replace("MOD", mod)
    env: dict = {}
    exec(compile(text, f"<program:{mod}>", "exec"), env)  # noqa: S102 - the test's own program text
    return env


def _jax():
    return pytest.importorskip("jax", reason="comparison with JAX's run of the same program")


def _same_random_scheme(jax):
    """JAX's threefry setting that gives ember.random's numbers (None if neither does)."""
    ours = np.asarray(ember.random.normal(ember.random.PRNGKey(0), (4,)))
    for flag in (False, True):
        with jax.threefry_partitionable(flag):
            if np.allclose(np.asarray(jax.random.normal(jax.random.PRNGKey(0), (4,))), ours, rtol=1e-6):
                return flag
    return None


MLP = """
import MOD as jax
import MOD.numpy as jnp
from MOD.example_libraries import optimizers, stax


def run(X, Y, steps=30):
    init_fun, predict = stax.serial(stax.Dense(16), stax.Relu, stax.Dense(3), stax.LogSoftmax)
    _, params = init_fun(jax.random.PRNGKey(0), (-1, X.shape[1]))

    def loss(params, X, Y):
        return -jnp.mean(jnp.sum(predict(params, X) * Y, axis=1))

    opt_init, opt_update, get_params = optimizers.adam(1e-2)

    @jax.jit
    def step(i, opt_state, X, Y):
        return opt_update(i, jax.grad(loss)(get_params(opt_state), X, Y), opt_state)

    opt_state = opt_init(params)
    losses = []
    for i in range(steps):
        opt_state = step(i, opt_state, X, Y)
        losses.append(loss(get_params(opt_state), X, Y))
    return jnp.stack(losses)
"""


def _classification_data():
    X = RNG.normal(size=(60, 4)).astype(np.float32)
    labels = np.argmax(X[:, :3] + 0.3 * X[:, 3:], axis=1)
    return X, np.eye(3, dtype=np.float32)[labels]


def test_mlp_stax_optimizers():
    X, Y = _classification_data()
    ours = np.asarray(_load(MLP, "ember")["run"](X, Y))
    assert ours[-1] < 0.8 * ours[0]
    jax = _jax()
    flag = _same_random_scheme(jax)
    if flag is None:
        pytest.skip("ember.random and JAX draw different initial weights (different threefry scheme)")
    with jax.threefry_partitionable(flag):
        theirs = np.asarray(_load(MLP, "jax")["run"](X, Y))
    np.testing.assert_allclose(ours, theirs, rtol=2e-4, atol=2e-5)


GP = """
import MOD as jax
import MOD.numpy as jnp
import MOD.scipy.linalg
import MOD.scipy.stats


def kernel(a, b, lengthscale, amplitude):
    d = a[:, None, :] - b[None, :, :]
    return amplitude * jnp.exp(-0.5 * jnp.sum(d ** 2, axis=-1) / lengthscale ** 2)


def run(X, y, Xs, steps=15):
    n = X.shape[0]

    def gram(params):
        lengthscale, amplitude, noise = jnp.exp(params)
        return kernel(X, X, lengthscale, amplitude) + (noise + 1e-4) * jnp.eye(n)

    def nll(params):
        return -jax.scipy.stats.multivariate_normal.logpdf(y, jnp.zeros(n), gram(params))

    value_and_grad = jax.jit(jax.value_and_grad(nll))
    params = jnp.zeros(3, jnp.float32)
    values = []
    for _ in range(steps):
        v, g = value_and_grad(params)
        values.append(v)
        params = params - 0.02 * g
    L = jnp.linalg.cholesky(gram(params))
    alpha = jax.scipy.linalg.cho_solve((L, True), y)
    lengthscale, amplitude, _ = jnp.exp(params)
    mean = kernel(Xs, X, lengthscale, amplitude) @ alpha
    return jnp.stack(values), params, mean
"""


def test_gp_regression_stats_cholesky():
    X = np.sort(RNG.uniform(-3, 3, size=(25, 1)), axis=0).astype(np.float32)
    y = (np.sin(2 * X[:, 0]) + 0.1 * RNG.normal(size=25)).astype(np.float32)
    Xs = np.linspace(-3, 3, 7, dtype=np.float32)[:, None]
    values, params, mean = (np.asarray(v) for v in _load(GP, "ember")["run"](X, y, Xs))
    assert values[-1] < values[0]
    # the negative log likelihood at the start matches SciPy's
    from scipy import stats as ss
    k0 = np.exp(-0.5 * (X - X.T) ** 2) + (1 + 1e-4) * np.eye(25)
    np.testing.assert_allclose(values[0], -ss.multivariate_normal.logpdf(y, np.zeros(25), k0), rtol=1e-4)
    assert np.max(np.abs(mean - np.sin(2 * Xs[:, 0]))[1:-1]) < 0.3  # interpolation, not the ends
    _jax()
    jv, jp, jm = (np.asarray(v) for v in _load(GP, "jax")["run"](X, y, Xs))
    np.testing.assert_allclose(values, jv, rtol=1e-3)
    np.testing.assert_allclose(params, jp, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(mean, jm, rtol=1e-3, atol=1e-3)


PER_EXAMPLE = """
import MOD as jax
import MOD.numpy as jnp


def loss(W, x, y):
    return jnp.sum((jnp.tanh(x @ W) - y) ** 2)


def run(W, X, Y):
    return jax.jit(jax.vmap(jax.grad(loss), in_axes=(None, 0, 0)))(W, X, Y)
"""


def test_per_example_gradients():
    W = RNG.normal(size=(5, 2)).astype(np.float32)
    X = RNG.normal(size=(8, 5)).astype(np.float32)
    Y = RNG.normal(size=(8, 2)).astype(np.float32)
    ours = np.asarray(_load(PER_EXAMPLE, "ember")["run"](W, X, Y))
    h = np.tanh(X.astype(np.float64) @ W)
    want = np.einsum("bi,bo->bio", X, 2 * (h - Y) * (1 - h ** 2))  # closed form, per example
    np.testing.assert_allclose(ours, want, rtol=1e-4, atol=1e-5)
    _jax()
    theirs = np.asarray(_load(PER_EXAMPLE, "jax")["run"](W, X, Y))
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


RNN = """
import MOD as jax
import MOD.numpy as jnp


def run(params, xs, ys, optim, steps=25):
    def predict(params, xs):
        def cell(h, x):
            h = jnp.tanh(h @ params["Wh"] + x @ params["Wx"])
            return h, h @ params["Wo"]
        _, out = jax.lax.scan(cell, jnp.zeros(params["Wh"].shape[0], xs.dtype), xs)
        return out

    def loss(params):
        return jnp.mean((predict(params, xs) - ys) ** 2)

    opt = optim.adam(1e-2)

    @jax.jit
    def step(params, opt_state):
        value, grads = jax.value_and_grad(loss)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optim.apply_updates(params, updates), opt_state, value

    opt_state = opt.init(params)
    values = []
    for _ in range(steps):
        params, opt_state, value = step(params, opt_state)
        values.append(value)
    return jnp.stack(values), params
"""


def test_rnn_scan_adam():
    shapes = {"Wh": (6, 6), "Wx": (2, 6), "Wo": (6, 1)}
    params = {k: (0.5 * RNG.normal(size=s)).astype(np.float32) for k, s in shapes.items()}
    xs = RNG.normal(size=(12, 2)).astype(np.float32)
    ys = np.cumsum(xs[:, :1], axis=0).astype(np.float32) * 0.3
    values, out = _load(RNN, "ember")["run"](params, xs, ys, ember.optim)
    values = np.asarray(values)
    assert values[-1] < 0.9 * values[0]
    _jax()
    optax = pytest.importorskip("optax", reason="JAX's run of the program uses optax")
    jvalues, jout = _load(RNN, "jax")["run"](params, xs, ys, optax)
    np.testing.assert_allclose(values, np.asarray(jvalues), rtol=1e-4, atol=1e-6)
    for k in params:
        np.testing.assert_allclose(out[k], np.asarray(jout[k]), rtol=1e-3, atol=1e-5)


ODE_FIT = """
import MOD as jax
import MOD.numpy as jnp
from MOD.experimental.ode import odeint


def dynamics(y, t, theta):
    return jnp.stack([y[1], -theta[0] * y[1] - theta[1] * jnp.sin(y[0])])


def run(ts, observed, steps=8):
    def loss(theta):
        ys = odeint(dynamics, jnp.asarray([1.0, 0.0], jnp.float32), ts, theta, rtol=1e-6, atol=1e-6)
        return jnp.mean((ys[:, 0] - observed) ** 2)

    value_and_grad = jax.jit(jax.value_and_grad(loss))
    theta = jnp.asarray([0.5, 2.0], jnp.float32)
    values = []
    for _ in range(steps):
        v, g = value_and_grad(theta)
        values.append(v)
        theta = theta - 0.5 * g
    return jnp.stack(values), theta
"""


def test_ode_fit_odeint():
    from scipy.integrate import solve_ivp
    ts = np.linspace(0.0, 4.0, 9).astype(np.float32)
    true = solve_ivp(lambda t, y: [y[1], -0.2 * y[1] - 3.0 * np.sin(y[0])], (0, 4), [1.0, 0.0], t_eval=ts,
                     rtol=1e-10, atol=1e-10).y[0].astype(np.float32)
    previous = ember.default_backend()
    ember.set_default_backend("numpy")  # the native build of the adjoint program takes ~25 s of gcc
    try:
        values, theta = (np.asarray(v) for v in _load(ODE_FIT, "ember")["run"](ts, true))
    finally:
        ember.set_default_backend(previous)
    assert values[-1] < values[0]
    _jax()
    jvalues, jtheta = (np.asarray(v) for v in _load(ODE_FIT, "jax")["run"](ts, true))
    np.testing.assert_allclose(values, jvalues, rtol=2e-3, atol=1e-6)
    np.testing.assert_allclose(theta, jtheta, rtol=2e-3)
