"""Eager (un-jitted) calls: ember.numpy outside ``jit`` vs NumPy, JAX without ``jit`` and PyTorch
eager, on small operands where dispatch cost dominates and on a 1000x1000 product. "ember eager
(general path)" is ember with its eager fast path switched off (the state before it existed),
measured in the same run.

    python benchmarks/bench_eager.py [--threads N]

``--threads N`` limits every library to ``N`` threads (set before NumPy, JAX and torch load); the
1000x1000 product also runs under ``ember.jit`` ("ember jit") for the compiled GEMM's time.
Writes ``benchmarks/results/eager.{json,md}``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from threads import limit_threads, quiet_openblas  # noqa: E402

if __name__ == "__main__":  # thread limits must be set before NumPy, JAX and torch load
    _parser = argparse.ArgumentParser(description=__doc__)
    _parser.add_argument("--threads", type=int, default=None, help="threads for every library")
    _threads = _parser.parse_args().threads
    if _threads:
        limit_threads(_threads)
    quiet_openblas()

import numpy as np  # noqa: E402
from common import fmt, have, interleaved, medians, report  # noqa: E402

import ember  # noqa: E402
import ember.numpy as jnp  # noqa: E402
from ember._src import flags  # noqa: E402


def workloads() -> list[tuple[str, list[np.ndarray], str]]:
    rng = np.random.default_rng(0)
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    return [
        ("x + 1 (4 floats)", [f32(4)], "add1"),
        ("sin(x) (4 floats)", [f32(4)], "sin"),
        ("x * y (1000 floats)", [f32(1000), f32(1000)], "mul"),
        ("x < 0.5 (4 floats)", [f32(4)], "lt"),
        ("a[1, 2] (3x4 floats)", [f32(3, 4)], "item"),
        ("a[1] (row of 3x4)", [f32(3, 4)], "row"),
        ("a[:, 1:3] (100x100)", [f32(100, 100)], "cols"),
        ("matmul 1000x1000", [f32(1000, 1000), f32(1000, 1000)], "matmul"),
    ]


OPS = {
    "add1": lambda m, x: x + 1,
    "sin": lambda m, x: m.sin(x),
    "mul": lambda m, x, y: x * y,
    "lt": lambda m, x: x < 0.5,
    "item": lambda m, a: a[1, 2],
    "row": lambda m, a: a[1],
    "cols": lambda m, a: a[:, 1:3],
    "matmul": lambda m, x, y: m.matmul(x, y),
}


def main() -> None:
    rows = []
    jax_np = torch = None
    if have("jax"):
        import jax.numpy as jax_np
    if have("torch"):
        import torch
    for title, xs, op in workloads():
        fn = OPS[op]
        want = fn(np, *xs)
        ex = [jnp.asarray(x) for x in xs]
        impls = {"ember native": lambda fn=fn, ex=ex: fn(jnp, *ex)}

        def general(fn=fn, ex=ex):
            with flags.override("ember_eager_fast_path", False):
                return fn(jnp, *ex)

        impls["ember eager (general path)"] = general
        if op == "matmul":  # the compiled GEMM, for comparison
            jitted = ember.jit(lambda x, y: x @ y)
            impls["ember jit"] = lambda ex=ex, jitted=jitted: jitted(*ex)
        impls["numpy"] = lambda fn=fn, xs=xs: fn(np, *xs)
        if jax_np is not None:
            jx = [jax_np.asarray(x) for x in xs]
            impls["jax (no jit)"] = lambda fn=fn, jx=jx: fn(jax_np, *jx).block_until_ready()
        if torch is not None:
            tx = [torch.from_numpy(x) for x in xs]
            impls["torch eager"] = lambda fn=fn, tx=tx: fn(torch, *tx)
        for k, f in impls.items():  # every implementation checked before timing
            got = np.asarray(f())
            np.testing.assert_allclose(got.astype(np.float64), np.asarray(want, np.float64), rtol=2e-4,
                                       atol=1e-4, err_msg=k)
        stats = interleaved(impls, max_seconds=8.0)
        rows.append({"workload": title, "times": medians(stats), "stats": stats})
    print(report("Eager calls (no jit)", rows, "eager"))
    ranges = _ranges(rows)
    print(ranges)
    with open(Path(__file__).resolve().parent / "results" / "eager.md", "a") as f:
        f.write("\n" + ranges)


def _ranges(rows: list[dict]) -> str:
    """Markdown table of each implementation's interquartile range over the interleaved rounds."""
    impls = list(dict.fromkeys(k for r in rows for k in r["stats"]))
    lines = ["Interquartile ranges over the rounds (q1 - q3):", "",
             "| workload | " + " | ".join(impls) + " |", "|---" * (len(impls) + 1) + "|"]
    for r in rows:
        st = r["stats"]
        cells = [f"{fmt(st[k]['q1'])} - {fmt(st[k]['q3'])}" if k in st else "-" for k in impls]
        lines.append(f"| {r['workload']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
