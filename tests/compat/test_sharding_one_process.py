"""JAX's sharding API in one process without MPI: every mesh has one device and programs written
for several run unchanged (the multi-process runs are ``tests/distributed/test_sharding.py``).
References: NumPy, and JAX itself for the sharding objects' shapes where it is installed."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember.sharding import AxisType, Mesh, NamedSharding, P, PartitionSpec, SingleDeviceSharding, reshard

RNG = np.random.RandomState(3)
X = RNG.randn(8, 4).astype(np.float32)
W = RNG.randn(4, 2).astype(np.float32)


@pytest.fixture
def mesh():
    return ember.make_mesh((1,), ("batch",), axis_types=(AxisType.Explicit,))


def test_one_device_and_a_mesh_of_one(mesh):
    assert ember.device_count() == 1 and ember.process_count() == 1 and ember.process_index() == 0
    assert isinstance(mesh, Mesh) and mesh.shape == {"batch": 1} and mesh.axis_names == ("batch",)
    with ember.set_mesh(mesh):
        assert ember.sharding.get_abstract_mesh() is mesh
    assert ember.sharding.get_mesh() is None
    with pytest.raises(ValueError, match="need 2 devices"):
        ember.make_mesh((2,), ("batch",))


def test_specs_and_shardings(mesh):
    assert P("batch", None) == PartitionSpec("batch", None) and P() == ()
    with pytest.raises(TypeError):
        P(3)
    with pytest.raises(ValueError, match="not an axis"):
        NamedSharding(mesh, P("model"))
    s = NamedSharding(mesh, P("batch"))
    assert s.shard_shape((8, 4)) == (8, 4) and s.num_devices == 1 and s.is_fully_addressable
    assert s == NamedSharding(mesh, P("batch", None)) and s != NamedSharding(mesh, P(None, "batch"))


def test_device_put_shards_and_plain_arrays(mesh):
    xs = ember.device_put(X, NamedSharding(mesh, P("batch")))
    assert xs.shape == X.shape and xs.sharding == NamedSharding(mesh, P("batch"))
    (shard,) = xs.addressable_shards
    np.testing.assert_array_equal(np.asarray(shard.data), X)
    assert shard.index == (slice(None), slice(None)) and shard.device == ember.devices()[0]
    np.testing.assert_array_equal(np.asarray(xs), X)
    plain = ember.device_put(X)
    assert isinstance(plain.sharding, SingleDeviceSharding) and plain.devices() == set(ember.devices())
    params = ember.device_put([(W, W[0])], NamedSharding(mesh, P()))
    np.testing.assert_array_equal(np.asarray(params[0][1]), W[0])


def test_jit_grad_over_sharded_inputs_matches_numpy(mesh):
    rows, rep = NamedSharding(mesh, P("batch")), NamedSharding(mesh, P())

    def loss(w, x):
        return jnp.mean(jnp.tanh(x @ w) ** 2)

    g = ember.jit(ember.grad(loss))(ember.device_put(W, rep), ember.device_put(X, rows))
    t = np.tanh(X @ W)
    np.testing.assert_allclose(np.asarray(g), X.T @ (2 * t * (1 - t * t)) / t.size, rtol=1e-5, atol=1e-6)
    y = ember.jit(lambda w, x: x @ w)(ember.device_put(W, rep), ember.device_put(X, rows))
    assert y.sharding == rows  # the batch split follows the rows through the product
    np.testing.assert_allclose(np.asarray(reshard(y, rep)), X @ W, rtol=1e-5, atol=1e-6)


def test_shard_map_collectives_on_a_mesh_of_one(mesh):
    def body(x):
        return lax.psum(jnp.sum(x, 0), "batch"), lax.axis_index("batch"), lax.all_gather(x, "batch")

    for f in (ember.shard_map(body, mesh=mesh, in_specs=P("batch"), out_specs=(P(), P(), P())),
              ember.jit(ember.shard_map(body, mesh=mesh, in_specs=P("batch"), out_specs=(P(), P(), P())))):
        total, idx, gathered = f(X)
        np.testing.assert_allclose(np.asarray(total), X.sum(0), rtol=1e-6)
        assert int(idx) == 0
        np.testing.assert_array_equal(np.asarray(gathered), X[None])


def test_lax_collectives_still_need_an_enclosing_axis():
    with pytest.raises(NameError, match="unbound axis name"):
        lax.psum(jnp.ones(3), "batch")
    np.testing.assert_allclose(np.asarray(ember.vmap(lambda v: lax.psum(v, "i"), axis_name="i")(X[:, 0])),
                               np.full(8, X[:, 0].sum()), rtol=1e-6)
