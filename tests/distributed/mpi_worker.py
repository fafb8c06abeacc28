"""Run under ``mpirun -n N``: one scenario of ember.distributed, checked against NumPy on every
process (each process can compute the reference, since every rank's data is known). Prints
``OK <rank>`` when every check passed."""

from __future__ import annotations

import sys

import numpy as np

import ember
import ember.distributed as dist
import ember.numpy as jnp


def _data(rank: int) -> dict:
    rng = np.random.default_rng(100 + rank)
    return {"w": rng.standard_normal((3, 5)).astype(np.float32), "b": rng.standard_normal(7),
            "i": rng.integers(-1000, 1000, (4,)).astype(np.int32), "z": np.zeros((0, 2), np.float32)}


def collectives() -> None:
    r, n = dist.process_index(), dist.process_count()
    mine, every = _data(r), [_data(k) for k in range(n)]
    for op, ref in (("sum", np.sum), ("max", np.max), ("min", np.min), ("mean", np.mean)):
        got = dist.all_reduce(mine, op, bucket_bytes=64)  # tiny buckets: several calls
        for k in mine:
            want = ref(np.stack([e[k] for e in every]), axis=0)
            if k == "i":
                want = (np.sum(np.stack([e[k] for e in every]), axis=0) // n) if op == "mean" else want
                assert np.array_equal(np.asarray(got[k]), want.astype(np.int32)), (op, k)  # integers exact
            else:
                np.testing.assert_allclose(np.asarray(got[k]), want, rtol=1e-6, err_msg=f"{op} {k}")
    small = {"u8": np.full(4, 200, np.uint8), "i16": np.full(3, 30000 - 7 * r, np.int16)}
    got = dist.all_reduce(small, "sum")  # 8/16-bit sums wrap as NumPy's (Open MPI's saturate)
    assert np.array_equal(np.asarray(got["u8"]), np.sum(np.stack([small["u8"]] * n), axis=0, dtype=np.uint8))
    i16 = np.stack([np.full(3, 30000 - 7 * k, np.int16) for k in range(n)])
    assert np.array_equal(np.asarray(got["i16"]), np.sum(i16, axis=0, dtype=np.int16))
    assert np.array_equal(np.asarray(dist.all_reduce(small, "mean")["u8"]), small["u8"])  # exact in 64 bits
    g = dist.all_gather(mine["w"])
    np.testing.assert_array_equal(g, np.stack([e["w"] for e in every]))
    b = dist.broadcast(mine, root=n - 1)
    np.testing.assert_array_equal(b["b"], every[n - 1]["b"])
    part = np.arange(r + 2, dtype=np.float32) + 10 * r  # different sizes per process
    got = dist.gather(part)
    if r == 0:
        np.testing.assert_array_equal(got, np.concatenate([np.arange(k + 2) + 10 * k for k in range(n)]))
    else:
        assert got is None
    s = dist.shard(np.arange(10))
    sizes = dist.all_gather(np.array([np.asarray(s).size]))
    assert int(np.asarray(sizes).sum()) == 10
    try:
        dist.all_reduce({"x": np.ones(r + 1)}, check=True)  # mismatched shapes are named
        raise AssertionError("mismatch not detected")
    except dist.DistributedError as e:
        assert "all_reduce(sum)" in str(e)
    dist.barrier()


def _spirals(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    t = rng.uniform(0.25, 3.0, n)
    k = rng.integers(0, 2, n)
    ang = t * 2.5 + k * np.pi
    x = np.stack([t * np.cos(ang), t * np.sin(ang)], 1) + rng.normal(0, 0.05, (n, 2))
    return x.astype(np.float32), k.astype(np.float32)


def _init() -> dict:
    rng = np.random.default_rng(7)
    return {"w1": (rng.standard_normal((2, 32)) * 0.5).astype(np.float32), "b1": np.zeros(32, np.float32),
            "w2": (rng.standard_normal((32, 1)) * 0.5).astype(np.float32), "b2": np.zeros(1, np.float32)}


def _loss(p, x, y):
    h = jnp.tanh(x @ p["w1"] + p["b1"])
    logit = (h @ p["w2"] + p["b2"])[:, 0]
    return jnp.mean(jnp.logaddexp(0.0, logit) - y * logit)


def train() -> None:
    n = dist.process_count()
    x, y = _spirals(64 * n)
    vg = ember.jit(ember.value_and_grad(_loss))
    step = dist.data_parallel(vg, bucket_bytes=1024)
    xs, ys = dist.shard(x), dist.shard(y)
    p_dist, p_one = _init(), _init()
    for it in range(25):
        loss_d, g_d = step(p_dist, xs, ys)
        loss_1, g_1 = vg(p_one, x, y)  # one process, the full batch
        np.testing.assert_allclose(float(loss_d), float(loss_1), rtol=1e-4, err_msg=f"step {it}")
        p_dist = ember.tree.map(lambda a, g: a - 0.5 * g, p_dist, g_d)
        p_one = ember.tree.map(lambda a, g: a - 0.5 * g, p_one, g_1)
    for k in p_one:
        np.testing.assert_allclose(np.asarray(p_dist[k]), np.asarray(p_one[k]), rtol=1e-4, atol=1e-5)
    dist.check_identical(p_dist)


def fail() -> None:
    if dist.process_index() == 1:
        raise ValueError("process 1 failed on purpose")
    dist.all_reduce({"x": np.ones(3)})  # would wait forever for process 1 without the abort


if __name__ == "__main__":
    dist.initialize()
    {"collectives": collectives, "train": train, "fail": fail}[sys.argv[1]]()
    print(f"OK {dist.process_index()}", flush=True)
