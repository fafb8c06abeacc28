"""Fused-kernel workloads: elementwise chain, row softmax, layer norm, 1024^3 matmul and the call
overhead of a trivial function; ember native vs the ember numpy backend vs NumPy, JAX jit, PyTorch
eager and ONNX Runtime (a ``torch.onnx`` export) when installed. All implementations are checked
against NumPy, then timed in interleaved rounds (``common.interleaved``).

    python benchmarks/bench_kernels.py [--quick] [--threads N] [--only KEY ...] [--runs R] [--paired N]

``--threads N`` limits ember and every peer to N threads. Writes
``benchmarks/results/kernels.{json,md}``; with ``--only`` (workload keys: chain, softmax,
layernorm, trivial, matmul) ``kernels_<keys>[_threadsN].{json,md}`` instead, so a partial run does
not replace the full table. ``--runs R`` measures everything R times in turn and reports the
median over the runs' medians, with each run's medians of ember and the peers (the range) below.
``--paired ROUNDS`` also times ember and the best peer back to back in each of ROUNDS rounds (the
median per-round ratio is steadier than ratios of medians on a loaded machine).
The memory-copy row (``x.copy()``) is the bandwidth limit for the elementwise chain.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import threads  # noqa: E402

if "--threads" in sys.argv:  # every implementation limited (set before NumPy, JAX, torch load)
    threads.limit_threads(int(sys.argv[sys.argv.index("--threads") + 1]))
threads.quiet_openblas()  # before NumPy loads OpenBLAS

import numpy as np  # noqa: E402
from common import (  # noqa: E402
    RESULTS,
    Workload,
    fmt,
    have,
    interleaved,
    is_peer,
    medians,
    peer_runners,
    report,
)

import ember  # noqa: E402
import ember.numpy as jnp  # noqa: E402
from ember import lax  # noqa: E402


def chain(x):
    return jnp.tanh(2 * x + 1) * jnp.exp(-x)


def softmax(x):
    m = lax.reduce_max(x, (1,))
    e = jnp.exp(x - lax.broadcast_in_dim(m, x.shape, (0,)))
    return e / lax.broadcast_in_dim(lax.reduce_sum(e, (1,)), x.shape, (0,))


def layernorm(x, g, b):
    n = x.shape[-1]
    mean = lax.reduce_sum(x, (1,)) / n
    xc = x - lax.broadcast_in_dim(mean, x.shape, (0,))
    var = lax.reduce_sum(xc * xc, (1,)) / n
    return xc * lax.broadcast_in_dim(lax.rsqrt(var + 1e-5), x.shape, (0,)) * g + b


def matmul(a, b):
    return lax.dot(a, b)


def trivial(x):
    return x + 1.0


NUMPY = {
    "chain": lambda x: np.tanh(2 * x + 1) * np.exp(-x),
    "softmax": lambda x: (lambda e: e / e.sum(1, keepdims=True))(np.exp(x - x.max(1, keepdims=True))),
    "layernorm": lambda x, g, b: (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5)
    * g + b,
    "matmul": lambda a, b: a @ b,
    "trivial": lambda x: x + np.float32(1.0),
}
FUNCS = {"chain": chain, "softmax": softmax, "layernorm": layernorm, "matmul": matmul, "trivial": trivial}


def jax_versions() -> dict:
    """JAX versions (``common.peer_runners`` jits them)."""
    if not have("jax"):
        return {}
    import jax
    import jax.numpy as J

    return {
        "chain": lambda x: J.tanh(2 * x + 1) * J.exp(-x),
        "softmax": lambda x: jax.nn.softmax(x, axis=1),
        "layernorm": lambda x, g, b: (x - x.mean(1, keepdims=True))
        * jax.lax.rsqrt(x.var(1, keepdims=True) + 1e-5) * g + b,
        "matmul": lambda a, b: a @ b,
        "trivial": lambda x: x + 1.0,
    }


def torch_versions() -> dict:
    if not have("torch"):
        return {}
    import torch

    return {
        "chain": lambda x: torch.tanh(2 * x + 1) * torch.exp(-x),
        "softmax": lambda x: torch.softmax(x, dim=1),
        "layernorm": lambda x, g, b: torch.nn.functional.layer_norm(x, (x.shape[-1],), g, b, 1e-5),
        "matmul": lambda a, b: a @ b,
        "trivial": lambda x: x + 1.0,
    }


def workload(key: str, label: str, xs: list[np.ndarray]) -> Workload:
    """The peers' versions of ``key`` over ``xs`` (all inputs are per-call data)."""
    return Workload(label, list(xs), numpy=NUMPY[key], jax=jax_versions().get(key),
                    torch=torch_versions().get(key), rtol=2e-3, atol=2e-3)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="skip the 2**24 chain and the 1024^3 matmul")
    ap.add_argument("--threads", type=int, default=None, help="threads for ember and every peer")
    ap.add_argument("--only", nargs="+", choices=sorted(FUNCS), help="only these workloads")
    ap.add_argument("--runs", type=int, default=1, help="repeat the measurements (median over runs)")
    ap.add_argument("--paired", type=int, default=0, metavar="ROUNDS",
                    help="also time ember and the best peer back to back for ROUNDS rounds per run")
    args = ap.parse_args()
    from ember._src.native import prepare
    prepare()  # time the steady state: per-machine runtime libraries loaded
    rng = np.random.default_rng(0)
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    cases = [("chain", "elementwise chain 2^20", [f32(1 << 20)]),
             ("softmax", "row softmax 1024x1024", [f32(1024, 1024)]),
             ("layernorm", "layer norm 1024x1024", [f32(1024, 1024), f32(1024), f32(1024)]),
             ("trivial", "call overhead (x + 1 on 4 floats)", [f32(4)])]
    if not args.quick:
        cases.insert(1, ("chain", "elementwise chain 2^24", [f32(1 << 24)]))
        cases.append(("matmul", "matmul 1024^3 float32", [f32(1024, 1024), f32(1024, 1024)]))
    if args.only:
        cases = [c for c in cases if c[0] in args.only]
    opts = {"num_threads": args.threads} if args.threads else {}
    loads = [workload(key, label, xs) for key, label, xs in cases]
    runs = [[measure(key, w, opts, args.paired) for (key, _, _), w in zip(cases, loads)]
             for _ in range(args.runs)]
    pairs = [[r[i].pop("paired") for r in runs] if args.paired else [] for i in range(len(cases))]
    rows = [{"workload": label, "times": {k: statistics.median(r[i][k] for r in runs) for k in runs[0][i]},
             "runs": [r[i] for r in runs], "paired": pairs[i]} for i, (_, label, _) in enumerate(cases)]
    name = "kernels" if not args.only else "kernels_" + "_".join(args.only) + (
        f"_threads{args.threads}" if args.threads else "")
    title = "Fused kernels (median per call" + (f", median over {args.runs} runs)" if args.runs > 1 else ")")
    text = report(title, rows, name)
    if args.runs > 1:
        text += "\n" + run_ranges(rows)
    if args.paired:
        text += "\n" + paired_table(rows)
    if args.runs > 1 or args.paired:
        (RESULTS / f"{name}.md").write_text(text)
    print(text)


def paired_table(rows: list[dict]) -> str:
    """Markdown table of the paired comparisons (one line per run)."""
    lines = ["Paired rounds (ember native and the best peer back to back per round; per run):", "",
             "| workload | peer | rounds | ember / peer: median (q1 - q3) | fastest call: ember, peer | "
             "median call: ember, peer |", "|---|---|---|---|---|---|"]
    for r in rows:
        for p in r["paired"]:
            lines.append(f"| {r['workload']} | {p['peer']} | {p['rounds']} | {p['ratio_median']:.2f}x "
                         f"({p['ratio_q1']:.2f} - {p['ratio_q3']:.2f}) | {fmt(p['ember_min'])}, "
                         f"{fmt(p['peer_min'])} | {fmt(p['ember_median'])}, {fmt(p['peer_median'])} |")
    return "\n".join(lines) + "\n"


def run_ranges(rows: list[dict]) -> str:
    """Markdown table: each run's median of every implementation, and the range over the runs."""
    impls = list(rows[0]["times"])
    lines = ["Per run (the medians of each run; min - max over the runs):", "",
             "| workload | " + " | ".join(impls) + " |", "|---" * (len(impls) + 1) + "|"]
    for r in rows:
        cells = []
        for k in impls:
            vals = [run[k] for run in r["runs"]]
            cells.append(" / ".join(fmt(v) for v in vals) + f" ({fmt(min(vals))} - {fmt(max(vals))})")
        lines.append(f"| {r['workload']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def measure(key: str, w: Workload, opts: dict, paired_rounds: int = 0, **timing) -> dict:
    """ember native (jitted call and bare executable), the ember numpy backend and each peer, after
    checking all of them against NumPy; the memory copy of the input is the limit for the chain.
    With ``paired_rounds``, also :func:`paired` against the peer with the best median (key
    ``"paired"``)."""
    xs = w.data
    native = ember.jit(FUNCS[key], backend="native", **opts)
    ref = ember.jit(FUNCS[key], backend="numpy")
    want = NUMPY[key](*xs)
    np.testing.assert_allclose(np.asarray(native(*xs)), want, rtol=w.rtol, atol=w.atol)
    exe = native.lower(*xs).executable
    impls = {"ember native": lambda: native(*xs),
             "ember native (executable)": lambda: exe(xs),
             "ember numpy backend": lambda: ref(*xs),
             **peer_runners(w, reference=want)}
    if key == "chain":
        impls["memory copy"] = lambda: xs[0].copy()
    times = medians(interleaved(impls, **timing))
    if paired_rounds:
        peers = {k: v for k, v in times.items() if is_peer(k) and k in impls}
        best = min(peers, key=peers.__getitem__)
        times["paired"] = paired(impls["ember native"], impls[best], paired_rounds) | {"peer": best}
    return times


def paired(ember_fn, peer_fn, rounds: int) -> dict:
    """One call of ember and one of the peer back to back per round (the order alternating), so
    both see the same momentary load: the median and quartiles of the per-round time ratios
    ember / peer, and each side's fastest and median call."""
    te: list[float] = []
    tp: list[float] = []
    for r in range(rounds):
        for fn, out in ((ember_fn, te), (peer_fn, tp)) if r % 2 == 0 else ((peer_fn, tp), (ember_fn, te)):
            t = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t)
    q = statistics.quantiles([a / b for a, b in zip(te, tp)], n=4)
    return {"ratio_median": q[1], "ratio_q1": q[0], "ratio_q3": q[2], "ember_min": min(te),
            "peer_min": min(tp), "ember_median": statistics.median(te), "peer_median": statistics.median(tp),
            "rounds": rounds}


if __name__ == "__main__":
    main()
