"""Run under ``mpirun -n N``: collectives over a named process axis (ember.distributed.spmd) inside
jit, grad and vmap, checked against NumPy on every process (each rank can rebuild every rank's data).
Prints ``OK <rank>`` when every check passed."""

from __future__ import annotations

import sys

import numpy as np

import ember
import ember.numpy as jnp
from ember import distributed as dist
from ember._src.distributed import spmd as sp


def _x(rank: int) -> np.ndarray:
    return np.random.default_rng(7 + rank).standard_normal((3, 4)).astype(np.float32)


def collectives() -> None:
    r, n = dist.process_index(), dist.process_count()
    every = np.stack([_x(k) for k in range(n)])
    x = _x(r)

    def body(x):
        return (sp.psum(x, "data"), sp.pmean(x, "data"), sp.pmax(x, "data"), sp.pmin(x, "data"),
                sp.all_gather(x, "data"), sp.all_gather(x, "data", axis=1, tiled=True),
                sp.axis_index("data"))

    for f in (sp.spmd(body, "data"), ember.jit(sp.spmd(body, "data")), sp.spmd(ember.jit(body), "data")):
        s, m, mx, mn, g, gt, i = f(x)
        np.testing.assert_allclose(np.asarray(s), every.sum(0), rtol=1e-5)
        np.testing.assert_allclose(np.asarray(m), every.mean(0), rtol=1e-5)
        np.testing.assert_array_equal(np.asarray(mx), every.max(0))
        np.testing.assert_array_equal(np.asarray(mn), every.min(0))
        np.testing.assert_array_equal(np.asarray(g), every)
        np.testing.assert_array_equal(np.asarray(gt), np.concatenate(list(every), axis=1))
        assert int(i) == r
    ints = np.arange(6, dtype=np.int32) * (r + 1) + 2**30 // n
    got = ember.jit(sp.spmd(lambda v: sp.psum(v, "data"), "data"))(ints)
    want = sum(np.arange(6, dtype=np.int32) * (k + 1) + 2**30 // n for k in range(n)).astype(np.int32)
    assert np.asarray(got).dtype == np.int32 and np.array_equal(np.asarray(got), want)  # integers exact

    # vmap inside spmd: the reduction acts on every mapped slice
    vm = ember.jit(sp.spmd(ember.vmap(lambda row: sp.psum(row * 2.0, "data")), "data"))(x)
    np.testing.assert_allclose(np.asarray(vm), 2 * every.sum(0), rtol=1e-5)

    # grad: loss_p = sum(w_p * psum(x)^2); d(sum_p loss_p)/dx_q = psum(2 * w_p * psum(x))
    w = np.float32(r + 1)

    def loss(x):
        return jnp.sum(w * sp.psum(x, "data") ** 2)

    gx = ember.jit(sp.spmd(ember.grad(loss), "data"))(x)
    want = 2 * sum(k + 1 for k in range(n)) * every.sum(0)
    np.testing.assert_allclose(np.asarray(gx), want, rtol=1e-5)

    def loss2(x):  # all_gather's transpose is psum_scatter; pmax sends the gradient to the argmax
        return jnp.sum(sp.all_gather(x, "data") * (np.arange(n, dtype=np.float32)[:, None, None] + w)) + \
            jnp.sum(sp.pmax(x, "data")) + jnp.sum(sp.pmean(x, "data") * w)

    g2 = ember.jit(sp.spmd(ember.grad(loss2), "data"))(x)
    want2 = sum(r + k + 1 for k in range(n)) + n * (every.max(0) == x) + sum(k + 1 for k in range(n)) / n
    np.testing.assert_allclose(np.asarray(g2), want2, rtol=1e-5)

    # finite differences of the summed loss on process 0's input (every process perturbs the same way)
    eps = 1e-2
    f = ember.jit(sp.spmd(loss, "data"))
    d = np.zeros_like(x)
    d[1, 2] = eps
    lp = float(np.asarray(dist.all_reduce(f(x + d * (r == 0)))))
    lm = float(np.asarray(dist.all_reduce(f(x - d * (r == 0)))))
    g0 = np.asarray(dist.broadcast(gx, root=0))
    np.testing.assert_allclose((lp - lm) / (2 * eps), g0[1, 2], rtol=2e-2)

    try:
        sp.psum(x, "data")
    except NameError as e:
        assert "unbound process axis name 'data'" in str(e)
    else:
        raise AssertionError("psum outside spmd must raise NameError")
    print(f"OK {r}", flush=True)


def mismatch() -> None:
    """In debug mode a shape mismatch raises DistributedError naming the collective on every process."""
    r = dist.process_index()
    ember.set_debug(1)
    for name, coll in (("psum", sp.psum), ("all_gather", sp.all_gather)):
        f = ember.jit(sp.spmd(lambda v, c=coll: c(v, "data"), "data"))
        try:
            f(np.ones((2, 3 + r), np.float32))
        except dist.DistributedError as e:
            assert f"{name}: the processes passed different shapes" in str(e), str(e)
        else:
            raise AssertionError(f"{name} with mismatched shapes did not raise")
    print(f"OK {r}", flush=True)


if __name__ == "__main__":
    dist.initialize()
    {"collectives": collectives, "mismatch": mismatch}[sys.argv[1]]()
