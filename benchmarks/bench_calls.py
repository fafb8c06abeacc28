"""Native call lowerings vs the Python fallback steps they replace: threefry random normals,
cumsum, sort, batched Cholesky and solve. "ember native (fallback steps)" builds the same program
with the call lowerings, the special-function C ops, ``inline_calls`` and ``split_threefry``
switched off (the state
before they existed), so both are measured side by side in one process.

    python benchmarks/bench_calls.py [--threads N]

Writes ``benchmarks/results/calls.{json,md}`` (``calls_threadsN`` with ``--threads N``).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report  # noqa: E402

import ember  # noqa: E402
import ember.numpy as jnp  # noqa: E402
from ember import random  # noqa: E402
from ember._src import core  # noqa: E402
from ember._src.native import opinfo  # noqa: E402
from ember._src.native.rewrite import passes  # noqa: E402


@contextlib.contextmanager
def fallbacks() -> Iterator[None]:
    """Build programs as before the call lowerings: those primitives become fallback steps."""
    special = {core.PRIMITIVES[k] for k in ("digamma", "erf_inv", "polygamma", "bitcast_convert_type")}
    saved = {p: i for p, i in opinfo.REGISTRY.items() if i.category is opinfo.OpCategory.CALL or p in special}
    saved_passes = passes.DEFAULT_PASSES
    for p in saved:
        del opinfo.REGISTRY[p]
    passes.DEFAULT_PASSES = tuple(p for p in saved_passes if p not in ("inline_calls", "split_threefry"))
    try:
        yield
    finally:
        opinfo.REGISTRY.update(saved)
        passes.DEFAULT_PASSES = saved_passes


def interleaved(impls: dict, xs: list, reps: int = 31) -> dict:
    """Median seconds per call of each implementation, calls interleaved round-robin so load
    changes on a shared machine hit all of them alike."""
    samples: dict[str, list[float]] = {k: [] for k in impls}
    for fn in impls.values():
        fn(*xs)
    for _ in range(reps):
        for k, fn in impls.items():
            t = time.perf_counter()
            fn(*xs)
            samples[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in samples.items()}


def normal(k):
    return random.normal(k, (1 << 20,))


def bits(k):
    return random.bits(k, (1 << 20,))


def cholesky(a):
    return jnp.linalg.cholesky(a)


def solve(a, b):
    return jnp.linalg.solve(a, b)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=None, help="OpenMP threads for ember native")
    args = ap.parse_args()
    opts = {"num_threads": args.threads} if args.threads else {}
    rng = np.random.default_rng(0)
    m = rng.standard_normal((64, 32, 32)).astype(np.float32)
    spd = m @ m.transpose(0, 2, 1) + 32 * np.eye(32, dtype=np.float32)
    rhs = rng.standard_normal((64, 32, 4)).astype(np.float32)
    x6 = rng.standard_normal(1_000_000).astype(np.float32)
    cases = [
        ("random.normal(key, (2^20,)) float32", normal, [random.PRNGKey(0)], None),
        ("random.bits(key, (2^20,)) uint32", bits, [random.PRNGKey(0)], None),
        ("jnp.cumsum 1e6 float32", jnp.cumsum, [x6], np.cumsum),
        ("jnp.sort 1e6 float32", jnp.sort, [x6], np.sort),
        ("linalg.cholesky 64 x 32x32 float32", cholesky, [spd], np.linalg.cholesky),
        ("linalg.solve 64 x 32x32 float32, 4 rhs", solve, [spd, rhs], np.linalg.solve),
    ]
    rows = []
    for label, f, xs, ref in cases:
        native = ember.jit(f, backend="native", **opts)
        want = native(*xs)
        with fallbacks():
            before = ember.jit(lambda *a, f=f: f(*a), backend="native", **opts)
            got = before(*xs)
        n_fb = before.lower(*xs).executable.schedule.count("fallback")
        assert native.lower(*xs).executable.schedule.count("fallback") == 0
        np.testing.assert_allclose(np.asarray(want), np.asarray(got), rtol=1e-4, atol=1e-4)
        impls = {"ember native": native, "ember native (fallback steps)": before}
        if ref is not None:
            impls["numpy"] = ref
        times = interleaved(impls, xs)
        rows.append({"workload": f"{label} [{n_fb} fallback steps before]", "times": times,
                     "speedup vs fallback": times["ember native (fallback steps)"] / times["ember native"]})
        print(label, {k: f"{v * 1e3:.3f} ms" for k, v in times.items()},
              f"speedup {rows[-1]['speedup vs fallback']:.2f}x", flush=True)
    name = f"calls_threads{args.threads}" if args.threads else "calls"
    title = "Native call lowerings vs fallback steps (median per call" + \
        (f", {args.threads} OpenMP thread(s))" if args.threads else ")")
    print(report(title, rows, name))


if __name__ == "__main__":
    main()
