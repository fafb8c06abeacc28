"""Run under ``mpirun -n N``: the process collectives of ``ember.distributed.spmd`` as native steps
(MPI called from C inside the jitted program's native call), against NumPy on every process (each
rank rebuilds every rank's data), for float and integer dtypes (integers bit-exact); the schedule
must hold the MPI steps and no fallback step. Prints ``OK <rank>`` when every check passed."""

from __future__ import annotations

import sys

import numpy as np

import ember
import ember.numpy as jnp
from ember import distributed as dist
from ember._src.distributed import spmd as sp
from ember._src.native.emit import mpi_calls

DTYPES = (np.float32, np.float64, np.int32, np.int64, np.uint8)


def _x(rank: int, n: int, dtype: type) -> np.ndarray:
    rng = np.random.default_rng(11 + rank)
    shape = (2 * n, 3)  # the leading axis splits into n blocks for psum_scatter(tiled=True)
    if np.issubdtype(dtype, np.integer):
        hi = 255 // n if dtype == np.uint8 else 1 << 20
        return rng.integers(0, hi, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _native(f, *args) -> str:
    """The schedule of jitted ``f`` on ``args``; fails unless its collectives are native MPI steps."""
    exe = f.lower(*args).executable
    sched = str(exe.schedule)
    assert "em_mpi_step(" in exe.source, sched
    assert "pure_callback" not in str(exe.optimized) and "0 fallback" in sched, sched
    return sched


def _check(got, want, dtype) -> None:
    got = np.asarray(got)
    assert got.dtype == np.dtype(dtype), (got.dtype, dtype)
    if np.issubdtype(dtype, np.integer):
        assert np.array_equal(got, want.astype(dtype)), (got, want)  # integers bit-exact
    else:
        np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == np.float32 else 1e-12, atol=1e-6)


def collectives() -> None:
    assert mpi_calls.unavailable_reason() is None, mpi_calls.unavailable_reason()
    r, n = dist.process_index(), dist.process_count()
    ring = [(k, (k + 1) % n) for k in range(n)]
    partial = [(0, n - 1)]  # only the last process receives; the others get zeros

    def body(x):
        return (sp.psum(x, "data"), sp.pmax(x, "data"), sp.pmin(x, "data"), sp.pmean(x, "data"),
                sp.all_gather(x, "data"), sp.all_gather(x, "data", axis=1, tiled=True),
                sp.psum_scatter(x, "data", tiled=True), sp.psum_scatter(x[:n], "data"),
                sp.ppermute(x, "data", ring), sp.ppermute(x, "data", partial),
                sp.psum(x * 2 + 1, "data"))  # an intermediate operand: may be reduced in place

    for dtype in DTYPES:
        every = np.stack([_x(k, n, dtype) for k in range(n)])
        x = every[r]
        total = every.sum(0, dtype=every.dtype)
        want = [total, every.max(0), every.min(0),
                total / n if np.issubdtype(dtype, np.floating) else total // n,
                every, np.concatenate(list(every), axis=1),
                total[2 * r:2 * r + 2], total[r], every[(r - 1) % n],
                every[0] if r == n - 1 else np.zeros_like(x),
                (every * 2 + 1).sum(0, dtype=every.dtype)]
        f = ember.jit(sp.spmd(body, "data"))
        sched = _native(f, x)
        assert sched.count("call process_") == 11, sched
        for got, w in zip(f(x), want):
            _check(got, w, dtype)
        for got, w in zip(f(x), want):  # the warm call (the C dispatcher's path)
            _check(got, w, dtype)
        if dtype == np.float32:  # the same through the host-callback path, and eagerly
            fc = ember.jit(sp.spmd(body, "data", collectives="callback"))
            assert "pure_callback" in str(fc.lower(x).executable.optimized)
            for got, w in zip(fc(x), want):
                _check(got, w, dtype)
            for got, w in zip(sp.spmd(body, "data")(x), want):
                _check(got, w, dtype)

    # an all-reduce whose result reuses its operand's arena buffer runs with MPI_IN_PLACE
    every = np.stack([_x(k, n, np.float32) for k in range(n)])
    fi = ember.jit(sp.spmd(lambda v: sp.psum(v * 2 + 1, "data") * 3, "data"))
    call = next(ln for ln in fi.lower(every[r]).executable.source.splitlines() if "em_mpi_step(0," in ln)
    args = call[call.index("em_mpi_step(") + len("em_mpi_step("):].split(", ")
    assert args[2] == args[3] and "arena" in args[2], call  # send buffer == receive buffer
    _check(fi(every[r]), (every * 2 + 1).sum(0) * 3, np.float32)

    # vmap inside spmd: the batch rules of the primitives
    every = np.stack([_x(k, n, np.float32) for k in range(n)])
    x = every[r]
    vm = ember.jit(sp.spmd(ember.vmap(lambda row: (sp.psum(row, "data"), sp.all_gather(row, "data"),
                                                   sp.ppermute(row, "data", ring))), "data"))
    _native(vm, x)
    s, g, p = vm(x)
    _check(s, every.sum(0), np.float32)
    _check(g, np.moveaxis(every, 0, 1), np.float32)
    _check(p, every[(r - 1) % n], np.float32)
    vs = ember.jit(sp.spmd(ember.vmap(lambda m: sp.psum_scatter(m, "data"), in_axes=1), "data"))
    xs = x[:n]  # (n, 3): mapped over axis 1, each slice has one row per process
    _native(vs, xs)
    _check(vs(xs), every[:, :n].sum(0)[r], np.float32)

    # inside a scan body (a loop compiled into the same native call)
    def step(c, _):
        c = sp.psum(c, "data") * 0.5
        return c, sp.pmax(c, "data")

    sc = ember.jit(sp.spmd(lambda v: ember.lax.scan(step, v, None, length=3), "data"))
    assert "em_mpi_step(" in sc.lower(x).executable.source
    c, ys = sc(x)
    want_c, want_ys = every.sum(0) * 0.5, []  # after the first step every process has this carry
    for k in range(3):
        if k:
            want_c = want_c * n * 0.5  # the sum of n equal carries, halved
        want_ys.append(want_c)
    _check(c, want_c, np.float32)
    _check(ys, np.stack(want_ys), np.float32)
    print(f"OK {r}", flush=True)


def gradients() -> None:
    """grad through the native steps against the transposes and finite differences."""
    r, n = dist.process_index(), dist.process_count()
    every = np.stack([_x(k, n, np.float64) for k in range(n)])
    x = every[r]
    w = np.float64(r + 1)
    ring = [(k, (k + 1) % n) for k in range(n)]

    def loss(x):  # summed over processes: psum's transpose is psum
        return jnp.sum(w * sp.psum(x, "data") ** 2)

    g = ember.jit(sp.spmd(ember.grad(loss), "data"))
    _native(g, x)
    np.testing.assert_allclose(np.asarray(g(x)), 2 * sum(k + 1 for k in range(n)) * every.sum(0), rtol=1e-12)

    def loss2(x):  # psum_scatter's transpose is all_gather; ppermute's is the inverse permutation
        return jnp.sum(sp.psum_scatter(x, "data", tiled=True) * w) + \
            jnp.sum(sp.ppermute(x, "data", ring) ** 2 * w)

    g2 = ember.jit(sp.spmd(ember.grad(loss2), "data"))
    _native(g2, x)
    # row block q of x is summed into process q's part (weight q + 1); x goes to process r + 1
    want = np.repeat([k + 1.0 for k in range(n)], 2)[:, None] + 2 * x * ((r + 1) % n + 1)
    np.testing.assert_allclose(np.asarray(g2(x)), want, rtol=1e-12)

    # finite differences of the loss summed over processes, perturbing process 0's input
    f = ember.jit(sp.spmd(loss, "data"))
    eps = 1e-4
    d = np.zeros_like(x)
    d[1, 2] = eps
    lp = float(np.asarray(dist.all_reduce(f(x + d * (r == 0)))))
    lm = float(np.asarray(dist.all_reduce(f(x - d * (r == 0)))))
    g0 = np.asarray(dist.broadcast(g(x), root=0))
    np.testing.assert_allclose((lp - lm) / (2 * eps), g0[1, 2], rtol=1e-6)

    def loss3(v):  # the primitives' transposes (native) against the custom_vjp rules (callback)
        return (jnp.sum(sp.psum_scatter(v, "data", tiled=True) ** 2 * w)
                + jnp.sum(sp.ppermute(v, "data", ring) ** 3)
                + jnp.sum(sp.all_gather(v, "data") * 2.0) + jnp.sum(sp.pmax(v, "data") * v))

    native, callback = (np.asarray(ember.jit(sp.spmd(ember.grad(loss3), "data", collectives=m))(x))
                        for m in ("native", "callback"))
    np.testing.assert_allclose(native, callback, rtol=1e-12)
    print(f"OK {r}", flush=True)


def forward() -> None:
    """jvp through the native steps (the primitives' own JVP rules) against the NumPy definitions:
    a linear collective carries the tangent through the same collective; pmax's tangent is the
    maximising process's; a composite's tangent matches central differences."""
    r, n = dist.process_index(), dist.process_count()
    every = np.stack([_x(k, n, np.float64) for k in range(n)])
    tang = np.stack([_x(k + 50, n, np.float64) for k in range(n)])
    x, t = every[r], tang[r]
    ring = [(k, (k + 1) % n) for k in range(n)]

    def coll(v):
        return (sp.psum(v, "data"), sp.pmean(v, "data"), sp.pmax(v, "data"),
                sp.all_gather(v, "data"), sp.psum_scatter(v, "data", tiled=True),
                sp.ppermute(v, "data", ring))

    f = ember.jit(sp.spmd(lambda v, dv: ember.jvp(coll, (v,), (dv,)), "data"))
    _native(f, x, t)
    outs, touts = f(x, t)
    who = every.argmax(0)  # distinct random values: one maximising process per element
    want_t = [tang.sum(0), tang.mean(0), np.take_along_axis(tang, who[None], 0)[0], tang,
              tang.sum(0).reshape(n, 2, 3)[r], tang[(r - 1) % n]]
    want = [every.sum(0), every.mean(0), every.max(0), every, every.sum(0).reshape(n, 2, 3)[r],
            every[(r - 1) % n]]
    for got, w in zip(outs, want):
        np.testing.assert_allclose(np.asarray(got), w, rtol=1e-12)
    for got, w in zip(touts, want_t):
        np.testing.assert_allclose(np.asarray(got), w, rtol=1e-12)

    # ties: every process holds the maximum, the tangent is the mean of theirs
    tie = ember.jit(sp.spmd(lambda v, dv: ember.jvp(lambda a: sp.pmax(a, "data"), (v,), (dv,))[1], "data"))
    np.testing.assert_allclose(np.asarray(tie(np.ones_like(x), t)), tang.mean(0), rtol=1e-12)

    def net(v):  # a function of this process's input whose value mixes every process's
        return jnp.tanh(sp.psum(v * v, "data") + sp.ppermute(v, "data", ring) * sp.pmax(v, "data"))

    # jvp of the composite against central differences, every process moving along its tangent
    jv = ember.jit(sp.spmd(lambda v, dv: ember.jvp(net, (v,), (dv,))[1], "data"))
    f = ember.jit(sp.spmd(net, "data"))
    eps = 1e-6
    fd = (np.asarray(f(x + eps * t)) - np.asarray(f(x - eps * t))) / (2 * eps)
    np.testing.assert_allclose(np.asarray(jv(x, t)), fd, rtol=1e-6, atol=1e-8)
    print(f"OK {r}", flush=True)


def fallback() -> None:
    """Where MPI's C functions cannot be found, the collectives are fallback steps (mpi4py) that
    give the same results, and the reason is reported."""
    r, n = dist.process_index(), dist.process_count()
    mpi_calls._MPI_FUNCTIONS += ("MPI_No_such_function",)
    mpi_calls.library.cache_clear()
    assert "MPI_No_such_function not found" in (mpi_calls.unavailable_reason() or ""), \
        mpi_calls.unavailable_reason()
    every = np.stack([_x(k, n, np.int32) for k in range(n)])
    f = ember.jit(sp.spmd(lambda v: (sp.psum(v, "data"), sp.all_gather(v, "data")), "data"))
    exe = f.lower(every[r]).executable
    assert "em_mpi_step(" not in exe.source and "2 fallback" in str(exe.schedule), str(exe.schedule)
    s, g = f(every[r])
    _check(s, every.sum(0), np.int32)
    _check(g, every, np.int32)
    print(f"OK {r}", flush=True)


if __name__ == "__main__":
    ember.config.update("jax_enable_x64", True)  # float64 and int64 kept, as in the test suite
    dist.initialize()
    {"collectives": collectives, "gradients": gradients, "forward": forward,
     "fallback": fallback}[sys.argv[1]]()
