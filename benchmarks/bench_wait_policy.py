"""The OpenMP wait policy ember sets at import, measured: a 1-D softmax of 2^20 floats and a 16-step
``scan`` over 2^20 floats (both run OpenMP regions at default threads) in fresh processes under
each policy, optionally with busy processes taking the CPUs (docs/performance.md, "OpenMP wait
policy").

    python benchmarks/bench_wait_policy.py [--rounds 3] [--calls 150] [--busy N]

Policies: ``OMP_WAIT_POLICY=PASSIVE`` (ember's default), libgomp's own default (the variable set
empty: libgomp warns and keeps its spinning default) and a bounded spin (``GOMP_SPINCOUNT=10000``).
``--busy N`` starts N pure-Python busy loops for the run (an oversubscribed machine). Each round
runs every policy once in a new process, order fixed; prints each process's median, 90th
percentile and maximum wall time per call. Writes no result file.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

POLICIES = {
    "passive (ember's default)": {"OMP_WAIT_POLICY": "PASSIVE"},
    "libgomp default (spin)": {"OMP_WAIT_POLICY": ""},
    "GOMP_SPINCOUNT=10000": {"OMP_WAIT_POLICY": "", "GOMP_SPINCOUNT": "10000"},
}

CHILD = r"""
import sys, time
import numpy as np
import ember, ember.numpy as jnp
from ember import lax
calls = int(sys.argv[1])
x = jnp.asarray(np.random.default_rng(0).standard_normal(1 << 20).astype(np.float32))
@ember.jit
def softmax(x):
    e = jnp.exp(x - jnp.max(x))
    return e / jnp.sum(e)
@ember.jit
def loop(x):
    def body(c, _):
        c = jnp.tanh(c * 1.01 + 0.1)
        return c, jnp.sum(c)
    return lax.scan(body, x, None, length=16)[1]
out = []
for name, f in (("softmax 2^20", softmax), ("scan 16 x 2^20", loop)):
    np.asarray(f(x))
    ts = []
    for _ in range(calls):
        t = time.perf_counter()
        np.asarray(f(x))
        ts.append(time.perf_counter() - t)
    ts.sort()
    out.append(f"{name}: {ts[len(ts) // 2] * 1e3:.2f} / {ts[int(0.9 * (len(ts) - 1))] * 1e3:.2f} / "
               f"{ts[-1] * 1e3:.1f} ms")
print(" | ".join(out))
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--calls", type=int, default=150)
    p.add_argument("--busy", type=int, default=0, help="busy processes started for the run")
    a = p.parse_args(argv)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(a.busy)]
    try:
        print(f"per call: median / 90th percentile / max wall time; {a.busy} busy processes; "
              f"load average {os.getloadavg()[0]:.1f}")
        for r in range(a.rounds):
            for name, env in POLICIES.items():
                res = subprocess.run([sys.executable, "-c", CHILD, str(a.calls)], env={**os.environ, **env},
                                     capture_output=True, text=True, timeout=600)
                line = res.stdout.strip() or res.stderr.strip().splitlines()[-1]
                print(f"round {r + 1} {name:27s} {line}")
    finally:
        for b in busy:
            b.kill()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
