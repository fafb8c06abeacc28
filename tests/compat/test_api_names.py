"""Small JAX API names: vectorize, ops.segment_*, make_jaxpr, jacobian, devices, config, custom_vmap..."""

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember.custom_batching import custom_vmap

RNG = np.random.default_rng(2)


def test_vectorize_elementwise_and_signature():
    f = jnp.vectorize(lambda x, y: jnp.where(x > y, x - y, y - x))
    a, b = RNG.normal(size=(3, 1)), RNG.normal(size=(4,))
    np.testing.assert_allclose(f(a, b), np.abs(a - b), rtol=1e-12)
    dot = jnp.vectorize(lambda u, v: jnp.sum(u * v), signature="(n),(n)->()")
    u, v = RNG.normal(size=(2, 3, 5)), RNG.normal(size=(5,))
    np.testing.assert_allclose(dot(u, v), np.einsum("abn,n->ab", u, v), rtol=1e-12)
    outer = jnp.vectorize(lambda u, v: u[:, None] * v[None, :], signature="(m),(n)->(m,n)")
    np.testing.assert_allclose(outer(u, v), u[..., :, None] * v, rtol=1e-12)
    scaled = jnp.vectorize(lambda x, k: x * k, excluded={1})
    np.testing.assert_allclose(scaled(np.arange(3.0), 2), [0, 2, 4])
    np.testing.assert_allclose(ember.jit(dot)(u, v), np.einsum("abn,n->ab", u, v), rtol=1e-12)
    with pytest.raises(ValueError, match="core dimension"):
        dot(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="signature"):
        jnp.vectorize(lambda x: x, signature="(n->)")


@pytest.mark.parametrize("name,ufunc,empty", [
    ("segment_sum", np.add, 0.0), ("segment_prod", np.multiply, 1.0), ("segment_max", np.maximum, -np.inf),
    ("segment_min", np.minimum, np.inf)])
def test_segments_against_numpy(name, ufunc, empty):
    data = RNG.normal(size=(7, 2))
    ids = np.array([0, 2, 2, 0, 4, 2, 9])  # 9 is out of range for 5 segments: dropped
    want = np.full((5, 2), empty)
    for i, s in enumerate(ids):
        if s < 5:
            want[s] = ufunc(want[s], data[i])
    fn = getattr(ember.ops, name)
    np.testing.assert_allclose(fn(data, ids, 5), want, rtol=1e-12)
    np.testing.assert_allclose(ember.jit(lambda d, i: fn(d, i, num_segments=5))(data, ids), want, rtol=1e-12)
    assert fn(data[:6], ids[:6]).shape == (5, 2)  # num_segments from the ids


def test_segment_sum_grad_and_int_identity():
    g = ember.grad(lambda d: jnp.sum(ember.ops.segment_sum(d, jnp.asarray([1, 0, 1]), 2) ** 2))(jnp.ones(3))
    np.testing.assert_allclose(g, [4.0, 2.0, 4.0])
    out = ember.ops.segment_max(np.array([3, 1], np.int32), np.array([0, 0]), 2)
    assert out.tolist() == [3, np.iinfo(np.int32).min]


def test_make_jaxpr_and_jacobian():
    prog = ember.make_jaxpr(lambda x: jnp.sin(x) * 2)(1.0)
    assert "sin" in str(prog) and "mul" in str(prog)
    prog, shape = ember.make_jaxpr(lambda x: x[:2], return_shape=True)(jnp.ones(4))
    assert shape.shape == (2,)
    a = RNG.normal(size=(3, 3))
    np.testing.assert_allclose(ember.jacobian(lambda x: jnp.tanh(a @ x))(np.ones(3)),
                               (1 - np.tanh(a @ np.ones(3)) ** 2)[:, None] * a, rtol=1e-10)


def test_devices_and_config():
    assert len(ember.devices()) == 1 and ember.devices()[0].platform == "cpu"
    assert ember.local_devices() == ember.devices() and ember.device_count() == 1
    assert ember.process_index() == 0 and ember.process_count() == 1
    ember.config.update("jax_platforms", "cpu")
    ember.config.update("jax_log_compiles", False)
    assert ember.config.jax_platforms == "cpu"
    with pytest.raises(ValueError, match="no setting 'jax_not_a_setting'"):
        ember.config.update("jax_not_a_setting", 1)
    with pytest.raises(ValueError, match="CPU"):
        ember.config.update("jax_platforms", "gpu")


def test_named_call_and_compile_time_eval():
    f = ember.named_call(lambda x: x + 1, name="plus_one")
    assert f.__name__ == "plus_one" and float(ember.jit(f)(1.0)) == 2.0

    @ember.jit
    def g(x):
        with ember.ensure_compile_time_eval():
            n = int(jnp.sum(jnp.arange(4)))  # concrete inside jit
        return x * n

    assert float(g(2.0)) == 12.0
    step = ember.checkpoint(lambda x: jnp.sin(x) * x, policy=ember.checkpoint_policies.dots_saveable)
    np.testing.assert_allclose(ember.grad(step)(0.5), np.cos(0.5) * 0.5 + np.sin(0.5), rtol=1e-6)


def test_custom_vmap_rule_used_under_vmap_only():
    calls = []

    @custom_vmap
    def f(x, y):
        return jnp.sin(x) + y

    @f.def_vmap
    def rule(axis_size, in_batched, x, y):
        calls.append((axis_size, tuple(in_batched)))
        return jnp.sin(x) + y + 100.0, True  # a marker we can see

    x = RNG.normal(size=(4,))
    np.testing.assert_allclose(f(x[0], 1.0), np.sin(x[0]) + 1, rtol=1e-12)
    out = ember.vmap(f, in_axes=(0, None))(x, 1.0)
    np.testing.assert_allclose(out, np.sin(x) + 101.0, rtol=1e-12)
    assert calls == [(4, (True, False))]
    np.testing.assert_allclose(ember.jit(ember.vmap(f, in_axes=(0, None)))(x, 1.0), np.sin(x) + 101.0)


def test_typing_aliases():
    from ember.typing import ArrayLike, DTypeLike  # noqa: F401

    def f(x: ArrayLike) -> ArrayLike:
        return x

    assert f(1.0) == 1.0


def test_config_routes_registry_flags(monkeypatch):
    import sys
    import types

    state = {"jax_demo_flag": False}
    fake = types.ModuleType("ember._src.flags")
    fake.FLAGS = state
    fake.get = state.__getitem__
    fake.set_flag = state.__setitem__
    monkeypatch.setitem(sys.modules, "ember._src.flags", fake)
    ember.config.update("jax_demo_flag", True)
    assert state["jax_demo_flag"] is True and ember.config.jax_demo_flag is True
    with pytest.raises(ValueError, match="jax_demo_flag"):  # the known names include the registry's
        ember.config.update("jax_unknown_setting", 1)
