"""``lax.scan`` loops: scalar cumulative sum (L = 1,000 and 100,000) and an RNN step
``h = tanh(W @ h + x)`` (h = 64, L = 1,000), forward and gradient.

    python benchmarks/bench_scan.py [--quick] [--no-native]

Implementations: ember under ``jit`` on the numpy reference backend (the scan runs as a Python
loop over the body), ember on the native backend when it is registered and a C compiler exists
(the scan is compiled into the program's native entry point, ``native/scheduling/loops.py``): timed through
``jit``, as the executable (``ember native (executable)``: no per-call ``jit`` dispatch) and as
the bare C entry point (``ember native (C entry)``: no Python argument handling either),
a plain NumPy loop, and JAX ``jax.lax.scan`` under ``jax.jit`` / Numba when importable. Reports
medians; writes ``benchmarks/results/scan.{json,md}``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fmt, have, report, timeit  # noqa: E402

import ember  # noqa: E402
import ember.numpy as jnp  # noqa: E402
from ember import lax  # noqa: E402

H, L_RNN = 64, 1000


def cumsum_ember(x):
    return lax.scan(lambda c, x: (c + x, c + x), jnp.zeros((), x.dtype), x)[1]


def rnn_ember(W, xs, checkpoint=True):
    h, _ = lax.scan(lambda h, x: (jnp.tanh(W @ h + x), None), jnp.zeros(H, xs.dtype), xs,
                    checkpoint=checkpoint)
    return h


def rnn_loss_ember(W, xs, checkpoint=True):
    return rnn_ember(W, xs, checkpoint).sum()


def cumsum_numpy(x):
    out = np.empty_like(x)
    c = x.dtype.type(0)
    for i in range(x.shape[0]):
        c = c + x[i]
        out[i] = c
    return out


def rnn_numpy(W, xs):
    h = np.zeros(H, xs.dtype)
    for x in xs:
        h = np.tanh(W @ h + x)
    return h


def c_entry(exe, args):
    """A call of the bare native entry point ``ember_main`` (the loop itself: no Python argument
    checks, output allocation or result wrapping), with the buffers of one ``exe(args)`` call."""
    import ctypes
    keep = exe(args)  # binds inputs and outputs; holding the results keeps their memory alive
    # a private copy of the buffer table: later exe() calls rebind exe._bufs to other outputs
    bufs = (ctypes.c_void_p * len(exe._bufs))(*exe._bufs)
    fn, arena, fns = exe._fn, exe._arena_ptr, exe._fns
    return lambda: (fn(bufs, arena, None, fns), keep, args)


def ember_backends(no_native: bool) -> list[str]:
    names = ["numpy"]
    if no_native:
        return names
    try:
        import ember._src.native  # noqa: F401  (registers the backend)
        from ember._src.jit import BACKENDS
        from ember._src.native.runtime.toolchain import find_compiler
        if "native" in BACKENDS and find_compiler() is not None:
            names.append("native")
    except Exception as e:  # noqa: BLE001 - the native backend is optional here
        print(f"native backend unavailable: {e}", file=sys.stderr)
    return names


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer repetitions (for smoke runs)")
    ap.add_argument("--no-native", action="store_true")
    args = ap.parse_args()
    from ember._src.native import prepare
    prepare()  # time the steady state: per-machine runtime libraries loaded
    kw = {"min_time": 0.05, "min_runs": 2, "warmup": 1} if args.quick else {"min_time": 0.5, "min_runs": 5}
    slow_kw = {"min_time": 0.0, "min_runs": 1 if args.quick else 3, "warmup": 1}
    rng = np.random.default_rng(0)
    W = (rng.standard_normal((H, H)) / np.sqrt(H)).astype(np.float32)
    xs_rnn = rng.standard_normal((L_RNN, H)).astype(np.float32)
    backends = ember_backends(args.no_native)

    jax = None
    if have("jax"):
        import jax
        import jax.numpy as jjnp

        def jax_cumsum_fn(x):
            return jax.lax.scan(lambda c, x: (c + x, c + x), jjnp.zeros((), x.dtype), x)[1]

        jax_cumsum = jax.jit(jax_cumsum_fn)

        def jax_rnn(W, xs):
            return jax.lax.scan(lambda h, x: (jjnp.tanh(W @ h + x), None), jjnp.zeros(H, xs.dtype), xs)[0]

        jax_rnn_fwd = jax.jit(jax_rnn)
        jax_rnn_grad = jax.jit(jax.grad(lambda W, xs: jax_rnn(W, xs).sum()))
    numba_cumsum = None
    if have("numba"):
        import numba

        numba_cumsum = numba.njit(cumsum_numpy)

    rows = []
    side: dict[str, dict] = {}  # workload -> implementations timed side by side at the end
    for L in (1_000, 100_000):
        x = rng.standard_normal(L).astype(np.float32)
        ref = np.cumsum(x)
        times: dict[str, float | None] = {}
        for b in backends:
            f = ember.jit(cumsum_ember, backend=b)
            np.testing.assert_allclose(f(x), ref, rtol=1e-3, atol=1e-3)
            fast = b == "native" or L <= 10_000
            times[f"ember {b}"] = timeit(lambda f=f, x=x: f(x), **(kw if fast else slow_kw))
            if b == "native":
                exe = f.lower(x).executable
                times["ember native (executable)"] = timeit(lambda exe=exe, x=x: exe([x]), **kw)
                times["ember native (C entry)"] = timeit(c_entry(exe, [x]), **kw)
                side[f"cumsum L={L:,}"] = {"ember native (executable)": lambda exe=exe, x=x: exe([x]),
                                           "ember native (C entry)": c_entry(exe, [x])}
        times["numpy loop"] = timeit(lambda x=x: cumsum_numpy(x), **(slow_kw if L > 10_000 else kw))
        if jax is not None:
            xj = jax.device_put(x)
            times["jax jit"] = timeit(lambda xj=xj: jax_cumsum(xj).block_until_ready(), **kw)
            side.get(f"cumsum L={L:,}", {})["jax jit"] = lambda xj=xj: jax_cumsum(xj).block_until_ready()
        if numba_cumsum is not None:
            times["numba"] = timeit(lambda x=x: numba_cumsum(x), **kw)
            side.get(f"cumsum L={L:,}", {})["numba"] = lambda x=x: numba_cumsum(x)
        rows.append({"workload": f"cumsum L={L:,}", "times": times})
        print(rows[-1])

    ref_h = rnn_numpy(W, xs_rnn)
    times = {}
    for b in backends:
        f = ember.jit(rnn_ember, backend=b)
        np.testing.assert_allclose(f(W, xs_rnn), ref_h, rtol=1e-4, atol=1e-5)
        times[f"ember {b}"] = timeit(lambda f=f: f(W, xs_rnn), **kw)
        if b == "native":
            exe = f.lower(W, xs_rnn).executable
            times["ember native (executable)"] = timeit(lambda exe=exe: exe([W, xs_rnn]), **kw)
            times["ember native (C entry)"] = timeit(c_entry(exe, [W, xs_rnn]), **kw)
            side["rnn forward"] = {"ember native (executable)": lambda exe=exe: exe([W, xs_rnn]),
                                   "ember native (C entry)": c_entry(exe, [W, xs_rnn])}
    times["numpy loop"] = timeit(lambda: rnn_numpy(W, xs_rnn), **kw)
    if jax is not None:
        times["jax jit"] = timeit(lambda: jax_rnn_fwd(W, xs_rnn).block_until_ready(), **kw)
        side.get("rnn forward", {})["jax jit"] = lambda: jax_rnn_fwd(W, xs_rnn).block_until_ready()
    rows.append({"workload": f"rnn h={H} L={L_RNN:,} forward", "times": times})
    print(rows[-1])

    for ck in (True, False):
        times = {}
        g_ref = None
        for b in backends:
            g = ember.jit(ember.grad(rnn_loss_ember), static_argnums=2, backend=b)
            val = g(W, xs_rnn, ck)
            g_ref = val if g_ref is None else g_ref
            np.testing.assert_allclose(val, g_ref, rtol=1e-4, atol=1e-5)
            times[f"ember {b}"] = timeit(lambda g=g, ck=ck: g(W, xs_rnn, ck),
                                         **(kw if b == "native" else slow_kw))
            if b == "native":
                exe = g.lower(W, xs_rnn, ck).executable
                times["ember native (executable)"] = timeit(lambda exe=exe: exe([W, xs_rnn]), **kw)
                times["ember native (C entry)"] = timeit(c_entry(exe, [W, xs_rnn]), **kw)
                side[f"rnn grad ({'checkpointed' if ck else 'stored'})"] = {
                    "ember native (executable)": lambda exe=exe: exe([W, xs_rnn]),
                    "ember native (C entry)": c_entry(exe, [W, xs_rnn])}
        if jax is not None:
            times["jax jit"] = timeit(lambda: jax_rnn_grad(W, xs_rnn).block_until_ready(), **kw)
            side.get(f"rnn grad ({'checkpointed' if ck else 'stored'})", {})["jax jit"] = \
                lambda: jax_rnn_grad(W, xs_rnn).block_until_ready()
        what = "checkpointed sqrt(L)" if ck else "stored residuals"
        rows.append({"workload": f"rnn h={H} L={L_RNN:,} grad ({what})", "times": times})
        print(rows[-1])

    text = report("lax.scan (median per call)", rows, "scan") + goals(rows)
    text += side_by_side(side, rounds=20 if args.quick else 300)
    (Path(__file__).resolve().parent / "results" / "scan.md").write_text(text)
    print(text)


def side_by_side(side: dict[str, dict], rounds: int) -> str:
    """Ratios less exposed to a loaded machine: per workload, the implementations run in turn, one
    call each per round; medians over the rounds."""
    lines = ["", f"Side by side (one call of each per round, {rounds} rounds; medians). Interleaving evicts "
             "each implementation's caches and can penalize runtimes with worker threads (JAX's "
             "grad), so read these with the table above:", ""]
    for workload, fns in side.items():
        if "jax jit" not in fns and "numba" not in fns:
            continue
        samples: dict[str, list[float]] = {k: [] for k in fns}
        for f in fns.values():
            f()
        for _ in range(rounds):
            for k, f in fns.items():
                t = time.perf_counter()
                f()
                samples[k].append(time.perf_counter() - t)
        med = {k: statistics.median(v) for k, v in samples.items()}
        peers = [k for k in ("jax jit", "numba") if k in med]
        parts = [f"{k} {fmt(v)}" for k, v in med.items()]
        ratios = [f"{p} / {k.removeprefix('ember native ').strip('()')} {med[p] / med[k]:.2f}x"
                  for p in peers for k in med if k.startswith("ember")]
        lines.append(f"* {workload}: " + ", ".join(parts) + "; " + ", ".join(ratios))
    return "\n".join(lines) + "\n"


def goals(rows: list[dict]) -> str:
    """The issue's targets as speedups (peer time / ember time; > 1: ember is faster)."""
    lines = ["", "Speedups (peer time / ember time, > 1 means ember is faster):", ""]
    for r in rows:
        t = r["times"]
        for peer in ("jax jit", "numba"):
            if t.get(peer) is None:
                continue
            parts = [f"{k.removeprefix('ember native').strip(' ()') or 'jit'} {t[peer] / t[k]:.2f}x"
                     for k in ("ember native", "ember native (executable)", "ember native (C entry)")
                     if t.get(k)]
            if parts:
                lines.append(f"* {r['workload']} vs {peer}: " + ", ".join(parts))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
