"""Split loops for concatenates (``ember._src.native.scheduling.concat_split``) on the convolution
workloads of
``bench_conv.py``: the native backend with per-piece loop nests vs the same backend with the
select-chain lowering (``concat_split.ENABLED = False`` at compile time), the numpy backend and
JAX jit (when installed), interleaved in one process.

    python benchmarks/bench_concat_split.py [--quick] [--rounds 5]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_conv import jax_runner, round_medians, setup, workload_fn  # noqa: E402

import ember  # noqa: E402
from ember import lax  # noqa: E402
from ember._src.native.scheduling import concat_split  # noqa: E402


def main() -> None:
    args, jax, cases = setup(default_rounds=5)
    for name, cfg, inputs in cases:
        if cfg.get("pool"):
            continue
        runners: dict = {}
        for label, backend, enabled in (("split", "native", True), ("select", "native", False),
                                        ("numpy", "numpy", True)):
            g = ember.jit(workload_fn(lax, ember.grad, cfg), backend=backend)
            concat_split.ENABLED = enabled
            try:
                g(*inputs)  # compiles now
            finally:
                concat_split.ENABLED = True
            runners[label] = lambda g=g, inputs=inputs: g(*inputs)
        ref = np.asarray(runners["numpy"]())
        for k in ("split", "select"):
            np.testing.assert_allclose(np.asarray(runners[k]()), ref, rtol=2e-4, atol=2e-4)
        if jax is not None:
            runners["jax"] = jax_runner(jax, cfg, inputs)
        t = {k: v * 1e3 for k, v in round_medians(runners, args.rounds).items()}
        parts = " ".join(f"{k} {v:.3f} ms" for k, v in t.items())
        print(f"{name}: {parts}  select/split {t['select'] / t['split']:.2f}x", flush=True)


if __name__ == "__main__":
    main()
