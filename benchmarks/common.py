"""Shared benchmark helpers: timing (median of repeated runs), optional peers, result tables."""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def have(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def timeit(fn: Callable[[], Any], *, min_time: float = 0.3, min_runs: int = 5, max_runs: int = 2000,
           warmup: int = 2) -> float:
    """Median seconds per call of ``fn`` (after ``warmup`` calls)."""
    for _ in range(warmup):
        fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_runs or (time.perf_counter() - start < min_time and len(times) < max_runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def fmt(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds:.3f} s"


def report(title: str, rows: list[dict[str, Any]], name: str) -> str:
    """Markdown table (workload x implementation medians, ember/best-peer ratio); writes JSON+md."""
    impls: list[str] = []
    for r in rows:
        for k in r["times"]:
            if k not in impls:
                impls.append(k)
    lines = [f"## {title}", "", f"machine: {machine()}", "",
             "| workload | " + " | ".join(impls) + " | ember / best peer |",
             "|---" * (len(impls) + 2) + "|"]
    for r in rows:
        t = r["times"]
        peers = [v for k, v in t.items() if not k.startswith("ember") and v is not None]
        ratio = t.get("ember native", None)
        ratio_s = f"{ratio / min(peers):.2f}x" if ratio and peers else "-"
        lines.append(f"| {r['workload']} | " + " | ".join(fmt(t.get(k)) for k in impls) + f" | {ratio_s} |")
    text = "\n".join(lines) + "\n"
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps({"machine": machine(), "rows": rows}, indent=1))
    (RESULTS / f"{name}.md").write_text(text)
    return text
