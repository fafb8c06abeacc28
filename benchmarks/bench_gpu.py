"""GPU backends vs PyTorch and JAX on the GPU: elementwise chain 2^24, row softmax 4096x4096,
matmul 4096^3 (float32).

    python benchmarks/bench_gpu.py [--backends cuda,webgpu] [--out DIR] [--quick]

Writes ``gpu.{json,md}`` to ``DIR`` (default ``benchmarks/results``). ember's inputs are device
arrays (``ember.device_put``) and each timed call waits for its result (``block_until_ready``), as
the peers' inputs live on the GPU and their calls are synchronized. Peers absent from the machine
are left out. On CUDA the matmul row is a cuBLAS call (``cublasGemmStridedBatchedEx``, float32 at
full precision, as the peers here: TF32 off) inside the program's CUDA graph where cuBLAS loads;
the JSON's ``cublas`` says which library ran or why the tiled kernel did. Written without a GPU at
hand: not yet run on one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import ember


def _chain(x):  # noqa: ANN001, ANN202 - shared by every implementation
    return (x * 1.5 + 0.5) * (x - 0.25) + x * x


def _time(fn: Callable[[], object], sync: Callable[[], None], reps: int) -> float:
    fn()
    sync()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def workloads(quick: bool) -> list[tuple[str, Callable, tuple]]:
    rng = np.random.default_rng(0)
    n, s, m = (1 << 16, 256, 256) if quick else (1 << 24, 4096, 4096)
    f32 = np.float32
    return [(f"elementwise chain 2^{int(np.log2(n))}", "chain", (rng.standard_normal(n).astype(f32),)),
            (f"row softmax {s}x{s}", "softmax", (rng.standard_normal((s, s)).astype(f32),)),
            (f"matmul {m}^3 float32", "matmul", (rng.standard_normal((m, m)).astype(f32),
                                                rng.standard_normal((m, m)).astype(f32)))]


EMBER = {"chain": _chain, "softmax": lambda x: ember.nn.softmax(x, axis=-1), "matmul": lambda a, b: a @ b}


def _torch_impls() -> dict[str, Callable]:
    import torch

    if not torch.cuda.is_available():
        return {}
    sync = torch.cuda.synchronize
    fns = {"chain": _chain, "softmax": lambda x: torch.softmax(x, -1), "matmul": lambda a, b: a @ b}

    def maker(wrap: Callable | None) -> Callable:
        def make(args: tuple, k: str) -> Callable:
            g = wrap(fns[k]) if wrap else fns[k]
            t = [torch.from_numpy(a).cuda() for a in args]
            return lambda: g(*t)
        return make

    out = {"torch eager": (maker(None), sync), "torch.compile": (maker(torch.compile), sync)}
    torch.backends.cuda.matmul.allow_tf32 = False
    return out


def _jax_impls() -> dict[str, Callable]:
    import jax

    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpus:
        return {}
    fns = {"chain": _chain, "softmax": lambda x: jax.nn.softmax(x, -1),
           "matmul": lambda a, b: jax.numpy.matmul(a, b, precision="highest")}

    def make(args: tuple, k: str) -> Callable:
        f = jax.jit(fns[k])
        t = [jax.device_put(a, gpus[0]) for a in args]
        return lambda: f(*t).block_until_ready()

    return {"jax": (make, lambda: None)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backends", default="cuda,webgpu")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    ap.add_argument("--reps", type=int, default=10)
    a = ap.parse_args()
    peers: dict[str, tuple] = {}
    for load in (_torch_impls, _jax_impls):
        try:
            peers.update(load())
        except Exception as e:  # a peer that is not installed or has no GPU is left out
            print(f"peer left out: {e}", file=sys.stderr)
    rows = []
    for title, key, args in workloads(a.quick):
        times: dict[str, float | None] = {}
        for b in a.backends.split(","):
            try:
                f = ember.jit(EMBER[key], backend=b)
                on_dev = ember.device_put(args, f"{b}:0")
                times[f"ember {b}"] = _time(lambda f=f, d=on_dev: f(*d).block_until_ready(), lambda: None,
                                            a.reps)
            except Exception as e:
                print(f"ember {b} / {title}: {type(e).__name__}: {e}", file=sys.stderr)
                times[f"ember {b}"] = None
        for name, (make, sync) in peers.items():
            times[name] = _time(make(args, key), sync, a.reps)
        rows.append({"workload": title, "times": times})
        print(title, {k: (f"{v * 1e3:.3f} ms" if v else "-") for k, v in times.items()}, flush=True)
    impls = list(dict.fromkeys(k for r in rows for k in r["times"]))
    md = ["## GPU backends (median seconds per call)", "", "| workload | " + " | ".join(impls) + " |",
          "|---" * (len(impls) + 1) + "|"]
    md += ["| " + r["workload"] + " | " + " | ".join(f"{r['times'].get(k):.3g}" if r["times"].get(k) else "-"
                                                       for k in impls) + " |" for r in rows]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    devices = [str(d) for d in ember.devices("all")]
    from ember._src.gpu import cuda_blas

    lib = cuda_blas.load()
    blas = f"loaded from {cuda_blas._STATE['path']}" if lib is not None else cuda_blas.unavailable_reason()
    md += ["", f"CUDA GEMM: cuBLAS {blas}" if lib is not None else f"CUDA GEMM: tiled kernel ({blas})"]
    (out / "gpu.json").write_text(json.dumps({"rows": rows, "devices": devices, "cublas": blas}, indent=1))
    (out / "gpu.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
