"""``python -m ember.fuzz``: the differential fuzzer.

Random programs over ember's primitives (elementwise, reductions, movement, dot, indexing, scans
and sorts), wrapped in random transformation stacks (``jit``, ``grad``, ``value_and_grad``,
``vmap``, ``jvp``, ``jacfwd``, ``jacrev``, ``hessian``, ``checkpoint``, ``scan``/``while``/``cond``
bodies, named dynamic axes), run on three paths -- eager, ``jit(backend="numpy")`` and the native
``jit`` -- in one of five dtype modes, and compared at per-op ulp tolerances; float64 gradients are
also compared with central finite differences. Each case runs in a worker process, so a crash is
one finding; a failing case is shrunk to a small runnable repro. See ``docs/fuzzing.md``.

A case is data (:class:`~ember._src.fuzz_cases.Case`): the program is Python source (one line per
op), so what the worker executes is exactly what a repro prints. The parts: :mod:`.fuzz_cases` draws
cases (the op table, values, transformation layers), :mod:`.fuzz_check` runs one case on every path
and compares (with the table of known defects), :mod:`.fuzz_workers` runs cases in worker processes,
:mod:`.fuzz_shrink` minimizes a failing case; this module is the driver and the command line.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable, Iterator

from ember._src.fuzz_cases import Case, Generator
from ember._src.fuzz_check import Finding, classify
from ember._src.fuzz_shrink import minimize, same_failure
from ember._src.fuzz_workers import Pool

# -- the driver ---------------------------------------------------------------------------------

@dataclasses.dataclass
class Stats:
    """What one seed's run did: cases run, cases every path rejected, seconds, findings."""

    seed: int
    cases: int = 0
    invalid: int = 0
    seconds: float = 0.0
    findings: list[Finding] = dataclasses.field(default_factory=list)


def fuzz(seed: int, *, cases: int | None = None, minutes: float | None = None, workers: int = 1,
         start: int = 0, shrink: bool = True, timeout: float = 120.0,
         log: Callable[[str], None] | None = None) -> Stats:
    """Run cases ``start, start+1, ...`` of ``seed`` until ``cases`` ran or ``minutes`` passed;
    findings are classified against :data:`KNOWN` and (``shrink``) minimized."""
    gen = Generator()
    stats = Stats(seed)
    t0 = time.monotonic()
    pool = Pool(workers, timeout)
    shrinker: list[Pool] = []  # a pool of its own: the main one's workers may be busy with later cases

    def source() -> Iterator[Case]:
        i = start
        while (cases is None or i < start + cases) and \
                (minutes is None or time.monotonic() - t0 < minutes * 60):
            yield gen.case(seed, i)
            i += 1

    try:
        for case, res in pool.map(source()):
            stats.cases += 1
            if res is None:
                continue
            if res[0] == "invalid":
                stats.invalid += 1
                continue
            f = classify(Finding(res[0], res[1], case))
            if shrink and f.known is None:
                if not shrinker:
                    shrinker.append(Pool(1, timeout))
                check = same_failure(shrinker[0], f)
                small = minimize(case, check)
                f = classify(Finding(f.kind, check.detail if small is not case else f.detail, small))
            stats.findings.append(f)
            if log:
                log(("KNOWN " + f.known + ": " if f.known else "") + f.title() + "\n"
                    + ("" if f.known else f.case.repro(f.title())))
    finally:
        for p in [pool] + shrinker:
            p.close()
        stats.seconds = time.monotonic() - t0
    return stats


def main(argv: list[str] | None = None) -> int:
    """The command line; exit status 1 when a seed had a finding that is not known."""
    parser = argparse.ArgumentParser(prog="python -m ember.fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=1.0, help="wall-clock budget per seed")
    parser.add_argument("--seed", type=int, nargs="+", default=[0], help="one or more seeds")
    parser.add_argument("--cases", type=int, default=None, help="stop after this many cases per seed")
    parser.add_argument("--start", type=int, default=0, help="first case index (replay: --start I --cases 1)")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds one case may run")
    parser.add_argument("--no-shrink", action="store_true", help="report findings without minimizing them")
    parser.add_argument("--print", dest="show", action="store_true",
                        help="print the cases' repro scripts instead of running them")
    a = parser.parse_args(argv)
    if a.show:
        gen = Generator()
        for s in a.seed:
            for i in range(a.start, a.start + (a.cases or 1)):
                print(gen.case(s, i).repro(f"seed {s} case {i}"))
        return 0
    failed = 0
    for s in a.seed:
        st = fuzz(s, cases=a.cases, minutes=None if a.cases else a.minutes, workers=a.workers, start=a.start,
                  shrink=not a.no_shrink, timeout=a.timeout, log=lambda m: print(m, flush=True))
        new = [f for f in st.findings if f.known is None]
        failed += len(new)
        print(f"seed {s}: {st.cases} cases ({st.invalid} rejected by every path) in {st.seconds:.0f} s, "
              f"{len(st.findings)} findings ({len(new)} new, {len(st.findings) - len(new)} known)",
              flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
