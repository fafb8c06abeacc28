"""Growth curves: time against problem size for each kind of work, ember jit beside NumPy, JAX
``jit`` and PyTorch eager, so a reader sees where ember wins and loses as work grows.

    python benchmarks/bench_growth.py [--quick] [--threads N] [--kinds elementwise,matmul,softmax,fft,conv]

Kinds: elementwise (``tanh(x) * 2 + 1`` over 2^10..2^24 float32), matmul (n x n float32, 64..2048),
softmax (rows of 1024 float32, 16..4096 rows), fft (complex64, 16 rows of length 2^6..2^16), conv
(NHWC 3x3, 16 -> 16 channels, batch 4, images 8..64 square). Every implementation is checked
against NumPy at each size before it is timed; timings are interleaved rounds
(``common.interleaved``). Writes ``benchmarks/results/growth.json`` and one
``growth_<kind>.png`` per kind (log-log, one line per implementation).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import threads  # noqa: E402

threads.quiet_openblas()  # before NumPy loads OpenBLAS: its idle threads would spin on the other core
if "--threads" in sys.argv:
    threads.limit_threads(int(sys.argv[sys.argv.index("--threads") + 1]))

import numpy as np  # noqa: E402
from common import RESULTS, have, interleaved, load_text, machine, medians  # noqa: E402

import ember  # noqa: E402
import ember.numpy as jnp  # noqa: E402
from ember import lax, nn  # noqa: E402


def _softmax_np(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _conv_np(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    n, h, wd, c = x.shape
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    cols = np.stack([xp[:, i:i + h, j:j + wd, :] for i in range(3) for j in range(3)], axis=3)
    return np.einsum("nhwkc,kcd->nhwd", cols, w.reshape(9, c, -1))


KINDS: dict[str, dict[str, Any]] = {
    "elementwise": {
        "sizes": [2**k for k in range(10, 25, 2)], "quick": [2**10, 2**16, 2**22],
        "data": lambda n, r: [r.standard_normal(n).astype(np.float32)],
        "numpy": lambda x: np.tanh(x) * 2 + 1, "ember": lambda x: jnp.tanh(x) * 2 + 1,
        "jax": lambda m: (lambda x: m.numpy.tanh(x) * 2 + 1),
        "torch": lambda t: (lambda x: t.tanh(x) * 2 + 1),
        "unit": "elements",
    },
    "matmul": {
        "sizes": [64, 128, 256, 512, 1024, 2048], "quick": [64, 256, 1024],
        "data": lambda n, r: [r.standard_normal((n, n)).astype(np.float32) for _ in range(2)],
        "numpy": lambda a, b: a @ b, "ember": lambda a, b: a @ b,
        "jax": lambda m: (lambda a, b: a @ b), "torch": lambda t: (lambda a, b: a @ b), "unit": "n (n x n)",
    },
    "softmax": {
        "sizes": [16, 64, 256, 1024, 4096], "quick": [16, 256, 4096],
        "data": lambda n, r: [r.standard_normal((n, 1024)).astype(np.float32)],
        "numpy": _softmax_np, "ember": lambda x: nn.softmax(x, axis=-1),
        "jax": lambda m: (lambda x: m.nn.softmax(x, axis=-1)),
        "torch": lambda t: (lambda x: t.softmax(x, -1)),
        "unit": "rows of 1024",
    },
    "fft": {
        "sizes": [2**k for k in range(6, 17, 2)], "quick": [64, 1024, 65536],
        "data": lambda n, r: [(r.standard_normal((16, n))
                               + 1j * r.standard_normal((16, n))).astype(np.complex64)],
        "numpy": lambda x: np.fft.fft(x), "ember": lambda x: jnp.fft.fft(x),
        "jax": lambda m: (lambda x: m.numpy.fft.fft(x)), "torch": lambda t: (lambda x: t.fft.fft(x)),
        "unit": "length (16 rows)",
    },
    "conv": {
        "sizes": [8, 16, 32, 64], "quick": [8, 32],
        "data": lambda n, r: [r.standard_normal((4, n, n, 16)).astype(np.float32),
                              (r.standard_normal((3, 3, 16, 16)) * 0.1).astype(np.float32)],
        "numpy": _conv_np,
        "ember": lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                                       dimension_numbers=("NHWC", "HWIO", "NHWC")),
        "jax": lambda m: (lambda x, w: m.lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                                                 dimension_numbers=("NHWC", "HWIO", "NHWC"))),
        "torch": lambda t: (lambda x, w: t.nn.functional.conv2d(x.permute(0, 3, 1, 2), w.permute(3, 2, 0, 1),
                                                                padding=1).permute(0, 2, 3, 1)),
        "unit": "image side (4 x n x n x 16)",
    },
}


def runners(spec: dict, xs: list[np.ndarray]) -> dict[str, Callable[[], Any]]:
    out: dict[str, Callable[[], Any]] = {}
    nt = threads.bench_threads()
    ef = ember.jit(spec["ember"], **({"num_threads": nt} if nt else {}))
    ex = [jnp.asarray(x) for x in xs]
    out["ember native"] = lambda: ef(*ex)
    out["numpy"] = lambda: spec["numpy"](*xs)
    if have("jax"):
        import jax

        jf = jax.jit(spec["jax"](jax))
        jx = [jax.device_put(x) for x in xs]
        out["jax jit"] = lambda: jf(*jx).block_until_ready()
    if have("torch"):
        import torch

        tf, tx = spec["torch"](torch), [torch.from_numpy(x) for x in xs]

        def run() -> Any:
            with torch.inference_mode():
                return tf(*tx)

        out["torch eager"] = run
    return out


def chart(kind: str, spec: dict, rows: list[dict], suffix: str = "") -> None:
    if not have("matplotlib"):
        print("[bench] matplotlib not installed: no chart (pip install -e .[bench])")
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    impls = [k for k in rows[0]["times"]]
    for k in impls:
        pts = [(r["size"], r["times"][k]) for r in rows if r["times"].get(k)]
        ax.plot([p[0] for p in pts], [p[1] * 1e6 for p in pts], marker="o", label=k,
                lw=2.5 if k.startswith("ember") else 1.2)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(spec["unit"])
    ax.set_ylabel("median time per call (us, log)")
    threads_text = f"{suffix[len('_threads'):]} thread(s)" if suffix else "default threads"
    ax.set_title(f"{kind}: time vs size, {threads_text} ({machine()}; load {load_text()})", fontsize=8)
    ax.grid(which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / f"growth_{kind}{suffix}.png", dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="three sizes per kind, shorter timing")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--threads", type=int, default=None,
                    help="limit ember and every peer to N threads (results: growth_threadsN.*)")
    args = ap.parse_args()
    suffix = f"_threads{args.threads}" if args.threads else ""
    rng = np.random.default_rng(0)
    result: dict[str, Any] = {"machine": machine(), "threads": args.threads, "kinds": {}}
    RESULTS.mkdir(exist_ok=True)
    for kind in args.kinds.split(","):
        spec = KINDS[kind]
        rows = []
        for n in spec["quick" if args.quick else "sizes"]:
            xs = spec["data"](n, rng)
            want = np.asarray(spec["numpy"](*xs))
            impls = runners(spec, xs)
            for name, f in impls.items():  # every implementation checked before it is timed
                out = f()
                got = np.asarray(out.detach() if hasattr(out, "detach") else out)
                scale = max(1.0, float(np.abs(want).max()))
                np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3 * scale,
                                           err_msg=f"{kind} n={n}: {name}")
            stats = interleaved(impls, max_seconds=2.0 if args.quick else 6.0, min_rounds=5)
            times = medians(stats)
            rows.append({"size": n, "times": times, "load": load_text()})
            print(f"{kind:12s} n={n:<8d} " + "  ".join(f"{k}={v * 1e6:9.1f}us" for k, v in times.items()),
                  flush=True)
        result["kinds"][kind] = rows
        chart(kind, spec, rows, suffix)
    (RESULTS / f"growth{suffix}.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
