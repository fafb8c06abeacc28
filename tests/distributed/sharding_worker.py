"""Run under ``mpirun -n N`` by ``test_sharding.py`` (also runs in one process): JAX's sharding API
over the processes against NumPy on the whole arrays. Prints ``OK <rank>`` at the end; with
``--then PROGRAM`` it then runs that program in the same processes (saving a launch)."""

from __future__ import annotations

import sys

import numpy as np

import ember
import ember.numpy as jnp
from ember import lax
from ember.sharding import NamedSharding, P, reshard

n, r = ember.process_count(), ember.process_index()
rng = np.random.RandomState(0)  # the same data on every process
B = 6 * n  # rows: divisible by the process count
x = rng.randn(B, 5).astype(np.float32)
y = rng.randn(B, 3).astype(np.float32)
w = (0.3 * rng.randn(5, 3)).astype(np.float32)
close = dict(rtol=2e-5, atol=2e-6)


def block(a: np.ndarray, axis: int = 0) -> np.ndarray:
    k = a.shape[axis] // n
    return np.take(a, np.arange(r * k, (r + 1) * k), axis=axis)


# -- meshes, shardings, placement ---------------------------------------------------------------
assert ember.device_count() == n and len(ember.devices()) == n and ember.local_device_count() == 1
mesh = ember.make_mesh((n,), ("batch",), axis_types=(ember.sharding.AxisType.Explicit,))
assert mesh.shape == {"batch": n} and mesh.size == n
rows, rep = NamedSharding(mesh, P("batch")), NamedSharding(mesh, P())
assert rows.shard_shape((B, 5)) == (6, 5) and rep.shard_shape((B, 5)) == (B, 5)
xs, ws = ember.device_put(x, rows), ember.device_put(w, rep)
assert xs.shape == (B, 5) and xs.sharding == rows and ws.sharding.is_fully_replicated
(shard,) = xs.addressable_shards
np.testing.assert_array_equal(np.asarray(shard.data), block(x))
np.testing.assert_array_equal(np.asarray(shard.data), x[shard.index])
assert shard.device.id == r
np.testing.assert_array_equal(np.asarray(reshard(xs, rep)), x)
cols = NamedSharding(mesh, P(None, "batch"))
xt = ember.device_put(rng.randn(6, 3 * n).astype(np.float32), cols)
np.testing.assert_array_equal(np.asarray(reshard(reshard(xt, rows), rep)), np.asarray(reshard(xt, rep)))
if n > 1:
    try:
        np.asarray(xs)
        raise AssertionError("np.asarray of a split array must refuse")
    except ValueError as e:
        assert "reshard" in str(e)

# -- eager operations on sharded arrays: the global values ---------------------------------------
np.testing.assert_allclose(float(jnp.sum(xs)), x.sum(), **close)
np.testing.assert_allclose(np.asarray(jnp.max(xs, axis=0)), x.max(0), **close)
t2 = xs * 2 + 1
assert t2.sharding == rows
np.testing.assert_allclose(np.asarray(t2.addressable_shards[0].data), block(x) * 2 + 1, **close)


# -- jit over sharded inputs: data parallelism --------------------------------------------------
def loss(w, x, y):
    return jnp.mean((jnp.tanh(x @ w) - y) ** 2)


def np_grad(w, x, y):
    t = np.tanh(x @ w)
    return x.T @ (2 * (t - y) * (1 - t * t)) / (x.shape[0] * y.shape[1])


step = ember.jit(ember.value_and_grad(loss))
ys = ember.device_put(y, rows)
lv, g = step(ws, xs, ys)
assert g.sharding.is_fully_replicated and g.shape == (5, 3)
np.testing.assert_allclose(float(lv), np.mean((np.tanh(x @ w) - y) ** 2), **close)
np.testing.assert_allclose(np.asarray(g), np_grad(w, x, y), **close)
# the per-process program contracts the split batch locally and sums across processes: no gather
(inner, _), = step._sharded_programs.values()
prog = str(ember.make_jaxpr(inner.fun)(w, block(x), block(y)))
assert "process_all_gather" not in prog, prog
assert (prog.count("process_allreduce") >= 2) == (n > 1), prog

# a softmax cross-entropy (logsumexp: max, stop_gradient, exp, log) is data parallel too
def xent(w, x, y):
    logits = x @ w
    return -jnp.mean(jnp.sum((logits - ember.scipy.special.logsumexp(logits, axis=1, keepdims=True)) * y, 1))


def np_xent_grad(w, x, y):
    z = x @ w
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    return x.T @ (p * y.sum(1, keepdims=True) - y) / x.shape[0]


xg = ember.jit(ember.grad(xent))
np.testing.assert_allclose(np.asarray(xg(ws, xs, ys)), np_xent_grad(w, x, y), **close)
(inner, _), = xg._sharded_programs.values()
prog = str(ember.make_jaxpr(inner.fun)(w, block(x), block(y)))
assert "process_all_gather" not in prog, prog

out = ember.jit(lambda w, x: jnp.tanh(x @ w))(ws, xs)
assert out.sharding == rows and out.shape == (B, 3)
np.testing.assert_allclose(np.asarray(out.addressable_shards[0].data), block(np.tanh(x @ w)), **close)

# a few SGD steps on the split batch == full-batch SGD in NumPy
wn, wsgd = w.copy(), ws
for _ in range(4):
    wsgd = ember.jit(lambda w, x, y: w - 0.5 * ember.grad(loss)(w, x, y))(wsgd, xs, ys)
    wn = wn - 0.5 * np_grad(wn, x, y)
np.testing.assert_allclose(np.asarray(wsgd), wn, **close)

# -- shard_map: blocks in, collectives over the mesh axis, global arrays out --------------------


def body(xb):
    total = lax.psum(jnp.sum(xb, axis=0), "batch")
    return total, xb - lax.pmean(jnp.mean(xb, axis=0), "batch"), lax.axis_index("batch") + 0 * xb[:, 0]


sm = ember.shard_map(body, mesh=mesh, in_specs=P("batch"), out_specs=(P(), P("batch"), P("batch")))
for f in (sm, ember.jit(sm)):
    tot, centred, idx = f(x)
    np.testing.assert_allclose(np.asarray(tot), x.sum(0), **close)
    np.testing.assert_allclose(np.asarray(reshard(centred, rep)), x - x.mean(0), **close)
    np.testing.assert_array_equal(np.asarray(reshard(idx, rep)), np.repeat(np.arange(n), 6))
gathered = ember.shard_map(lambda b: lax.all_gather(b, "batch", tiled=True), mesh=mesh,
                           in_specs=P("batch"), out_specs=P())(xs)
np.testing.assert_array_equal(np.asarray(gathered), x)
shifted = ember.shard_map(lambda b: lax.ppermute(b, "batch", [(i, (i + 1) % n) for i in range(n)]),
                          mesh=mesh, in_specs=P("batch"), out_specs=P("batch"))(xs)
np.testing.assert_array_equal(np.asarray(reshard(shifted, rep)), np.roll(x, 6, axis=0))
# a data-parallel gradient written with shard_map and lax.pmean, under jit
g_sm = ember.jit(ember.shard_map(lambda w, xb, yb: lax.pmean(ember.grad(loss)(w, xb, yb), "batch"),
                                 mesh=mesh, in_specs=(P(), P("batch"), P("batch")), out_specs=P()))(w, x, y)
np.testing.assert_allclose(np.asarray(g_sm), np_grad(w, x, y), **close)

# -- lax collectives inside ember.distributed.spmd (one family of names) -------------------------
if "--spmd" in sys.argv:
    import ember.distributed as dist

    v = np.float32(r + 1)
    mean_ref = np.mean(np.arange(1, n + 1, dtype=np.float32))
    for f in (dist.spmd(lambda a: lax.pmean(a, "data"), axis_name="data"),
              ember.jit(dist.spmd(lambda a: lax.pmean(a, "data"), axis_name="data"))):
        np.testing.assert_allclose(float(f(v)), mean_ref, **close)  # a 0-d operand keeps its shape
    gd = ember.jit(dist.spmd(lambda w, xb, yb: lax.pmean(ember.grad(loss)(w, xb, yb), "data"), "data"))
    np.testing.assert_allclose(np.asarray(gd(w, block(x), block(y))), np_grad(w, x, y), **close)
    # a vmap of the same name inside spmd binds its own axis; another name reaches the processes
    inner_v = dist.spmd(ember.vmap(lambda a: lax.psum(a, "data"), axis_name="data"), "data")
    np.testing.assert_allclose(np.asarray(inner_v(jnp.arange(3.0))), [3.0, 3.0, 3.0])
    outer = dist.spmd(ember.vmap(lambda a: lax.psum(a, "data"), axis_name="v"), "data")
    np.testing.assert_allclose(np.asarray(outer(jnp.arange(3.0))), n * np.arange(3.0))
    assert int(dist.spmd(lambda: lax.axis_index("data"), "data")()) == r

print("OK", r, flush=True)

if "--then" in sys.argv:  # then a program (JAX's example with its imports changed) in this process
    import runpy

    runpy.run_path(sys.argv[sys.argv.index("--then") + 1], run_name="__main__")
