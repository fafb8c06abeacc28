"""ember's thread pool (:mod:`ember._src.native.runtime.threadpool`): the C entry driven directly through a
small test library (every index covered exactly once, thread ids in range and never shared by two
running chunks, nested and concurrent calls, a forked child), and jitted programs whose parallel
loops run on it, compared with their one-thread runs, with the OpenMP fallback and with NumPy."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import sys
from pathlib import Path

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember._src.native import specialize
from ember._src.native.runtime import compiler, threadpool, toolchain
from tests.helpers import run_in_threads
from tests.native.conftest import requires_cc

pytestmark = requires_cc

_DRIVER = r"""
#include <stdint.h>
#include <stdatomic.h>
extern void *dlsym(void *handle, const char *name);
typedef void (*task_t)(void *, int64_t, int64_t, int64_t);
typedef void (*par_t)(task_t, void *, int64_t, int64_t, int64_t);
struct job {
    _Atomic int32_t *count; int32_t *tid_of; int64_t nthreads; par_t par; int nested;
    _Atomic int32_t bad, active[64], inner_calls, chunks;
};
static void inner(void *p, int64_t lo, int64_t hi, int64_t tid) {
    struct job *j = (struct job *)p;
    /* a nested loop runs whole, on the thread that asked for it */
    if (lo != 0 || hi != 7 || tid != 0) atomic_fetch_add(&j->bad, 1);
    atomic_fetch_add(&j->inner_calls, 1);
}
static void task(void *p, int64_t lo, int64_t hi, int64_t tid) {
    struct job *j = (struct job *)p;
    if (tid < 0 || tid >= j->nthreads) { atomic_fetch_add(&j->bad, 1); return; }
    if (atomic_fetch_add(&j->active[tid], 1) != 0) atomic_fetch_add(&j->bad, 1);  /* tid in use */
    for (int64_t i = lo; i < hi; ++i) { atomic_fetch_add(&j->count[i], 1); j->tid_of[i] = (int32_t)tid; }
    if (j->nested) j->par(inner, j, 7, j->nthreads, 4);
    atomic_fetch_add(&j->chunks, 1);
    atomic_fetch_sub(&j->active[tid], 1);
}
/* reps loops over [0, n); returns the number of violations (-1: the pool is not loaded) */
int64_t em_test_run(const char *symbol, int32_t *count, int32_t *tid_of, int64_t n, int64_t nthreads,
                    int64_t chunks, int64_t reps, int nested, int64_t *chunks_run, int64_t *inner_calls) {
    par_t par = (par_t)dlsym((void *)0, symbol);
    if (!par) return -1;
    static struct job jobs[2];
    static _Atomic int slot;
    struct job *j = &jobs[atomic_fetch_add(&slot, 1) & 1];
    for (int t = 0; t < 64; ++t) j->active[t] = 0;
    j->count = (_Atomic int32_t *)count; j->tid_of = tid_of; j->nthreads = nthreads; j->par = par;
    j->nested = nested; j->bad = 0; j->inner_calls = 0; j->chunks = 0;
    for (int64_t r = 0; r < reps; ++r) par(task, j, n, nthreads, chunks);
    *chunks_run = j->chunks; *inner_calls = j->inner_calls;
    return j->bad;
}
"""


def _driver() -> ctypes.CDLL:
    assert threadpool.load(wait=True), "the thread pool library did not build"
    lib = ctypes.CDLL(compiler.build_library(_DRIVER, name_hint="pool_test"))
    lib.em_test_run.restype = ctypes.c_int64
    lib.em_test_run.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int,
                                ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int64)]
    return lib


def _run(lib: ctypes.CDLL, n: int, nthreads: int, chunks: int, reps: int, nested: bool = False):
    count = np.zeros(max(n, 1), np.int32)
    tid_of = np.full(max(n, 1), -1, np.int32)
    ran, inner = ctypes.c_int64(0), ctypes.c_int64(0)
    bad = lib.em_test_run(threadpool.symbol().encode(), count.ctypes.data, tid_of.ctypes.data, n, nthreads,
                          chunks, reps, int(nested), ctypes.byref(ran), ctypes.byref(inner))
    return bad, count[:n], tid_of[:n], ran.value, inner.value


# chunks < 0: -chunks chunks per thread dealt in blocks (each thread its own block, then stealing)
@pytest.mark.parametrize("n,nthreads,chunks", [(1, 2, 4), (2, 2, 1), (7, 2, 4), (1000, 2, 4), (1000, 3, 2),
                                               (10_000, 4, 8), (5, 8, 4), (100_000, 2, 1000),
                                               (2, 2, -1), (7, 2, -4), (1000, 3, -2), (10_000, 4, -8),
                                               (5, 8, -4), (100_000, 2, -1000), (64, 2, -4)])
def test_every_index_exactly_once_with_valid_thread_ids(n, nthreads, chunks):
    lib = _driver()
    reps = 200
    bad, count, tid_of, ran, _ = _run(lib, n, nthreads, chunks, reps)
    assert bad == 0
    np.testing.assert_array_equal(count, np.full(n, reps, np.int32))
    assert tid_of.min() >= 0 and tid_of.max() < nthreads
    # min(n, nthreads * |chunks|, 4096) chunks per loop; one chunk (the whole range) when that is 1
    expected = min(n, nthreads * abs(chunks), 4096)
    assert ran == reps * (expected if expected > 1 and nthreads > 1 else 1)


def test_jobs_in_blocks_and_first_come_jobs_alternate():
    """Jobs in blocks and first-come jobs back to back, the workers still spinning from the last one:
    a worker that saw the previous job claims nothing of the next (every index once per loop)."""
    lib = _driver()
    for k in range(40):
        chunks = -4 if k % 2 else 4
        bad, count, tid_of, _, _ = _run(lib, 997, 2 + k % 3, chunks, 25)
        assert bad == 0 and (count == 25).all() and tid_of.max() < 2 + k % 3


def test_zero_items_run_nothing():
    lib = _driver()
    bad, _, _, ran, _ = _run(lib, 0, 2, 4, 10)
    assert bad == 0 and ran == 0


def test_one_thread_runs_the_whole_range_on_the_caller():
    lib = _driver()
    bad, count, tid_of, ran, _ = _run(lib, 50, 1, 4, 3)
    assert bad == 0 and ran == 3 and (count == 3).all() and (tid_of == 0).all()


def test_nested_loops_run_inline():
    lib = _driver()
    bad, count, _, ran, inner = _run(lib, 64, 2, 4, 50, nested=True)
    assert bad == 0 and (count == 50).all()
    assert inner == ran  # one whole inner loop per outer chunk


def test_workers_start_on_demand():
    lib = _driver()
    _run(lib, 1000, 2, 4, 5)
    assert threadpool.workers() >= 1


def test_concurrent_callers_each_get_every_index():
    """Two Python threads drive the pool at once (ctypes releases the GIL): one of them may run its
    loops on the calling thread, but every loop of both covers every index once."""
    lib = _driver()
    results = {}

    def go(k):
        results[k] = _run(lib, 3000, 2, 4, 300)

    run_in_threads(go, range(2))
    for bad, count, _, _, _ in results.values():
        assert bad == 0 and (count == 300).all()


def _child(q):
    lib = _driver()
    bad, count, _, _, _ = _run(lib, 2000, 2, 4, 50)
    q.put((int(bad), bool((count == 50).all()), threadpool.workers()))


@pytest.mark.skipif(sys.platform != "linux", reason="fork start method")
def test_a_forked_child_starts_its_own_workers():
    lib = _driver()
    _run(lib, 1000, 2, 4, 5)  # the parent's workers exist before the fork
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(q,))
    p.start()
    bad, ok, workers = q.get(timeout=600)
    p.join(600)
    assert p.exitcode == 0 and bad == 0 and ok and workers >= 1


def _pool_threads() -> dict[int, set[int]]:
    """{thread id: its CPU affinity} of this process's pool workers (named ``ember-pool``)."""
    out = {}
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/comm") as f:
                if f.read().strip() == "ember-pool":
                    out[int(t)] = os.sched_getaffinity(int(t))
        except OSError:  # (a thread that ended meanwhile)
            pass
    return out


def _step_aside_child(q):
    import threading
    import time

    lib = _driver()
    allowed = os.sched_getaffinity(0)
    # the workers start with the whole set; once one has run a chunk it has read that set (on a
    # loaded host the caller may finish the first jobs before a new worker runs its first lines)
    for _ in range(500):
        if (_run(lib, 1000, 2, 4, 1)[2] > 0).any():
            break
        time.sleep(0.01)
    here = min(allowed)
    # where Linux may wake a worker: on its caller's CPU; the caller stays there
    os.sched_setaffinity(threading.get_native_id(), {here})
    workers = _pool_threads()
    for t in workers:
        os.sched_setaffinity(t, {here})
    results = []
    for _ in range(200):
        bad, count, _, _, _ = _run(lib, 500, 2, 4, 1)
        results.append(bad == 0 and bool((count == 1).all()))
        if all(here not in cpus for cpus in _pool_threads().values()):
            break
        time.sleep(0.002)  # (the caller's CPU for the worker a while)
    q.put((sorted(allowed), here, {t: sorted(c) for t, c in _pool_threads().items()}, all(results),
           len(workers)))


@pytest.mark.skipif(sys.platform != "linux" or threadpool.usable_cpus() < 2,
                    reason="thread affinity: Linux with two CPUs or more")
def test_a_worker_on_its_callers_cpu_moves_to_the_others():
    """A worker that starts a job on the CPU its caller published moves itself to the other CPUs it
    started with (Linux may wake it beside its waker, where the two share one CPU). Checked in a
    forked child, whose affinity changes leave this process's workers alone."""
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_step_aside_child, args=(q,))
    p.start()
    allowed, here, workers, ok, n = q.get(timeout=600)
    p.join(600)
    assert p.exitcode == 0 and ok and n >= 1 and workers
    for cpus in workers.values():
        assert cpus == [c for c in allowed if c != here]


# ---------------------------------------------------------------------------------------------
# Programs
# ---------------------------------------------------------------------------------------------

RNG = np.random.default_rng(7)


def _softmax(x):
    m = lax.reduce_max(x, (1,))
    e = jnp.exp(x - lax.broadcast_in_dim(m, x.shape, (0,)))
    return e / lax.broadcast_in_dim(lax.reduce_sum(e, (1,)), x.shape, (0,))


def _np_softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _chain(x):
    return jnp.tanh(2 * x + 1) * jnp.exp(-x)


@pytest.mark.parametrize("threads", [2, 3])
def test_pooled_row_kernel_matches_one_thread_bitwise(threads):
    threadpool.load(wait=True)
    x = RNG.standard_normal((700, 129)).astype(np.float32)
    one = ember.jit(_softmax, backend="native", num_threads=1, parallel_threshold=1000)
    many = ember.jit(_softmax, backend="native", num_threads=threads, parallel_threshold=1000)
    src = many.lower(x).executable.source
    if not toolchain.find_compiler().has_openmp:
        pytest.skip("no OpenMP: no parallel loops are generated")
    assert "em_par(" in src and "em_par(" not in one.lower(x).executable.source
    y1, yn = np.asarray(one(x)), np.asarray(many(x))
    np.testing.assert_array_equal(yn, y1)  # rows are independent: the split cannot change them
    np.testing.assert_allclose(yn, _np_softmax(x), rtol=2e-6, atol=1e-7)


def test_pooled_map_matches_numpy_and_one_thread():
    threadpool.load(wait=True)
    x = RNG.standard_normal((3, 1001, 37)).astype(np.float32)
    f = ember.jit(_chain, backend="native", num_threads=2, parallel_threshold=1000)
    g = ember.jit(_chain, backend="native", num_threads=1, parallel_threshold=1000)
    np.testing.assert_array_equal(np.asarray(f(x)), np.asarray(g(x)))
    ref = np.tanh(2 * x.astype(np.float64) + 1) * np.exp(-x.astype(np.float64))
    np.testing.assert_allclose(np.asarray(f(x)), ref, rtol=2e-6, atol=1e-6)


def test_fallback_without_the_pool_gives_the_same_results(monkeypatch):
    """Programs generated while the pool cannot be found run their chunk functions in an OpenMP
    region (or serially): the same values."""
    threadpool.load(wait=True)
    x = RNG.standard_normal((513, 200)).astype(np.float32)
    f = ember.jit(_softmax, backend="native", num_threads=2, parallel_threshold=1000)
    y_pool = np.asarray(f(x))
    monkeypatch.setattr(threadpool, "POOL_OFF", True)
    # another function object: jit(_softmax) again would reuse the traces (and program) of f
    g = ember.jit(lambda v: _softmax(v), backend="native", num_threads=2, parallel_threshold=1000)
    src = g.lower(x).executable.source
    assert "ember_par_for_" not in src  # this program never looks the pool up
    np.testing.assert_array_equal(np.asarray(g(x)), y_pool)


def test_pooled_batched_products_and_attention_match_numpy():
    """Attention at two threads: the per-head products go to the pool one batch per chunk."""
    threadpool.load(wait=True)
    b, h, t, d = 2, 4, 64, 32
    q, k, v = (RNG.standard_normal((b, h, t, d)).astype(np.float32) for _ in range(3))

    def attn(q, k, v):
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.float32(np.sqrt(d))
        return jnp.einsum("bhqk,bhkd->bhqd", ember.nn.softmax(s, axis=-1), v)

    f = ember.jit(attn, backend="native", num_threads=2, parallel_threshold=1000)
    s = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k) / np.sqrt(d)
    e = np.exp(s - s.max(-1, keepdims=True))
    ref = np.einsum("bhqk,bhkd->bhqd", e / e.sum(-1, keepdims=True), v)
    np.testing.assert_allclose(np.asarray(f(q, k, v)), ref, rtol=1e-4, atol=1e-5)
    one = ember.jit(attn, backend="native", num_threads=1, parallel_threshold=1000)
    # the tasks split the work differently on one and two threads: a few ulps apart at most
    np.testing.assert_allclose(np.asarray(f(q, k, v)), np.asarray(one(q, k, v)), rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("rows", [3, 2000])
def test_symbolic_rows_decide_at_run_time(rows):
    """A named dynamic axis: the pooled loop runs in parallel only when the bound size passes the
    threshold; both branches agree with NumPy."""
    threadpool.load(wait=True)
    f = ember.jit(_softmax, backend="native", num_threads=2, parallel_threshold=5000,
                  dynamic_axes={"x": ("rows", None)})
    x = RNG.standard_normal((rows, 64)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(f(x)), _np_softmax(x), rtol=2e-6, atol=1e-7)


def test_transformer_block_two_threads_equals_one_thread():
    threadpool.load(wait=True)
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
    try:
        import bench_transformer as bt
    finally:
        sys.path.pop(0)
    d = 128
    ps = bt.params(d)
    x = RNG.standard_normal((2, 64, d)).astype(np.float32)
    ys = [np.asarray(ember.jit(bt.block, backend="native", num_threads=n)(x, *ps)) for n in (1, 2)]
    np.testing.assert_allclose(ys[1], ys[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ys[1], bt.block_numpy(x, *ps), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("batch", [3, 3000])
def test_symbolic_pooled_maps_run_on_both_branches(batch):
    """A map over a dynamic axis, then a concatenation reading its result: GCC 12 dropped the
    serial branch's direct call of such a chunk function (below the threshold) until chunk
    functions were made opaque to its interprocedural analyses (``EM_TASK_ATTR``)."""
    threadpool.load(wait=True)

    def f(x):
        y = x * jnp.max(x, axis=(0, 2))[None, :, None]
        return jnp.concatenate([y, jnp.tanh(y)], axis=0)

    g = ember.jit(f, backend="native", num_threads=2, dynamic_axes={"x": "batch, seq, 4"})
    x = RNG.uniform(-1, 1, (batch, 5, 4)).astype(np.float32)
    y = x * x.max(axis=(0, 2))[None, :, None]
    np.testing.assert_allclose(np.asarray(g(x)), np.concatenate([y, np.tanh(y)]), rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("threads", [2, 3])
def test_pooled_1d_float64_map_is_independent_of_the_thread_count(threads):
    """A 1-D float64 map of libm functions split into chunks (at multiples of POOL_GRAIN
    elements) on 2 and 3 threads: bitwise the one-thread result, and NumPy's within rounding."""
    threadpool.load(wait=True)
    x = RNG.uniform(0.1, 5.0, 100_003)

    def f(x):
        return jnp.log(x) * jnp.sqrt(x) + jnp.exp(-x)

    one = np.asarray(ember.jit(f, backend="native", num_threads=1, parallel_threshold=1000)(x))
    many = np.asarray(ember.jit(f, backend="native", num_threads=threads, parallel_threshold=1000)(x))
    np.testing.assert_array_equal(many, one)
    np.testing.assert_allclose(many, np.log(x) * np.sqrt(x) + np.exp(-x), rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("n", [5, 100_003])
def test_symbolic_1d_map_in_grain_sized_chunks(n):
    """A 1-D map over a dynamic axis: the pool's items are ceil(n / POOL_GRAIN) blocks, the last
    one cut at n; both the serial and the parallel branch against NumPy."""
    threadpool.load(wait=True)
    f = ember.jit(lambda x: jnp.tanh(x * 2) + 1, backend="native", num_threads=2, parallel_threshold=1000,
                  dynamic_axes={"x": ("n",)})
    x = RNG.standard_normal(n).astype(np.float32)
    np.testing.assert_allclose(np.asarray(f(x)), np.tanh(2 * x.astype(np.float64)) + 1, rtol=2e-6, atol=1e-6)


def test_two_python_threads_run_pooled_programs_at_once():
    """Two programs called from two Python threads (the C call path releases the GIL): one of
    them may find the pool busy and run its loops on its own thread; both stay bitwise equal to
    their results from a single thread, and to NumPy."""
    threadpool.load(wait=True)
    xs = [RNG.standard_normal((512, 700)).astype(np.float32) for _ in range(2)]
    fs = [ember.jit(lambda x: ember.nn.softmax(x, axis=-1), backend="native", num_threads=2,
                    parallel_threshold=1000),
          ember.jit(lambda x: jnp.tanh(x) * 2 + jnp.sum(x), backend="native", num_threads=2,
                    parallel_threshold=1000)]
    wants = [np.asarray(f(x)) for f, x in zip(fs, xs)]
    np.testing.assert_allclose(wants[0], _np_softmax(xs[0]), rtol=2e-6, atol=1e-7)
    x64 = xs[1].astype(np.float64)
    np.testing.assert_allclose(wants[1], np.tanh(x64) * 2 + x64.sum(), rtol=1e-5, atol=2e-3)
    bad: list[int] = []

    def run(k: int) -> None:
        for _ in range(100):
            if not np.array_equal(np.asarray(fs[k](xs[k])), wants[k]):
                bad.append(k)

    run_in_threads(run, range(2))
    assert not bad


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity API here")
def test_the_default_thread_count_follows_the_affinity_mask(tmp_path):
    """A process pinned to one CPU (taskset, a container's cpuset) plans one thread and starts no
    pool workers, instead of one thread per CPU of the host time-sharing its one core."""
    import json
    import subprocess

    from tests.helpers import child_env

    script = (
        "import os, sys, json, numpy as np\n"
        "os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})\n"
        "import ember, ember.numpy as jnp\n"
        "from ember._src.native import prepare\n"
        "from ember._src.native.options import NativeOptions\n"
        "from ember._src.native.runtime import threadpool\n"
        "prepare()\n"
        "x = np.random.default_rng(0).standard_normal((512, 4096)).astype(np.float32)\n"
        "f = ember.jit(lambda x: jnp.tanh(x).sum(axis=1), backend='native', parallel_threshold=1)\n"
        "err = float(np.abs(np.asarray(f(x)) - np.tanh(x.astype(np.float64)).sum(axis=1)).max())\n"
        "print(json.dumps({'threads': NativeOptions().threads(True), 'workers': threadpool.workers(),\n"
        "                  'err': err}))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], env=child_env(tmp_path / "cache"),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["threads"] == 1 and got["workers"] == 0 and got["err"] < 1e-2, got


def _lstm_cell_scan(xs, h0, c0, w):
    """An LSTM over time as a ``scan``: each step's gate map (sigmoids and tanhs over batch x
    hidden) is large enough for the pool's threshold."""
    hid = h0.shape[1]

    def step(carry, x):
        h, c = carry
        g = x + h @ w
        i, f, u, o = (g[:, k * hid:(k + 1) * hid] for k in range(4))
        c = ember.nn.sigmoid(f) * c + ember.nn.sigmoid(i) * jnp.tanh(u)
        h = ember.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), h

    return lax.scan(step, (h0, c0), xs)[1]


def _np_lstm(xs, h, c, w):
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    hid, out = h.shape[1], []
    for x in xs.astype(np.float64):
        g = x + h @ w
        i, f, u, o = (g[:, k * hid:(k + 1) * hid] for k in range(4))
        c = sig(f) * c + sig(i) * np.tanh(u)
        h = sig(o) * np.tanh(c)
        out.append(h)
    return np.stack(out)


@pytest.mark.parametrize("dynamic", [False, True])
def test_loop_body_maps_run_on_the_pool(dynamic):
    """A scan body's gate map is a pool loop of the body (its chunk function unpacks the body's
    ``em_body_ctx``), not an OpenMP region per step: the rows are independent, so two threads give
    the bits of one, and both match NumPy (float64)."""
    threadpool.load(wait=True)
    if not toolchain.find_compiler().has_openmp:
        pytest.skip("no OpenMP: no parallel loops are generated")
    t, b, hid = 5, 24, 64
    xs = RNG.standard_normal((t, b, 4 * hid)).astype(np.float32)
    h0, c0 = (RNG.standard_normal((b, hid)).astype(np.float32) * 0.5 for _ in range(2))
    w = (RNG.standard_normal((hid, 4 * hid)) / np.sqrt(hid)).astype(np.float32)
    kw = {"dynamic_axes": {"xs": ("time", "batch", None), "h0": ("batch", None), "c0": ("batch", None)}} \
        if dynamic else {}
    fn = lambda xs, h0, c0, w: _lstm_cell_scan(xs, h0, c0, w)  # noqa: E731 - a fresh trace per jit
    two = ember.jit(fn, backend="native", num_threads=2, parallel_threshold=1000, **kw)
    one = ember.jit(lambda xs, h0, c0, w: _lstm_cell_scan(xs, h0, c0, w), backend="native",
                    num_threads=1, parallel_threshold=1000, **kw)
    low = two.lower(xs, h0, c0, w)
    src = specialize.symbolic_executable(low.program).source if dynamic else low.executable.source
    assert "&em_bctx_" in src and "em_body_ctx em_bctx_" in src
    y2, y1 = np.asarray(two(xs, h0, c0, w)), np.asarray(one(xs, h0, c0, w))
    np.testing.assert_array_equal(y2, y1)
    np.testing.assert_allclose(y2, _np_lstm(xs, h0, c0, w), rtol=1e-4, atol=2e-5)
    if dynamic:  # another batch and length through the same program
        xs3, h3, c3 = xs[:3, :7], h0[:7], c0[:7]
        np.testing.assert_allclose(np.asarray(two(xs3, h3, c3, w)), _np_lstm(xs3, h3, c3, w),
                                   rtol=1e-4, atol=2e-5)


def _nested_scans(x):
    def outer(c, _):
        d, s = lax.scan(lambda d, _: (jnp.tanh(d * 0.9 + 0.1), jnp.sum(d)), c, None, length=3)
        return jnp.exp(-jnp.abs(d)) + c * 0.5, s
    return lax.scan(outer, x, None, length=4)


def _cond_in_scan(x):
    def step(c, i):
        c = lax.cond(i % 2 == 0, lambda v: jnp.tanh(v) * 1.1, lambda v: jnp.sin(v) + 0.2, c)
        return c, jnp.sum(c)
    return lax.scan(step, x, jnp.arange(5))


def _while_map(x):
    return lax.while_loop(lambda c: c[0] < 4, lambda c: (c[0] + 1, jnp.tanh(c[1]) * 1.5 + jnp.cos(c[1])),
                          (0, x))[1]


@pytest.mark.parametrize("fn", [_nested_scans, _cond_in_scan, _while_map], ids=lambda f: f.__name__)
def test_pooled_maps_in_nested_bodies_branches_and_while_loops(fn):
    """Pool loops of a body inside a body (each body function declares its own context), of a
    ``cond`` branch and of a ``while`` body, at two threads and at run-time row counts (0 and 3
    rows: serial; 40: pooled): the values of the NumPy backend."""
    threadpool.load(wait=True)
    if not toolchain.find_compiler().has_openmp:
        pytest.skip("no OpenMP: no parallel loops are generated")
    x = RNG.standard_normal((40, 64)).astype(np.float32)
    g = ember.jit(lambda v: fn(v), backend="native", num_threads=2, parallel_threshold=500)
    assert "&em_bctx_" in g.lower(x).executable.source
    dyn = ember.jit(lambda v: fn(v), backend="native", num_threads=2, parallel_threshold=500,
                    dynamic_axes={"v": ("rows", None)})
    for rows, f in ((40, g), (40, dyn), (3, dyn), (0, dyn)):
        want = ember.jit(fn, backend="numpy")(x[:rows])
        for a, b in zip(ember.tree_util.tree_leaves(f(x[:rows])), ember.tree_util.tree_leaves(want)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=2e-5)
