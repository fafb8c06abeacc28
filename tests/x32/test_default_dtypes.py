"""ember's default dtype mode (64-bit dtypes off) against JAX's default mode, which is the same:
the dtypes and values of conversions, creation functions, promotion, jit arguments and a small
training program, and the warnings for explicit 64-bit requests."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import ember
import ember.numpy as jnp

jax = pytest.importorskip("jax", reason="the reference for the default (32-bit) mode is JAX")
import jax.numpy as jjnp  # noqa: E402

pytestmark = pytest.mark.skipif(bool(jax.config.jax_enable_x64),
                                reason="JAX runs with x64 enabled here, not its default mode")

rng = np.random.default_rng(0)
INPUTS = {
    "f64": rng.standard_normal((3, 4)),
    "i64": rng.integers(-100, 100, (5,)),
    "u64": np.arange(6, dtype=np.uint64),
    "c128": rng.standard_normal(4) + 1j * rng.standard_normal(4),
    "f64_scalar": np.float64(2.5),
    "i64_scalar": np.int64(-7),
    "f32": rng.standard_normal(4).astype(np.float32),
    "list_float": [1.5, 2.0],
    "list_int": [[1, 2], [3, 4]],
    "py_float": 0.25,
    "py_int": 3,
    "bool": np.array([True, False]),
}


def test_x64_is_off_by_default_here():
    assert not ember.config.jax_enable_x64
    assert jnp.asarray(np.ones(2)).dtype == np.float32


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_asarray_dtype_and_value_match_jax(name):
    x = INPUTS[name]
    got, want = jnp.asarray(x), jjnp.asarray(x)
    assert got.dtype == want.dtype
    assert got.weak_type == want.weak_type
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


_EXPLICIT = [
    ("zeros", lambda m, d: m.zeros((2, 3), d)),
    ("ones", lambda m, d: m.ones(3, d)),
    ("full", lambda m, d: m.full((2,), 7, d)),
    ("arange", lambda m, d: m.arange(5, dtype=d)),
    ("linspace", lambda m, d: m.linspace(0.0, 1.0, 5, dtype=d)),
    ("eye", lambda m, d: m.eye(3, dtype=d)),
    ("asarray", lambda m, d: m.asarray([1, 2, 3], dtype=d)),
    ("array", lambda m, d: m.array([1.5, 2.5], dtype=d)),
    ("astype", lambda m, d: m.ones(3).astype(d)),
    ("sum", lambda m, d: m.sum(m.arange(4.0), dtype=d)),
    ("scalar_type", lambda m, d: getattr(m, np.dtype(d).name)(3)),
]


# linspace with an integer dtype: the float and complex cases cover it
_REQUESTS = [(n, m, w) for n, m in _EXPLICIT for w in (np.float64, np.int64, np.complex128, np.uint64)
             if not (n == "linspace" and np.dtype(w).kind in "iu")]


@pytest.mark.parametrize("name,make,wide", _REQUESTS,
                         ids=[f"{n}-{np.dtype(w).name}" for n, _, w in _REQUESTS])
def test_explicit_64bit_request_truncates_and_warns_as_jax(name, make, wide):
    with warnings.catch_warnings(record=True) as jw:
        warnings.simplefilter("always")
        want = make(jjnp, wide)
    with warnings.catch_warnings(record=True) as ew:
        warnings.simplefilter("always")
        got = make(jnp, getattr(jnp, np.dtype(wide).name))
    assert got.dtype == want.dtype
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)
    jax_warned = any("Explicitly requested dtype" in str(w.message) for w in jw)
    ours = [w for w in ew if "Explicitly requested dtype" in str(w.message)]
    assert bool(ours) == jax_warned
    if ours:  # it points at the caller's line, not at ember's internals
        assert ours[0].filename == __file__
        assert "jax_enable_x64" in str(ours[0].message)


def test_no_warning_for_default_or_32bit_dtypes():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        jnp.zeros(3), jnp.zeros(3, jnp.float32), jnp.zeros(3, float), jnp.arange(3, dtype=int)
        jnp.asarray(np.ones(3))  # implicit conversion of NumPy input is silent, as in JAX


def test_random_dtype_requests_match_jax():
    with pytest.warns(UserWarning, match="Explicitly requested dtype float64"):
        x = ember.random.normal(ember.random.PRNGKey(3), (5,), dtype=jnp.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = jax.random.normal(jax.random.PRNGKey(3), (5,), dtype=jjnp.float64)
    assert x.dtype == want.dtype == np.float32
    np.testing.assert_allclose(np.asarray(x), np.asarray(want), rtol=1e-6, atol=1e-6)


_PAIRS = [(np.uint32, np.int32), (np.int32, np.float32), (np.uint8, np.int64), (np.float64, np.float32),
          (np.int64, np.float64), (np.complex128, np.float32), (np.uint64, np.int64), (np.bool_, np.int64)]


@pytest.mark.filterwarnings("ignore:Explicitly requested dtype")  # JAX's result_type of a 64-bit dtype
@pytest.mark.parametrize("a,b", _PAIRS, ids=[f"{np.dtype(a)}+{np.dtype(b)}" for a, b in _PAIRS])
def test_promotion_is_canonicalized_as_jax(a, b):
    x, y = np.ones(3, a), np.full(3, 2, b)
    got, want = jnp.add(x, y), jjnp.add(x, y)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert jnp.result_type(a, b) == jjnp.result_type(a, b)


def test_promote_types_finfo_iinfo_keep_the_width_asked_for():
    assert jnp.promote_types(jnp.float32, jnp.float64) == jjnp.promote_types(jjnp.float32, jjnp.float64)
    assert jnp.finfo(jnp.float64).bits == jjnp.finfo(jjnp.float64).bits == 64
    assert jnp.iinfo(jnp.int64).max == jjnp.iinfo(jjnp.int64).max


@pytest.mark.parametrize("value", [2**31, -(2**31) - 1, 2**40])
def test_python_int_beyond_int32_overflows_as_jax(value):
    with pytest.raises(OverflowError):
        jjnp.asarray(value)
    with pytest.raises(OverflowError, match="int32"):
        jnp.asarray(value)
    with pytest.raises(OverflowError, match="int32"):
        jnp.asarray([1, value])


def test_jit_canonicalizes_numpy_arguments_on_every_path():
    f = ember.jit(lambda x, n: x * 2 + n)
    g = jax.jit(lambda x, n: x * 2 + n)
    x, n = rng.standard_normal(7), np.arange(7)
    for _ in range(12):  # the first call, the Python fast path and the native dispatcher
        got, want = f(x, n), g(x, n)
        assert got.dtype == want.dtype == np.float32
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)
    # the same function with float32 input shares the float32 program
    x32 = x.astype(np.float32)
    np.testing.assert_allclose(np.asarray(f(x32, n)), np.asarray(g(x32, n)), rtol=1e-6)


def test_jit_with_dynamic_axes_canonicalizes_arguments():
    f = ember.jit(lambda x: jnp.sum(x * x, axis=1), dynamic_axes={"x": ("batch", None)})
    for b in (1, 3, 8, 3):
        x = rng.standard_normal((b, 5))
        got = f(x)
        assert got.dtype == np.float32
        np.testing.assert_allclose(np.asarray(got), (x.astype(np.float32) ** 2).sum(1), rtol=1e-5)


def test_switching_the_setting_retraces():
    f = ember.jit(lambda x: x / 3)
    x = np.array([1.0, 2.0])
    assert f(x).dtype == np.float32
    with ember._src.flags.override("jax_enable_x64", True):
        y = f(x)
        assert y.dtype == np.float64
        np.testing.assert_array_equal(np.asarray(y), x / 3)  # exact in float64
        assert jnp.asarray(x).dtype == np.float64
    assert f(x).dtype == np.float32
    assert ember.config.jax_enable_x64 is False


def _env_without_x64() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("EMBER_ENABLE_X64", "JAX_ENABLE_X64")}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    return env


@pytest.mark.parametrize("setting,want", [({}, "float32"), ({"EMBER_ENABLE_X64": "1"}, "float64"),
                                          ({"JAX_ENABLE_X64": "true"}, "float64"),
                                          ({"EMBER_ENABLE_X64": "0", "JAX_ENABLE_X64": "1"}, "float32")])
def test_environment_variable_sets_the_mode(setting, want):
    code = "import numpy as np, ember.numpy as jnp; print(jnp.asarray(np.ones(2)).dtype)"
    out = subprocess.run([sys.executable, "-c", code], env={**_env_without_x64(), **setting},
                         capture_output=True, text=True, timeout=600, check=True)
    assert out.stdout.strip() == want


def _mlp_program(np_mod, grad, jit):
    """A JAX-style training loop written once against a (numpy module, grad, jit) triple: float64
    NumPy initial parameters and data, as in JAX's MNIST-from-scratch example."""
    r = np.random.default_rng(1)
    params = [(r.standard_normal((8, 16)) * 0.3, r.standard_normal(16) * 0.1),
              (r.standard_normal((16, 3)) * 0.3, r.standard_normal(3) * 0.1)]
    xs, labels = r.standard_normal((32, 8)), r.integers(0, 3, 32)
    onehot = np.eye(3)[labels]

    def predict(params, x):
        for w, b in params[:-1]:
            x = np_mod.tanh(x @ w + b)
        w, b = params[-1]
        logits = x @ w + b
        return logits - np_mod.log(np_mod.sum(np_mod.exp(logits), axis=1, keepdims=True))

    def loss(params, x, y):
        return -np_mod.mean(np_mod.sum(predict(params, x) * y, axis=1))

    @jit
    def update(params, x, y):
        grads = grad(loss)(params, x, y)
        return [(w - 0.1 * dw, b - 0.1 * db) for (w, b), (dw, db) in zip(params, grads)]

    for _ in range(5):
        params = update(params, xs, onehot)
    return params, loss(params, xs, onehot)


def test_jax_style_training_program_matches_jax_in_float32():
    got, got_loss = _mlp_program(jnp, ember.grad, ember.jit)
    want, want_loss = _mlp_program(jjnp, jax.grad, jax.jit)
    for (gw, gb), (ww, wb) in zip(got, want):
        assert gw.dtype == ww.dtype == np.float32 and gb.dtype == wb.dtype == np.float32
        np.testing.assert_allclose(np.asarray(gw), np.asarray(ww), rtol=2e-4, atol=2e-5)
        np.testing.assert_allclose(np.asarray(gb), np.asarray(wb), rtol=2e-4, atol=2e-5)
    assert got_loss.dtype == np.float32
    np.testing.assert_allclose(float(got_loss), float(want_loss), rtol=1e-5)


@pytest.mark.parametrize("seed", [0, 7, -7, 2**31 + 5, 2**40 + 3, -(2**40) - 1, 2**63 - 2])
def test_prng_key_of_a_large_python_int_seed_matches_jax(seed):
    want = np.asarray(jax.random.key_data(jax.random.PRNGKey(seed)))
    np.testing.assert_array_equal(np.asarray(ember.random.PRNGKey(seed)), want)
    np.testing.assert_array_equal(np.asarray(ember.random.uniform(ember.random.PRNGKey(seed), (3,))),
                                  np.asarray(jax.random.uniform(jax.random.PRNGKey(seed), (3,))))


def test_prng_key_seed_beyond_int64_overflows_as_jax():
    with pytest.raises(OverflowError):
        jax.random.PRNGKey(2**63)
    with pytest.raises(OverflowError, match="int64"):
        ember.random.PRNGKey(2**63)


def test_array_namespace_info_lists_what_the_mode_supports():
    jax = pytest.importorskip("jax", reason="the reference is JAX")
    info, jinfo = jnp.__array_namespace_info__(), jax.numpy.__array_namespace_info__()
    assert set(info.dtypes()) == set(jinfo.dtypes())
    for kind in ("integral", "real floating", "complex floating", "numeric", ("bool", "signed integer")):
        assert set(info.dtypes(kind=kind)) == set(jinfo.dtypes(kind=kind)), kind
    assert info.default_dtypes() == jinfo.default_dtypes()
    assert "float64" not in info.dtypes() and "int64" not in info.dtypes(kind="integral")
