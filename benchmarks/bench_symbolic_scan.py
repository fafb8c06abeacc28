"""An RNN ``scan`` over a named ``seq`` axis on the native backend: one compiled library for every
sequence length vs. a static ``jit`` per length.

    python benchmarks/bench_symbolic_scan.py [--hidden 64] [--batch 8] [--reps 200]

Reports (microseconds, medians): the first call at each new sequence length once the symbolic
library exists (tracing is cached: this is building the specialization plus running it) minus a
warm call at that length, i.e. the per-new-length cost; the warm call time of the symbolic program
and of a static native ``jit`` compiled for that exact shape, measured interleaved, and their
ratio; the static ``jit``'s first call (a C compile) for comparison. Writes
``benchmarks/results/symbolic_scan.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")
os.environ["EMBER_CACHE_DIR"] = tempfile.mkdtemp(prefix="ember_bench_symscan_")  # real C compiles

import numpy as np  # noqa: E402 - after the thread settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import ember  # noqa: E402
import ember.numpy as jnp  # noqa: E402
from ember import lax  # noqa: E402
from ember._src.native import specialize  # noqa: E402
from ember._src.native.runtime import compiler  # noqa: E402


def rnn(W, U, b, h0, xs):
    def step(h, x):
        h = jnp.tanh(h @ W + x @ U + b)
        return h, h.sum(-1)
    return lax.scan(step, h0, xs)


def _timeit(f, args, reps: int) -> float:
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f(*args)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--inputs", type=int, default=32)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--reps", type=int, default=200)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    H, D, B = a.hidden, a.inputs, a.batch
    W = (rng.standard_normal((H, H)) / np.sqrt(H)).astype(np.float32)
    U = (rng.standard_normal((D, H)) / np.sqrt(D)).astype(np.float32)
    b = np.zeros(H, np.float32)
    h0 = rng.standard_normal((B, H)).astype(np.float32)

    def xs_of(s: int) -> np.ndarray:
        return rng.standard_normal((s, B, D)).astype(np.float32)

    axes = {"h0": ("batch", None), "xs": ("seq", "batch", None)}
    sym = ember.jit(rnn, dynamic_axes=axes, backend="native")
    c0 = compiler.cache_stats()["compiles"]
    t0 = time.perf_counter()
    sym(W, U, b, h0, xs_of(3))
    first_compile = (time.perf_counter() - t0) * 1e6
    # per new sequence length: the first call at a length minus a warm call at it
    new_len = []
    for s in range(4, 4 + 24):
        xs = xs_of(s)
        t0 = time.perf_counter()
        sym(W, U, b, h0, xs)
        first = (time.perf_counter() - t0) * 1e6
        warm = _timeit(sym, (W, U, b, h0, xs), 20)
        new_len.append(first - warm)
    compiles = compiler.cache_stats()["compiles"] - c0
    # the native backend's own part of a new binding: sizes, nested first-fit layout, dims array
    exe = specialize.symbolic_executable(sym.lower(W, U, b, h0, xs_of(3)).program)
    native_part = []
    for s in range(100, 400):
        t0 = time.perf_counter()
        exe.specialize({"batch": B, "seq": s})
        native_part.append((time.perf_counter() - t0) * 1e6)
    rows = []
    for s in (1, 16, 128, 512):
        xs = xs_of(s)
        st = ember.jit(rnn, backend="native")
        t0 = time.perf_counter()
        want = st(W, U, b, h0, xs)
        static_first = (time.perf_counter() - t0) * 1e6
        got = sym(W, U, b, h0, xs)
        for g, w in zip(got, want):
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-5)
        # executables alone (no jit dispatch): the symbolic NativeRun vs the static NativeExecutable
        run = exe.specialize({"batch": B, "seq": s})
        sexe = st.lower(W, U, b, h0, xs).executable
        flat = [W, U, b, h0, xs]
        ts_sym, ts_st, te_sym, te_st = [], [], [], []
        for _ in range(5):  # interleaved rounds
            ts_sym.append(_timeit(sym, (W, U, b, h0, xs), a.reps // 5))
            ts_st.append(_timeit(st, (W, U, b, h0, xs), a.reps // 5))
            te_sym.append(_timeit(run, (flat,), a.reps // 5))
            te_st.append(_timeit(sexe, (flat,), a.reps // 5))
        m_sym, m_st = statistics.median(ts_sym), statistics.median(ts_st)
        e_sym, e_st = statistics.median(te_sym), statistics.median(te_st)
        rows.append({"seq": s, "symbolic_us": m_sym, "static_us": m_st, "ratio": m_sym / m_st,
                     "exe_symbolic_us": e_sym, "exe_static_us": e_st, "exe_ratio": e_sym / e_st,
                     "static_first_call_us": static_first})
    res = {"hidden": H, "inputs": D, "batch": B, "symbolic_first_call_us": first_compile,
           "c_compiles_for_25_lengths": compiles,
           "per_new_length_us_median": statistics.median(new_len),
           "per_new_length_us_min": min(new_len),
           "native_level2_us_median": statistics.median(native_part), "warm": rows}
    out = Path(__file__).resolve().parent / "results"
    (out / "symbolic_scan.json").write_text(json.dumps(res, indent=2) + "\n")
    md = [f"# RNN scan over a named `seq` axis (H={H}, D={D}, batch={B}, float32, 1 thread)", "",
          f"- C compiles for 25 sequence lengths: {compiles}",
          f"- first call (trace + symbolic build + C compile): {first_compile:.0f} us",
          f"- per new sequence length (first call minus warm call, median of 24): "
          f"{res['per_new_length_us_median']:.0f} us (min {res['per_new_length_us_min']:.0f})",
          f"  - of which the native backend's level 2 (sizes, nested layout, dims): "
          f"{res['native_level2_us_median']:.0f} us (median of 300)", "",
          "Warm calls (median us): through `jit` (dispatch included) and of the executables alone "
          "(symbolic `NativeRun` vs static `NativeExecutable`, same inputs).", "",
          "| seq | jit symbolic | jit static | ratio | exe symbolic | exe static | ratio | "
          "static first call (C compile) |",
          "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    md += [f"| {r['seq']} | {r['symbolic_us']:.1f} | {r['static_us']:.1f} | {r['ratio']:.2f} | "
           f"{r['exe_symbolic_us']:.1f} | {r['exe_static_us']:.1f} | {r['exe_ratio']:.2f} | "
           f"{r['static_first_call_us']:.0f} |" for r in rows]
    md += ["", "Command: `python benchmarks/bench_symbolic_scan.py` (1 thread; shared machine: "
           "compare ratios)."]
    (out / "symbolic_scan.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
