"""JAX names real programs use: ``lax.Precision``, ``config`` members, the stax aliases and ``-1``
batch dims, ``scipy.stats`` distributions as modules (checked against JAX on the CPU)."""

import importlib

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember.example_libraries import optimizers, stax

jax = pytest.importorskip("jax", reason="the reference is JAX")
RNG = np.random.default_rng(36)


@pytest.mark.parametrize("value", ["highest", "high", "bfloat16", "tensorfloat32", "float32", "fastest",
                                   0, 2])
def test_precision_names_map_as_in_jax(value):
    assert lax.Precision(value).name == jax.lax.Precision(value).name
    assert str(lax.Precision(value)) == str(jax.lax.Precision(value))


def test_precision_accepted_by_contractions():
    a, b = RNG.normal(size=(3, 4)), RNG.normal(size=(4, 5))
    want = a @ b
    hi = lax.Precision.HIGHEST
    np.testing.assert_allclose(jnp.dot(a, b, precision=hi), want, rtol=1e-12)
    np.testing.assert_allclose(jnp.matmul(a, b, precision="highest"), want, rtol=1e-12)
    np.testing.assert_allclose(jnp.einsum("ij,jk->ik", a, b, precision=(hi, hi)), want, rtol=1e-12)
    np.testing.assert_allclose(lax.dot_general(a, b, (((1,), (0,)), ((), ())), hi), want, rtol=1e-12)
    np.testing.assert_allclose(lax.dot(a, b, lax.Precision.DEFAULT), want, rtol=1e-12)
    np.testing.assert_allclose(ember.jit(lambda x, y: jnp.matmul(x, y, precision=hi))(a, b), want, rtol=1e-12)
    x, w = RNG.normal(size=(1, 2, 6, 6)), RNG.normal(size=(3, 2, 3, 3))
    got = lax.conv_general_dilated(x, w, (1, 1), "VALID", precision=hi)
    ref = jax.lax.conv_general_dilated(np.float32(x), np.float32(w), (1, 1), "VALID",
                                       precision=jax.lax.Precision.HIGHEST)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="precision"):
        jnp.dot(a, b, precision="fast-ish")


def test_config_members_programs_call():
    cfg = ember.config
    cfg.config_with_absl()
    cfg.parse_flags_with_absl()
    assert cfg.read("jax_enable_x64") is True  # the suite runs with x64 on (tests/conftest.py)
    assert cfg.jax_enable_x64 is True and cfg.x64_enabled is True
    assert cfg.values["jax_enable_x64"] is True
    assert {"jax_enable_x64", "jax_platforms"} <= set(cfg.values) & set(jax.config.values)
    with pytest.raises(AttributeError):
        cfg.read("jax_no_such_setting")


def test_stax_names_match_jax():
    from jax.example_libraries import optimizers as jopt
    from jax.example_libraries import stax as jstax
    modules = {"functools", "jnp", "lax", "math", "random"}
    missing = sorted(n for n in dir(jstax)
                     if not n.startswith("_") and n not in modules and not hasattr(stax, n))
    assert missing == []
    x = RNG.normal(size=(2, 5)).astype(np.float32)
    np.testing.assert_allclose(stax.logsoftmax(x), jax.nn.log_softmax(x), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stax.relu(x), np.maximum(x, 0))
    assert stax.glorot is stax.glorot_normal and stax.randn is stax.normal
    callables = [n for n in dir(jopt) if not n.startswith("_") and callable(getattr(jopt, n))
                 and getattr(getattr(jopt, n), "__module__", "") == jopt.__name__]
    assert [n for n in callables if not hasattr(optimizers, n)] == []


@pytest.mark.parametrize("make,shape", [
    (lambda s: s.Conv(4, (3, 3)), (-1, 8, 8, 2)),
    (lambda s: s.Conv(4, (3, 3), (2, 2), "SAME"), (-1, 9, 9, 2)),
    (lambda s: s.GeneralConv(("NCHW", "OIHW", "NHWC"), 4, (3, 3)), (-1, 2, 8, 8)),
    (lambda s: s.ConvTranspose(4, (3, 3)), (-1, 8, 8, 2)),
    (lambda s: s.Dense(7), (-1, 5)),
    (lambda s: s.serial(s.Conv(4, (3, 3)), s.Relu, s.Flatten, s.Dense(3), s.LogSoftmax), (-1, 8, 8, 2)),
])
def test_stax_init_with_unknown_batch(make, shape):
    from jax.example_libraries import stax as jstax  # (a submodule: not an attribute until imported)

    out, params = make(stax)[0](ember.random.PRNGKey(0), shape)
    want, jparams = make(jstax)[0](jax.random.PRNGKey(0), shape)
    assert tuple(int(d) for d in out) == tuple(int(d) for d in want)
    assert [p.shape for p in ember.tree.leaves(params)] == [p.shape for p in jax.tree.leaves(jparams)]


@pytest.mark.parametrize("name", ["norm", "t", "beta", "multivariate_normal", "poisson", "uniform"])
def test_stats_distributions_are_modules(name):
    mod = importlib.import_module(f"ember.scipy.stats.{name}")
    jmod = importlib.import_module(f"jax.scipy.stats.{name}")
    assert getattr(ember.scipy.stats, name) is mod
    ours, theirs = ({n for n in dir(m) if not n.startswith("_")} for m in (mod, jmod))
    assert ours & theirs and all(callable(getattr(mod, n)) for n in ours)


def test_stats_module_import_form():
    from jax.scipy.stats import norm as jnorm

    import ember.scipy.stats.norm as norm
    x = np.linspace(-3, 3, 7)
    np.testing.assert_allclose(norm.logpdf(x, 0.5, 2.0), jnorm.logpdf(np.float32(x), 0.5, 2.0), rtol=1e-5)
    np.testing.assert_allclose(norm.cdf(x), jnorm.cdf(np.float32(x)), rtol=1e-5)


def test_recorded_jax_names_and_gaps():
    from ember._src.compat import jax_names
    record = jax_names.load_record()
    if record["jax_version"] == jax.__version__:  # the record is the installed JAX's
        fresh = jax_names.walk_jax()
        assert fresh["names"] == record["names"], "run python -m ember._src.compat.jax_names --update"
    gaps = jax_names.missing(record)
    for ns, names in record["names"].items():
        try:
            mod = importlib.import_module(jax_names.NAMESPACES[ns])
        except ImportError:  # no such ember namespace: every name is missing
            assert gaps[ns] == names
            continue
        assert [n for n in names if not hasattr(mod, n)] == gaps.get(ns, [])
    assert "Precision" in record["names"]["jax.lax"] and "Precision" not in gaps.get("jax.lax", [])
    assert not set(gaps.get("jax.tree", []))  # every jax.tree name
    assert "norm" in record["names"]["jax.scipy.stats"] and "norm" not in gaps.get("jax.scipy.stats", [])
