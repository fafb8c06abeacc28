"""float32 matrix products: ember's jitted ``a @ b`` (its own GEMM kernel, ``native/emit/gemm_kernel.py``)
and eager ``a @ b`` on ember Arrays (the same kernel, no jit) against NumPy (OpenBLAS), JAX jit and
op by op (XLA) and PyTorch eager, n x n x n for n in 256..2048; all checked
against NumPy, then timed in interleaved rounds (``common.interleaved``): median and quartiles
(``--cpu-time``: median and range of the process's CPU time per call, for a loaded machine).

    python benchmarks/bench_gemm.py [--sizes 256,512,1024,2048] [--threads N] [--cpu-time] [--pin CPU]
    python benchmarks/bench_gemm.py --sweep [--isa avx512] [--shapes 1000x1000x1000,512x1024x1024]
    python benchmarks/bench_gemm.py --mlp 32,128 [--threads N] [--cpu-time]
    python benchmarks/bench_gemm.py --train 32,128 [--threads N] [--cpu-time]
    python benchmarks/bench_gemm.py --transformer 4x128x256 [--threads N] [--cpu-time]
    taskset -c 0 python benchmarks/bench_gemm.py --linear [--threads 1] [--linear-shapes 1576x768x3072,...]

``--linear`` times ``x @ w`` at a transformer's shapes (m x k @ k x n: m in 197, 256, 1024, 1576 rows
against 768 x 768, 768 x 3072, 3072 x 768 and 768 x 2304 weights, plus 1024^3 and 256^3): ember's
jitted product with ``w`` a closed-over NumPy constant (prepacked once) and with ``w`` an argument,
against ``torch.matmul``, by process CPU time, interleaved; writes ``gemm_linear.{json,md}``.

``--sweep`` times the kernel's two paths directly (``small``: B packed panel by panel, A read in
place; ``big``: the blocked path with A packed) and OpenBLAS over a grid of shapes, by the CPU time
of the calling thread (other processes' load does not count), the minimum of 3 interleaved rounds:
the measurements behind the kernel's size rules. ``EMBER_GEMM_ISA=avx2|avx512`` picks the ISA of
the jitted programs. Writes ``benchmarks/results/gemm.{json,md}`` (``gemm_sweep.*`` with --sweep).
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import functools
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import threads  # noqa: E402

threads.quiet_openblas()  # before NumPy loads OpenBLAS
if "--threads" in sys.argv:
    threads.limit_threads(int(sys.argv[sys.argv.index("--threads") + 1]))
# --pin CPU: this process and every thread it starts (XLA's, torch's, ORT's, OpenBLAS's) on one CPU.
# XLA on CPU keeps running a product or an MLP on a second thread under the one-thread flags (the
# MLP 512 at batch 128 took 0.90 ms of wall clock there, under the 1.18 ms of its flops at one
# core's peak, and 1.54 ms of process CPU time); pinned, every implementation has one core.
if "--pin" in sys.argv:
    os.sched_setaffinity(0, {int(sys.argv[sys.argv.index("--pin") + 1])})

import numpy as np  # noqa: E402
from common import (  # noqa: E402
    RESULTS,
    Workload,
    cpu_interleaved,
    fmt,
    have,
    interleaved,
    load_average,
    load_text,
    machine,
    peer_runners,
)

import ember  # noqa: E402
import ember.numpy as enp  # noqa: E402
from ember import lax  # noqa: E402

SWEEP = [(m, n, n) for n in (256, 1024, 4096) for m in (32, 64, 128, 256, 512) if m * n * n <= 2 ** 31] + [
    (512, 1024, 4096), (1024, 256, 1024), (2048, 256, 256), (4096, 256, 256), (1024, 4096, 256),
    (1024, 1024, 1024), (2048, 1024, 1024), (2048, 2048, 2048), (2, 4096, 4096), (8, 4096, 4096)]


def jitted(sizes: list[int], cpu_time: bool) -> list[dict]:
    """Per size: median and quartiles of ember's jitted product and each peer's."""
    from ember._src.native import prepare
    from ember._src.native.emit import gemm_kernel

    prepare()
    opts = {"num_threads": threads.bench_threads()} if threads.bench_threads() else {}
    rng = np.random.default_rng(0)
    rows = []
    for n in sizes:
        a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
        want = a @ b
        fn = ember.jit(lambda x, y: lax.dot(x, y), backend="native", **opts)
        np.testing.assert_allclose(np.asarray(fn(a, b)), want, rtol=2e-3, atol=2e-3)
        w = Workload(f"matmul {n}^3", [a, b], numpy=lambda x, y: x @ y, jax=lambda x, y: x @ y,
                     torch=lambda x, y: x @ y, rtol=2e-3, atol=2e-3)
        ea, eb = enp.asarray(a), enp.asarray(b)
        np.testing.assert_allclose(np.asarray(ea @ eb), want, rtol=2e-3, atol=2e-3)
        impls = {"ember native": functools.partial(fn, a, b), "ember eager": lambda ea=ea, eb=eb: ea @ eb,
                 **peer_runners(w, ("numpy", "jax jit", "torch eager"), reference=want),
                 **_jax_eager(a, b, want)}
        stats = cpu_interleaved(impls) if cpu_time else interleaved(impls, max_seconds=12.0)
        rows.append({"workload": w.name, "stats": stats, "load_average": load_average()})
        isa = gemm_kernel.isa()
        print(f"{w.name} ({isa.name if isa else 'BLAS'}): " + ", ".join(
            f"{k} {fmt(v['median'])} [{fmt(v.get('min', v['q1']))}-{fmt(v.get('max', v['q3']))}]"
            for k, v in stats.items())
            + f"; load {load_text()}", flush=True)
    return rows


def _jax_eager(a: np.ndarray, b: np.ndarray, want: np.ndarray) -> dict[str, Callable]:
    """``{"jax (no jit)": ...}``: JAX's ``a @ b`` called op by op (what eager ember compares with),
    checked against ``want``; empty without JAX."""
    if not have("jax"):
        return {}
    import jax

    ja, jb = jax.device_put(a), jax.device_put(b)
    np.testing.assert_allclose(np.asarray(ja @ jb), want, rtol=2e-3, atol=2e-3)
    return {"jax (no jit)": lambda: (ja @ jb).block_until_ready()}


def _model_rows(fn_of: Callable, ref_of: Callable, workloads: list, cpu_time: bool) -> list[dict]:
    """Per workload: ember native with the weights as arguments (ember Arrays) and as constants,
    against each peer; outputs checked against ``ref_of`` (NumPy) before timing."""
    from common import constant_weights_runner, ember_arrays

    from ember._src.native import prepare

    prepare()
    opts = {"num_threads": threads.bench_threads()} if threads.bench_threads() else {}
    rows = []
    for w in workloads:
        want = ref_of(*w.data, *w.params)
        fn = ember.jit(fn_of, backend="native", **opts)
        args = ember_arrays(list(w.data) + list(w.params))
        np.testing.assert_allclose(np.asarray(fn(*args)), want, rtol=w.rtol, atol=w.atol)
        impls = {"ember native": functools.partial(fn, *args),
                 **constant_weights_runner(fn_of, w, want, **opts), **peer_runners(w, reference=want)}
        stats = cpu_interleaved(impls) if cpu_time else interleaved(impls, max_seconds=12.0)
        rows.append({"workload": w.name, "stats": stats, "load_average": load_average()})
        print(f"{w.name}: " + ", ".join(
            f"{k} {fmt(v['median'])} [{fmt(v.get('min', v['q1']))}-{fmt(v.get('max', v['q3']))}]"
            for k, v in stats.items()) + f"; load {load_text()}", flush=True)
    return rows


def mlps(batches: list[int], cpu_time: bool) -> list[dict]:
    """bench_mlp's 3-layer MLP (512 wide) per batch (ONNX Runtime among the peers)."""
    import bench_mlp
    from common import EMBER_CONST

    rows = _model_rows(bench_mlp.mlp, bench_mlp.mlp_numpy, [bench_mlp.workload(b) for b in batches], cpu_time)
    assert all(EMBER_CONST in r["stats"] for r in rows)
    return rows


def transformer(shapes: list[tuple[int, int, int]], cpu_time: bool) -> list[dict]:
    """bench_transformer's block (b x t x d) per shape."""
    import bench_transformer

    return _model_rows(bench_transformer.block, bench_transformer.block_numpy,
                       [bench_transformer.workload(b, t, d) for b, t, d in shapes], cpu_time)


def training(batches: list[int], cpu_time: bool) -> list[dict]:
    """bench_train's training step (loss and gradients of the 3-layer MLP) per batch: ember against
    JAX and torch, each checked against the float64 NumPy backward first."""
    import bench_train

    from ember._src.native import prepare

    prepare()
    opts = {"num_threads": threads.bench_threads()} if threads.bench_threads() else {}
    rows = []
    for batch in batches:
        x, y = bench_train.data(batch)
        impls = bench_train.runners(bench_train.params(), x, y, opts)
        stats = cpu_interleaved(impls) if cpu_time else interleaved(impls, max_seconds=12.0)
        rows.append({"workload": f"mlp 512 value_and_grad batch {batch}", "stats": stats,
                     "load_average": load_average()})
        print(f"{rows[-1]['workload']}: " + ", ".join(
            f"{k} {fmt(v['median'])} [{fmt(v.get('min', v['q1']))}-{fmt(v.get('max', v['q3']))}]"
            for k, v in stats.items()) + f"; load {load_text()}", flush=True)
    return rows


LINEAR = [(m, k, n) for m in (197, 256, 1024, 1576)
          for k, n in ((768, 768), (768, 3072), (3072, 768), (768, 2304))]
LINEAR += [(1024, 1024, 1024), (256, 256, 256)]


def linear(shapes: list[tuple[int, int, int]]) -> list[dict]:
    """Per shape (m, k, n): process CPU time per call of ember's jitted ``x @ w`` with ``w`` a program
    constant ("ember const", prepacked) and an argument ("ember arg"), and of ``torch.matmul``
    (results checked against float64 NumPy first), median and range of interleaved rounds."""
    import torch

    from ember._src.native import prepare

    prepare()
    opts = {"num_threads": threads.bench_threads()} if threads.bench_threads() else {}
    rng = np.random.default_rng(0)
    rows = []
    for m, k, n in shapes:
        x, w = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
        want = x.astype(np.float64) @ w
        const = ember.jit(lambda x_, w=w: lax.dot(x_, w), backend="native", **opts)
        arg = ember.jit(lambda x_, w_: lax.dot(x_, w_), backend="native", **opts)
        ex, ew = enp.asarray(x), enp.asarray(w)
        tx, tw = torch.from_numpy(x), torch.from_numpy(w)
        impls = {"ember const": functools.partial(const, ex), "ember arg": functools.partial(arg, ex, ew),
                 "torch": functools.partial(torch.matmul, tx, tw)}
        for name, fn in impls.items():
            got = np.asarray(fn())
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * np.sqrt(k), err_msg=name)
        stats = cpu_interleaved(impls, rounds=9, sample_time=0.1)
        flops = 2.0 * m * n * k
        for v in stats.values():
            v["gflops"] = flops / v["median"] / 1e9
            v["gflops_range"] = [flops / v["max"] / 1e9, flops / v["min"] / 1e9]
        rows.append({"shape": [m, k, n], "stats": stats, "load_average": load_average()})
        print(f"{m}x{k} @ {k}x{n}: " + ", ".join(
            f"{name} {v['gflops']:.0f} [{v['gflops_range'][0]:.0f}-{v['gflops_range'][1]:.0f}] GFLOP/s"
            for name, v in stats.items()) + f"; load {load_text()}", flush=True)
    return rows


def linear_table(rows: list[dict]) -> str:
    """Markdown table of :func:`linear`'s rows: GFLOP/s by median CPU time, [range over rounds]."""
    names = list(rows[0]["stats"])
    out = ["| m x k @ k x n | " + " | ".join(f"{n_} GFLOP/s" for n_ in names) + " | ember const / torch |",
           "|---" * (len(names) + 2) + "|"]
    for r in rows:
        m, k, n = r["shape"]
        st = r["stats"]
        cells = [f"{st[n_]['gflops']:.0f} [{st[n_]['gflops_range'][0]:.0f}-{st[n_]['gflops_range'][1]:.0f}]"
                 for n_ in names]
        ratio = st["ember const"]["gflops"] / st["torch"]["gflops"]
        out.append(f"| {m}x{k} @ {k}x{n} | " + " | ".join(cells) + f" | {ratio:.2f} |")
    return "\n".join(out) + "\n"


_WRAPPER = """
#include <stdint.h>
#ifdef _OPENMP
#include <omp.h>
#endif
{src}
void em_bench(int64_t m, int64_t n, int64_t k, const float *a, const float *b, float *c, int big) {{
    if (big) em_sgemm_big_all(m, n, k, 1.0f, a, k, 1, b, n, 1, 0, 0.0f, c, n, 0, 0, 1);
    else em_sgemm_small(m, n, k, 1.0f, a, k, 1, b, n, 1, 0.0f, c, n, 0, 0, 1);
}}
"""


def sweep(isa_name: str, shapes: list[tuple[int, int, int]] | None = None) -> list[dict]:
    """CPU time of the kernel's small and big paths and of OpenBLAS (NumPy) per shape (m, n, k;
    default :data:`SWEEP`)."""
    from ember._src.native.emit import gemm_kernel
    from ember._src.native.runtime import compiler

    isa = gemm_kernel.ISAS[isa_name]
    # the small path alone: the big path's thresholds out of reach
    src = gemm_kernel.c_source(dataclasses.replace(isa, big_min_m=1 << 40))
    lib = compiler.load_library(_WRAPPER.format(src=src), name_hint="bench_gemm")
    fn = lib.em_bench
    fn.argtypes = [ctypes.c_int64] * 3 + [ctypes.c_void_p] * 3 + [ctypes.c_int]
    rng = np.random.default_rng(0)
    rows = []
    for m, n, k in shapes or SWEEP:
        a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
        c = np.empty((m, n), np.float32)
        ptrs = (m, n, k, a.ctypes.data, b.ctypes.data, c.ctypes.data)
        impls = {"openblas": functools.partial(np.matmul, a, b), "small": functools.partial(fn, *ptrs, 0),
                 "big": functools.partial(fn, *ptrs, 1)}
        want = a.astype(np.float64) @ b
        for name in ("small", "big"):
            impls[name]()
            np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4 * np.sqrt(k))
        reps = max(2, int(5e8 / (m * n * k)))
        best = {name: float("inf") for name in impls}
        for _ in range(3):
            for name, f in impls.items():
                for _ in range(reps):
                    t = time.thread_time()
                    f()
                    best[name] = min(best[name], time.thread_time() - t)
        rows.append({"shape": [m, n, k], "seconds": best})
        ratio = min(best["small"], best["big"]) / best["openblas"]
        print(f"{m}x{n}x{k}: " + ", ".join(f"{k_} {v * 1e3:.3f} ms" for k_, v in best.items())
              + f"; kernel/openblas {ratio:.2f}", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="256,512,1024,2048")
    ap.add_argument("--threads", type=int, default=None, help="limit ember and every peer to N threads")
    ap.add_argument("--sweep", action="store_true", help="the kernel's paths and OpenBLAS over a shape grid")
    ap.add_argument("--isa", default="avx512", help="the ISA of the kernel --sweep builds")
    ap.add_argument("--shapes", default="", help="--sweep over these m x n x k only (e.g. 1000x1000x1000)")
    ap.add_argument("--cpu-time", action="store_true", help="time by process CPU time (a loaded machine)")
    ap.add_argument("--pin", type=int, default=None, help="run every implementation on this one CPU")
    ap.add_argument("--mlp", default="", help="batches of bench_mlp's MLP to time instead (e.g. 32,128)")
    ap.add_argument("--train", default="", help="batches of bench_train's training step to time instead")
    ap.add_argument("--transformer", default="", help="bench_transformer's block, b x t x d (e.g. 4x128x256)")
    ap.add_argument("--linear", action="store_true", help="x @ w at transformer shapes against torch.matmul")
    ap.add_argument("--linear-shapes", default="", help="--linear over these m x k x n only")
    args = ap.parse_args()
    if args.linear:
        shapes = [tuple(int(v) for v in s_.split("x")) for s_ in args.linear_shapes.split(",") if s_]
        rows, name = linear(shapes or LINEAR), "gemm_linear"
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "gemm_linear.md").write_text(f"{machine()}; load {load_text()}\n\n" + linear_table(rows))
    elif args.sweep:
        shapes = [tuple(int(v) for v in s_.split("x")) for s_ in args.shapes.split(",") if s_]
        rows, name = sweep(args.isa, shapes or None), "gemm_sweep"
    elif args.mlp:
        rows, name = mlps([int(b) for b in args.mlp.split(",")], args.cpu_time), "gemm_mlp"
    elif args.transformer:
        shapes = [tuple(int(v) for v in s_.split("x")) for s_ in args.transformer.split(",")]
        rows, name = transformer(shapes, args.cpu_time), "gemm_transformer"
    elif args.train:
        rows, name = training([int(b) for b in args.train.split(",")], args.cpu_time), "gemm_train"
    else:
        rows, name = jitted([int(s) for s in args.sizes.split(",")], args.cpu_time), "gemm"
    RESULTS.mkdir(exist_ok=True)
    from ember._src.native.emit import gemm_kernel

    isa = gemm_kernel.isa()
    info = {"machine": machine(), "load_average": load_average(), "threads": threads.bench_threads(),
            "pin": args.pin,
            "isa": args.isa if args.sweep else isa and isa.name, "cpu_time": args.cpu_time, "rows": rows}
    (RESULTS / f"{name}.json").write_text(json.dumps(info, indent=1))


if __name__ == "__main__":
    main()
