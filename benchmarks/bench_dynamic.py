"""Serving 64 distinct batch sizes of a small MLP: named dynamic axes vs. per-shape compilation.

    python benchmarks/bench_dynamic.py [--backend numpy] [--sizes 64] [--no-jax] [--no-torch]

Reports, per system: the total time of the first call at each of the 64 batch sizes (tracing,
compiling, specializing and running), the total of a second ("warm") pass over the same sizes,
and for ember the cost of building one specialization, in microseconds. JAX ``jit`` and
``torch.compile(dynamic=True)`` run when importable.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

D_IN, D_HIDDEN, D_OUT = 128, 256, 10


def make_params(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"w1": (rng.standard_normal((D_IN, D_HIDDEN)) / np.sqrt(D_IN)).astype(np.float32),
            "b1": np.zeros(D_HIDDEN, np.float32),
            "w2": (rng.standard_normal((D_HIDDEN, D_HIDDEN)) / np.sqrt(D_HIDDEN)).astype(np.float32),
            "b2": np.zeros(D_HIDDEN, np.float32),
            "w3": (rng.standard_normal((D_HIDDEN, D_OUT)) / np.sqrt(D_HIDDEN)).astype(np.float32),
            "b3": np.zeros(D_OUT, np.float32)}


def mlp(np_like: object, params: dict, x: object) -> object:
    """The same MLP for every framework (``np_like`` is its NumPy-style namespace)."""
    h = np_like.tanh(x @ params["w1"] + params["b1"])
    h = np_like.tanh(h @ params["w2"] + params["b2"])
    return h @ params["w3"] + params["b3"]


REPEAT = 3


def serve(make_call: object, inputs: list) -> tuple[float, float, list]:
    """(first-pass seconds, warm-pass seconds, outputs of the first pass), each the best of
    ``REPEAT`` runs with a freshly compiled function (timings on a shared machine are noisy)."""
    firsts, warms = [], []
    for _ in range(REPEAT):
        call = make_call()
        t0 = time.perf_counter()
        outs = [np.asarray(call(x)) for x in inputs]
        firsts.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for x in inputs:
            np.asarray(call(x))
        warms.append(time.perf_counter() - t0)
    return min(firsts), min(warms), outs


def bench_ember(params: dict, inputs: list, backend: str) -> dict:
    import ember
    import ember.numpy as jnp

    params = {k: jnp.asarray(v) for k, v in params.items()}  # device-resident, as for JAX/torch
    made = []

    def make(**kw: object) -> object:
        f = ember.jit(lambda p, x: mlp(jnp, p, x), backend=backend, **kw)
        made.append(f)
        return lambda x: f(params, x)

    first, warm, outs = serve(lambda: make(dynamic_axes=[None, "batch, _"]), inputs)
    f = made[-1]
    info = f.cache_info()
    # cost of one new specialization (level 2), measured on bindings not seen before
    c = f.lower(params, inputs[0])
    fresh = [c.executable.build({"batch": 10_000 + i}).build_us for i in range(200)]
    s_first, s_warm, _ = serve(make, inputs)
    return {"first_s": first, "warm_s": warm, "compiles": info["compiles"],
            "specializations": info["specializations"],
            "specialization_us_median": statistics.median(fresh),
            "specialization_us_p90": float(np.percentile(fresh, 90)),
            "static_first_s": s_first, "static_warm_s": s_warm,
            "static_compiles": made[-1].cache_info()["compiles"], "outs": outs}


def bench_jax(params: dict, inputs: list) -> dict | None:
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    p = {k: jnp.asarray(v) for k, v in params.items()}

    def make() -> object:
        f = jax.jit(lambda p, x: mlp(jnp, p, x))
        return lambda x: f(p, x).block_until_ready()

    first, warm, outs = serve(make, inputs)
    return {"first_s": first, "warm_s": warm, "compiles": len(inputs), "outs": outs}


def bench_torch(params: dict, inputs: list) -> dict | None:
    os.environ.setdefault("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")  # measure real compiles
    try:
        import torch
    except ImportError:
        return None
    p = {k: torch.from_numpy(v.copy()) for k, v in params.items()}

    def make() -> object:
        torch._dynamo.reset()
        f = torch.compile(lambda p, x: mlp(torch, p, x), dynamic=True)
        return lambda x: f(p, torch.from_numpy(x)).numpy()

    try:
        with torch.no_grad():
            first, warm, outs = serve(make, inputs)
    except Exception as e:  # no working C++ toolchain for inductor, etc.
        return {"error": f"{type(e).__name__}: {str(e)[:200]}"}
    return {"first_s": first, "warm_s": warm, "outs": outs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="numpy", help="ember backend (numpy, native, ...)")
    ap.add_argument("--sizes", type=int, default=64, help="number of distinct batch sizes")
    ap.add_argument("--no-jax", action="store_true")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--repeat", type=int, default=3, help="runs per system (the best is reported)")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()
    global REPEAT
    REPEAT = args.repeat

    params = make_params()
    rng = np.random.default_rng(1)
    sizes = [8 * i for i in range(1, args.sizes + 1)]
    order = rng.permutation(sizes)
    inputs = [rng.standard_normal((int(b), D_IN)).astype(np.float32) for b in order]  # NumPy inputs
    ref = [mlp(np, params, x.astype(np.float64)) for x in inputs]

    results = {"ember": bench_ember(params, inputs, args.backend)}
    if not args.no_jax:
        results["jax.jit"] = bench_jax(params, inputs)
    if not args.no_torch:
        results["torch.compile(dynamic=True)"] = bench_torch(params, inputs)

    print(f"MLP {D_IN}-{D_HIDDEN}-{D_HIDDEN}-{D_OUT}, {len(sizes)} batch sizes {sizes[0]}..{sizes[-1]}, "
          f"ember backend {args.backend!r}")
    print(f"{'system':34s} {'first calls (s)':>16s} {'warm calls (s)':>15s} {'per new shape (ms)':>19s}")
    for name, r in results.items():
        if r is None:
            print(f"{name:34s} not installed")
            continue
        if "error" in r:
            print(f"{name:34s} failed: {r['error']}")
            continue
        for o, want in zip(r["outs"], ref):
            np.testing.assert_allclose(o, want, rtol=1e-3, atol=1e-3)
        print(f"{name:34s} {r['first_s']:16.3f} {r['warm_s']:15.3f} "
              f"{1e3 * (r['first_s'] - r['warm_s']) / len(sizes):19.2f}")
        if name == "ember":
            print(f"{'ember, static jit (retrace/shape)':34s} {r['static_first_s']:16.3f} "
                  f"{r['static_warm_s']:15.3f} "
                  f"{1e3 * (r['static_first_s'] - r['static_warm_s']) / len(sizes):19.2f}")
    e = results["ember"]
    print(f"ember: {e['compiles']} compile, {e['specializations']} specializations; one new "
          f"specialization costs {e['specialization_us_median']:.1f} us (median; p90 "
          f"{e['specialization_us_p90']:.1f} us)")
    if args.json:
        clean = {k: {kk: vv for kk, vv in (v or {}).items() if kk != "outs"} for k, v in results.items()}
        Path(args.json).write_text(json.dumps(clean, indent=2))


if __name__ == "__main__":
    main()
