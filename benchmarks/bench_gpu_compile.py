"""Where the first call of a GPU program spends its compile time, and what the kernel disk cache saves.

WebGPU: per program, in a fresh process, the first call's time, the schedule+render step (the
program's WGSL: what a disk cache of WGSL would save) and the creation of its compute pipelines
(naga and the driver's compiler). CUDA: NVRTC's compile of a program's translation unit against a
read of its PTX from the disk cache (memory cache cleared). Medians [min-max] over ``--repeat`` runs.

    taskset -c 0 python benchmarks/bench_gpu_compile.py --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

PROGRAMS = ("chain", "softmax", "mlp_grad", "scan")


def _program(name: str):
    import numpy as np

    import ember
    import ember.numpy as jnp
    r = np.random.default_rng(0)
    if name == "chain":
        x = r.standard_normal(4096).astype(np.float32)
        return (lambda x: jnp.tanh(jnp.exp(x) * 2 + 1) / (1 + x * x)), (x,)
    if name == "softmax":
        return (lambda x: ember.nn.softmax(x, axis=-1)), (r.standard_normal((256, 256)).astype(np.float32),)
    if name == "scan":
        return ((lambda x: ember.lax.fori_loop(0, 10, lambda i, c: jnp.tanh(c @ c) * 0.5 + c, x)),
                (r.standard_normal((16, 16)).astype(np.float32),))

    def loss(w1, w2, x):
        h = jnp.tanh(x @ w1)
        return jnp.mean(jnp.sum(ember.nn.log_softmax(h @ w2, axis=-1), axis=-1))
    return ember.grad(loss, argnums=(0, 1)), (r.standard_normal((64, 128)).astype(np.float32),
                                              r.standard_normal((128, 10)).astype(np.float32),
                                              r.standard_normal((32, 64)).astype(np.float32))


def _webgpu_child(name: str) -> None:
    import ember
    from ember._src.gpu import kernels, webgpu, webgpu_loops
    webgpu.unavailable_reason()  # the device opens outside the timings
    acc = {"schedule": 0.0, "pipeline": 0.0, "kernels": 0}
    schedule, pipeline = kernels.schedule, webgpu._pipeline

    def timed_schedule(*a, **k):
        t = time.perf_counter()
        s = schedule(*a, **k)
        acc["schedule"] += time.perf_counter() - t
        acc["kernels"] += len(s.kernels)
        return s

    def timed_pipeline(src):
        t = time.perf_counter()
        p = pipeline(src)
        acc["pipeline"] += time.perf_counter() - t
        return p
    kernels.schedule = timed_schedule
    webgpu._pipeline = webgpu_loops._pipeline = timed_pipeline
    f, args = _program(name)
    t = time.perf_counter()
    ember.tree.leaves(ember.jit(f, backend="webgpu")(*args))[0].block_until_ready()
    acc["first_call"] = time.perf_counter() - t
    print(json.dumps(acc))


def _ms(xs: list[float]) -> str:
    return f"{statistics.median(xs) * 1e3:.2f} [{min(xs) * 1e3:.2f}-{max(xs) * 1e3:.2f}]"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child", default=None)
    a = ap.parse_args()
    if a.child:
        return _webgpu_child(a.child)
    from ember._src.gpu import cuda_runtime, webgpu
    print("| program | kernels | schedule+render ms | pipelines ms | first call ms |\n|---|---|---|---|---|")
    if webgpu.unavailable_reason() is None:
        runs: dict[str, list[dict]] = {p: [] for p in PROGRAMS}
        for _ in range(a.repeat):  # interleaved
            for p in PROGRAMS:
                out = subprocess.run([sys.executable, __file__, "--child", p], capture_output=True, text=True,
                                     check=True)
                runs[p].append(json.loads(out.stdout.strip().splitlines()[-1]))
        for p, rs in runs.items():
            col = {k: [r[k] for r in rs] for k in ("schedule", "pipeline", "first_call")}
            print(f"| {p} | {rs[0]['kernels']} | {_ms(col['schedule'])} | {_ms(col['pipeline'])} | "
                  f"{_ms(col['first_call'])} |")
    if cuda_runtime.nvrtc_unavailable_reason() is None:
        os.environ["EMBER_CACHE_DIR"] = tempfile.mkdtemp(prefix="ember-bench-")
        import ember
        f, args = _program("mlp_grad")
        src = ember.jit(f, backend="cuda").lower(*args).compile().as_text()
        cold, warm = [], []
        for i in range(a.repeat):
            s = src + f"\n// run {i}\n"  # a new key each run: a real NVRTC compile
            for out in (cold, warm):
                cuda_runtime._PTX.clear()
                t = time.perf_counter()
                cuda_runtime.compile_ptx(s, "compute_90")
                out.append(time.perf_counter() - t)
        print(f"\nCUDA mlp_grad ({len(src)} chars of CUDA C): NVRTC {_ms(cold)} ms, "
              f"PTX from disk {_ms(warm)} ms")


if __name__ == "__main__":
    main()
