"""The fuzzer's worker processes: each runs one case at a time, so a crash or a hang is one finding
(naming the stage it was in) and the worker is replaced.
"""

from __future__ import annotations

import multiprocessing
import time
import traceback
from collections.abc import Iterator
from multiprocessing.connection import wait as _wait_conns
from typing import Any

from ember._src.fuzz_cases import Case
from ember._src.fuzz_check import run_case

# -- worker processes ---------------------------------------------------------------------------

def _worker(conn: Any) -> None:
    import ember
    while True:
        try:
            case = conn.recv()
        except EOFError:
            return
        if case is None:
            return
        try:
            ember.config.update("jax_enable_x64", case.x64)  # kept across cases: a switch clears the caches
            res = run_case(case, lambda s: conn.send(("stage", s)))
        except Exception:  # noqa: BLE001
            res = ("error", "harness: " + traceback.format_exc().splitlines()[-1])
        conn.send(("done", res))


class Pool:
    """Worker processes that run cases; a worker that dies (a crash) or runs past ``timeout``
    is replaced, and its case becomes a ``crash`` / ``timeout`` finding naming the last stage."""

    def __init__(self, workers: int = 1, timeout: float = 120.0) -> None:
        self.ctx = multiprocessing.get_context("spawn")
        self.timeout = timeout
        self.slots: list[Any] = [self._start() for _ in range(workers)]

    def _start(self) -> list:
        a, b = self.ctx.Pipe()
        p = self.ctx.Process(target=_worker, args=(b,), daemon=True)
        p.start()
        b.close()
        return [p, a, None, "", 0.0]  # process, conn, case, stage, started

    def map(self, cases: Iterator[Case]) -> Iterator[tuple[Case, tuple[str, str] | None]]:
        """Yield ``(case, result)`` as cases finish (not in order)."""
        it = iter(cases)
        pending = True
        while True:
            for s in self.slots:
                if s[2] is None and pending:
                    try:
                        c = next(it)
                    except StopIteration:
                        pending = False
                        break
                    s[2], s[3], s[4] = c, "start", time.monotonic()
                    s[1].send(c)
            busy = [s for s in self.slots if s[2] is not None]
            if not busy:
                return
            ready = _wait_conns([s[1] for s in busy], timeout=1.0)
            for s in busy:
                if s[1] in ready:
                    try:
                        msg, val = s[1].recv()
                    except (EOFError, OSError):
                        yield s[2], self._dead(s, "crash")
                        continue
                    if msg == "stage":
                        s[3] = val
                    else:
                        c, s[2] = s[2], None
                        yield c, val
                elif time.monotonic() - s[4] > self.timeout:
                    yield s[2], self._dead(s, "timeout")

    def _dead(self, s: list, kind: str) -> tuple[str, str]:
        p = s[0]
        if kind == "timeout":
            p.kill()
        p.join(5)
        code = p.exitcode
        stage = s[3]
        try:
            s[1].close()
        except OSError:
            pass
        s[:] = self._start()
        if kind == "timeout":
            return "timeout", f"{stage} ran past {self.timeout:.0f} s"
        sig = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        return "crash", f"{stage}: the worker died ({sig})"

    def close(self) -> None:
        for s in self.slots:
            try:
                s[1].send(None)
            except OSError:
                pass
        for s in self.slots:
            s[0].join(5)
            if s[0].is_alive():
                s[0].kill()
