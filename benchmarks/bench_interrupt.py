"""What Ctrl-C support costs (issue #21): the same programs generated with interrupt polling
(``EM_POLL()`` in loops and pooled chunks, ``ember_main`` entering/leaving the interrupt runtime)
and without it (``interrupt.POLLING = False``, i.e. the code as before), timed side by side in
interleaved rounds in one process (the program cache is off so that neither variant is served
the other's source):

* ``x + 1`` on 4 float32 elements: a program that does not poll (identical code either way);
* ``fori_loop`` of 10 steps on 4 elements: the per-call cost of entering/leaving the runtime;
* ``fori_loop`` of 100,000 steps on a float32 scalar and on 64 elements: the per-iteration poll;
* a pooled row reduction ``sin(x[:, None] * y[None, :]).sum(1)`` (512 x 4096): per-row polls.

Also reported: nanoseconds per ``sigaction`` install-and-restore pair on this machine, the cost
a handler installed around every call would have added (why the handler is installed once).

Times are process CPU time per call (``time.process_time``; medians over interleaved rounds), not
wall time: on a shared machine a descheduled process would otherwise dominate a difference of a
few nanoseconds.

    python benchmarks/bench_interrupt.py

Writes ``benchmarks/results/interrupt.{json,md}``.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

os.environ["EMBER_PROGRAM_CACHE"] = "0"
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report  # noqa: E402

import ember  # noqa: E402
import ember.numpy as jnp  # noqa: E402
from ember import lax  # noqa: E402
from ember._src import native  # noqa: E402
from ember._src.native.runtime import interrupt  # noqa: E402


def workloads() -> dict[str, tuple]:
    """name -> (function, arguments); each name is jitted twice, with and without polling."""
    x4 = np.arange(4, dtype=np.float32)
    x64 = np.linspace(-1, 1, 64).astype(np.float32)
    rows = np.linspace(0, 1, 512).astype(np.float32)
    cols = np.linspace(0, 1, 4096).astype(np.float32)
    return {
        "x + 1 (4 elements, no loop)": (lambda x: x + 1, (x4,)),
        "fori_loop 10 steps (4 elements)": (
            lambda x: lax.fori_loop(0, 10, lambda i, c: c * 0.5 + 1.0, x), (x4,)),
        "fori_loop 1e5 steps (scalar)": (
            lambda x: lax.fori_loop(0, 100_000, lambda i, c: c * 0.999 + 0.001, x), (np.float32(1),)),
        "fori_loop 1e5 steps (64 elements)": (
            lambda x: lax.fori_loop(0, 100_000, lambda i, c: c * 0.999 + 0.001, x), (x64,)),
        "pooled row reduction 512 x 4096": (
            lambda x, y: jnp.sin(x[:, None] * y[None, :]).sum(axis=1), (rows, cols)),
    }


def build(fn, args: tuple, polling: bool):
    """A fresh jitted ``fn``, compiled with interrupt polling on or off; returns a zero-argument
    runner and its result."""
    interrupt.POLLING = polling
    try:
        f = ember.jit(fn)
        out = np.asarray(f(*args))
        src = f.lower(*args).executable.source
    finally:
        interrupt.POLLING = True
    return (lambda: f(*args)), out, "EM_POLL()" in src


def cpu_medians(impls: dict[str, Callable[[], object]], rounds: int = 41,
                sample_time: float = 5e-3) -> dict[str, float]:
    """Median process CPU seconds per call of each callable, over ``rounds`` interleaved rounds of
    back-to-back calls (a sample lasts about ``sample_time``)."""
    calls = {}
    for k, fn in impls.items():
        fn()
        t = time.process_time()
        fn()
        calls[k] = max(1, int(sample_time / max(time.process_time() - t, 1e-7)))
    samples: dict[str, list[float]] = {k: [] for k in impls}
    names = list(impls)
    for r in range(rounds):
        for k in names[r % 2:] + names[:r % 2]:
            fn, n = impls[k], calls[k]
            t = time.process_time()
            for _ in range(n):
                fn()
            samples[k].append((time.process_time() - t) / n)
    return {k: statistics.median(v) for k, v in samples.items()}


def main() -> None:
    native.prepare()
    rows = []
    for name, (fn, args) in workloads().items():
        on, out_on, polls = build(fn, args, True)
        off, out_off, _ = build(fn, args, False)
        np.testing.assert_array_equal(out_on, out_off)  # polling never changes a result
        stats = cpu_medians({"polling": on, "no polling": off})
        t_on, t_off = stats["polling"], stats["no polling"]
        rows.append({"workload": name + ("" if polls else " [does not poll]"),
                     "times": {"ember native (polling)": t_on, "ember native (no polling)": t_off,
                               "difference": t_on - t_off}})
        print(f"{name:40s} polling {t_on * 1e6:10.3f} us  no polling {t_off * 1e6:10.3f} us  "
              f"diff {(t_on - t_off) * 1e9:+9.1f} ns  polls={polls}")
    pair = interrupt.install_pair_ns()
    print(f"sigaction install + restore pair: {pair:.0f} ns (a handler installed around every call)")
    print(report("Ctrl-C polling: CPU time per call (median, interleaved rounds)", rows, "interrupt",
                 meta={"sigaction_pair_ns": pair}))


if __name__ == "__main__":
    main()
