"""Shared benchmark helpers: timing (median of repeated runs, interleaved rounds), peer runners
(NumPy, JAX ``jit``, PyTorch eager, ONNX Runtime through a ``torch.onnx`` export), result tables
(JSON + markdown) and a PNG chart of ember's ratio to each peer.

Peers are optional: a missing one is skipped with a printed reason (``pip install -e .[bench]``
installs them all)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from threads import bench_threads, limit_threads  # noqa: F401  (re-exported)

RESULTS = Path(__file__).resolve().parent / "results"

# ember's generated code and PyTorch each bring an OpenMP runtime; with the default (spinning) wait
# policy, idle threads of one spin on the 2 cores while the other runs, and a tiny torch call then
# takes tens of ms instead of ~0.2 ms. Passive waiting (set before either runtime loads; an explicit
# OMP_WAIT_POLICY in the environment wins) keeps side-by-side timings in one process honest.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def parse_with_threads(ap: argparse.ArgumentParser) -> tuple[argparse.Namespace, dict[str, Any]]:
    """Parse the command line of ``ap`` plus ``--threads`` (threads of ember's native backend); load
    ember's per-machine native runtime libraries now (timings see the steady state). Returns the
    arguments and the ``jit`` options (none without ``--threads``)."""
    from ember._src.native import prepare

    ap.add_argument("--threads", type=int, default=None, help="threads of ember's native backend")
    args = ap.parse_args()
    prepare()
    return args, ({"num_threads": args.threads} if args.threads else {})


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


def report(title: str, rows: list[dict[str, Any]], name: str, meta: dict[str, Any] | None = None) -> str:
    """Markdown table (workload x implementation medians, ember/best-peer ratio); writes JSON+md
    (``meta`` goes into the JSON)."""
    impls: list[str] = []
    for r in rows:
        for k in r["times"]:
            if k not in impls:
                impls.append(k)
    threads = f"; every implementation limited to {bench_threads()} thread(s)" if bench_threads() else ""
    lines = [f"## {title}", "", f"machine: {machine()}; load average {load_text()}{threads}", "",
             "| workload | " + " | ".join(impls) + " | ember / best peer |",
             "|---" * (len(impls) + 2) + "|"]
    for r in rows:
        t = r["times"]
        peers = {k: v for k, v in t.items() if is_peer(k) and v is not None}
        ratio = t.get("ember native", None)
        best = min(peers, key=peers.__getitem__) if peers else None
        ratio_s = f"{ratio / peers[best]:.2f}x ({best})" if ratio and best else "-"
        lines.append(f"| {r['workload']} | " + " | ".join(fmt(t.get(k)) for k in impls) + f" | {ratio_s} |")
    text = "\n".join(lines) + "\n"
    RESULTS.mkdir(exist_ok=True)
    info = {"machine": machine(), "load_average": load_average(), "threads": bench_threads(), **(meta or {}),
            "rows": rows}
    (RESULTS / f"{name}.json").write_text(json.dumps(info, indent=1))
    (RESULTS / f"{name}.md").write_text(text)
    return text


# --------------------------------------------------------------------------------------------------
# peers
# --------------------------------------------------------------------------------------------------

NOT_PEERS = ("memory copy",)
EMBER_CONST = "ember native (constant weights)"


def ember_arrays(xs: list[np.ndarray]) -> list[Any]:
    """The inputs as ember Arrays, made once before timing (as the JAX runner places its inputs on
    the device beforehand): the arguments ember's own users pass to a jitted function."""
    import ember.numpy as enp

    return [enp.asarray(x) for x in xs]


def constant_weights_runner(fn: Callable[..., Any], w: Workload, want: np.ndarray,
                            **opts: Any) -> dict[str, Callable[[], Any]]:
    """``{EMBER_CONST: call}``: ember native with the workload's weights captured by the jitted
    function (program constants, packed once when it is built), the way ONNX Runtime's session holds
    them as initializers; checked against ``want`` first. Empty for a workload without weights."""
    if not w.params:
        return {}
    import ember

    baked = ember.jit(lambda *xs: fn(*xs, *w.params), backend="native", **opts)
    data = ember_arrays(list(w.data))
    np.testing.assert_allclose(np.asarray(baked(*data)), want, rtol=w.rtol, atol=w.atol)
    return {EMBER_CONST: lambda: baked(*data)}


def is_peer(name: str) -> bool:
    """True for a peer implementation column (not an ember variant, not a reference limit)."""
    return not name.startswith("ember") and name not in NOT_PEERS


def load_average() -> list[float]:
    """1, 5 and 15 minute load averages (empty where the OS does not report them)."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return []


def load_text() -> str:
    la = load_average()
    return "/".join(f"{v:.2f}" for v in la) if la else "n/a"


_MISSING: dict[str, str] = {}


def peer_available(peer: str) -> bool:
    """Whether ``peer`` ("numpy", "jax jit", "torch eager", "onnxruntime") can run; prints the reason
    once when it cannot."""
    needs = {"numpy": ["numpy"], "jax jit": ["jax"], "torch eager": ["torch"],
             "onnxruntime": ["torch", "onnx", "onnxruntime"]}[peer]
    missing = [m for m in needs if not have(m)]
    if missing and peer not in _MISSING:
        _MISSING[peer] = f"module(s) {', '.join(missing)} not installed (pip install -e .[bench])"
        print(f"[bench] skipping peer {peer!r}: {_MISSING[peer]}", flush=True)
    return not missing


def skip_peer(peer: str, reason: str) -> None:
    """Record and print why ``peer`` is left out of a workload."""
    print(f"[bench] skipping peer {peer!r}: {reason}", flush=True)
    _MISSING.setdefault(peer, reason)


def skipped_peers() -> dict[str, str]:
    """Peers left out so far, with the reason."""
    return dict(_MISSING)


@dataclass
class Workload:
    """One workload, written once per implementation over the same inputs.

    ``data`` are the per-call inputs, ``params`` the weights: every implementation gets
    ``fn(*data, *params)``, except ONNX Runtime, whose exported graph holds the params as
    initializers (constants) and takes only ``data``. ``jax`` and ``torch`` are written against
    ``jax.numpy`` arrays and torch tensors; ``None`` leaves that peer out.
    """

    name: str
    data: list[np.ndarray]
    params: list[np.ndarray] = field(default_factory=list)
    numpy: Callable[..., Any] | None = None
    jax: Callable[..., Any] | None = None
    torch: Callable[..., Any] | None = None
    onnx: bool = True
    rtol: float = 2e-3
    atol: float = 2e-3


def peer_runners(w: Workload, peers: tuple[str, ...] = ("numpy", "jax jit", "torch eager", "onnxruntime"),
                 reference: np.ndarray | None = None) -> dict[str, Callable[[], Any]]:
    """Zero-argument callables running ``w`` on each available peer (inputs already placed: JAX
    arrays on the device, torch tensors wrapping the NumPy buffers). When ``reference`` is given,
    each peer's output is checked against it first and a peer that disagrees is dropped with a
    printed reason."""
    out: dict[str, Callable[[], Any]] = {}
    for peer in peers:
        if not peer_available(peer):
            continue
        try:
            fn = _RUNNERS[peer](w)
        except Exception as e:  # a peer that cannot build this workload is skipped, not fatal
            skip_peer(peer, f"{w.name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            continue
        if fn is None:
            continue
        if reference is not None:
            got = np.asarray(_to_numpy(fn()))
            if got.shape != reference.shape or not np.allclose(got, reference, rtol=w.rtol, atol=w.atol):
                err = np.max(np.abs(got - reference)) if got.shape == reference.shape else got.shape
                skip_peer(peer, f"{w.name}: result disagrees with the reference ({err})")
                continue
        out[peer] = fn
    return out


def _to_numpy(x: Any) -> Any:
    if hasattr(x, "detach"):
        return x.detach().numpy()
    if isinstance(x, (list, tuple)):
        return x[0]
    return x


def _numpy_runner(w: Workload) -> Callable[[], Any] | None:
    if w.numpy is None:
        return None
    f, args = w.numpy, [*w.data, *w.params]
    return lambda: f(*args)


def _jax_runner(w: Workload) -> Callable[[], Any] | None:
    if w.jax is None:
        return None
    import jax

    jf = jax.jit(w.jax)
    args = [jax.device_put(a) for a in [*w.data, *w.params]]
    return lambda: jf(*args).block_until_ready()


def _torch_runner(w: Workload) -> Callable[[], Any] | None:
    if w.torch is None:
        return None
    import torch

    if bench_threads():
        torch.set_num_threads(bench_threads())
    f = w.torch
    args = [torch.from_numpy(a) for a in [*w.data, *w.params]]

    def run() -> Any:
        with torch.inference_mode():
            return f(*args)

    return run


ONNX_EXPORTER = ("torch.onnx.export(dynamo=False): the TorchScript-based exporter "
                 "(the default dynamo exporter needs onnxscript)")


def ort_cpu_session(path: str, spinning: bool = True) -> Any:
    """An ONNX Runtime CPU session of the model at ``path`` with every graph optimization, its
    intra-op pool limited to :func:`bench_threads` (one inter-op thread) when that is set;
    ``spinning=False`` keeps its pool threads from busy-waiting between runs."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if not spinning:
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if bench_threads():
        opts.intra_op_num_threads = bench_threads()
        opts.inter_op_num_threads = 1
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


def _onnx_runner(w: Workload) -> Callable[[], Any] | None:
    if w.torch is None or not w.onnx:
        return None
    import tempfile
    import warnings

    import torch

    f = w.torch
    consts = [torch.from_numpy(p.copy()) for p in w.params]

    class Module(torch.nn.Module):
        def forward(self, *xs: Any) -> Any:
            return f(*xs, *consts)

    names = [f"x{i}" for i in range(len(w.data))]
    path = os.path.join(tempfile.mkdtemp(prefix="ember_bench_"), f"{w.name.replace(' ', '_')}.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Module(), tuple(torch.from_numpy(d) for d in w.data), path, input_names=names,
                          output_names=["y"], dynamo=False)
    # no busy-waiting pool threads between runs (like OMP_WAIT_POLICY=PASSIVE above): on 2 shared
    # cores they would steal time from whichever implementation is timed next
    sess = ort_cpu_session(path, spinning=False)
    feeds = dict(zip(names, w.data))
    return lambda: sess.run(None, feeds)[0]


_RUNNERS: dict[str, Callable[[Workload], Callable[[], Any] | None]] = {
    "numpy": _numpy_runner, "jax jit": _jax_runner, "torch eager": _torch_runner, "onnxruntime": _onnx_runner}


# --------------------------------------------------------------------------------------------------
# interleaved timing
# --------------------------------------------------------------------------------------------------


def interleaved(impls: dict[str, Callable[[], Any]], *, rounds: int = 25, sample_time: float = 2e-3,
                max_seconds: float = 20.0, min_rounds: int = 7,
                lead_in: float = 0.005) -> dict[str, dict[str, float]]:
    """Time each zero-argument callable in interleaved rounds, so that load from other processes on
    a shared machine hits every implementation alike.

    Each round runs every implementation once in turn (order rotated per round) for a sample of
    ``n`` back-to-back calls, ``n`` chosen so a sample takes about ``sample_time`` seconds, after
    ``lead_in`` seconds of untimed calls of the same implementation: the idle threads of the one
    timed before it (OpenBLAS, XLA's and ONNX Runtime's pools, ember's) spin on for a while after
    its last call and took a core from this one's threads (ember's two-thread 7x7 stem measured
    1.15-2.06 ms without the lead-in and 0.82-0.88 ms with 5 ms of it; ONNX Runtime's 1.45-1.58
    and 1.15-1.26 ms; in a process of its own a library meets no such threads). Returns,
    per implementation, the median seconds per call over the rounds, the quartiles, the number of
    rounds and the calls per sample. Rounds are reduced (not below ``min_rounds``) to stay near
    ``max_seconds`` in total.
    """
    names = list(impls)
    per_call: dict[str, float] = {}
    for k in names:  # warm up, then estimate one call
        fn = impls[k]
        fn()
        fn()
        t = time.perf_counter()
        fn()
        per_call[k] = max(time.perf_counter() - t, 1e-7)
    calls = {k: max(1, int(sample_time / per_call[k])) for k in names}
    round_s = sum(calls[k] * per_call[k] for k in names)
    rounds = max(min_rounds, min(rounds, int(max_seconds / max(round_s, 1e-9))))
    samples: dict[str, list[float]] = {k: [] for k in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for k in order:
            fn, n = impls[k], calls[k]
            t = time.perf_counter()
            while lead_in and time.perf_counter() - t < lead_in:
                fn()
            t = time.perf_counter()
            for _ in range(n):
                fn()
            samples[k].append((time.perf_counter() - t) / n)
    out = {}
    for k in names:
        q = statistics.quantiles(samples[k], n=4) if len(samples[k]) > 1 else [samples[k][0]] * 3
        out[k] = {"median": statistics.median(samples[k]), "q1": q[0], "q3": q[2], "rounds": rounds,
                  "calls_per_sample": calls[k]}
    return out



def cpu_interleaved(impls: dict[str, Callable[[], Any]], rounds: int = 15,
                    sample_time: float = 0.05) -> dict[str, dict[str, float]]:
    """Like :func:`interleaved`, but each sample is the CPU time of this process per call
    (``time.process_time``, every thread of it) rather than the wall clock: on a shared machine
    with more runnable jobs than cores the wall clock counts the time the scheduler gives to
    others. Meaningful at one thread per implementation. Rounds rotate the order; each
    implementation's calls per sample are sized from one warm call to fill ``sample_time``."""
    names = list(impls)
    for fn in impls.values():
        fn()
    calls = {}
    for k in names:
        t = time.process_time()
        impls[k]()
        calls[k] = max(1, int(sample_time / max(time.process_time() - t, 1e-6)))
    samples: dict[str, list[float]] = {k: [] for k in names}
    for r in range(rounds):
        for k in names[r % len(names):] + names[:r % len(names)]:
            t = time.process_time()
            for _ in range(calls[k]):
                impls[k]()
            samples[k].append((time.process_time() - t) / calls[k])
    out = {}
    for k, v in samples.items():
        q = statistics.quantiles(v, n=4) if len(v) > 1 else [v[0], v[0], v[0]]
        out[k] = {"median": statistics.median(v), "q1": q[0], "q3": q[2], "min": min(v), "max": max(v),
                  "rounds": rounds, "calls_per_sample": calls[k]}
    return out


def medians(stats: dict[str, dict[str, float]]) -> dict[str, float]:
    """The median per implementation from an :func:`interleaved` result."""
    return {k: v["median"] for k, v in stats.items()}


# --------------------------------------------------------------------------------------------------
# chart
# --------------------------------------------------------------------------------------------------


def write_chart(rows: list[dict[str, Any]], path: Path, title: str, ember_key: str = "ember native") -> bool:
    """PNG bar chart: per workload, ember's time divided by each peer's time (log scale; below 1
    means ember is faster). Returns False (with a message) when matplotlib is missing."""
    if not have("matplotlib"):
        print("[bench] matplotlib not installed: no chart written (pip install -e .[bench])", flush=True)
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if r["times"].get(ember_key) and any(
        is_peer(k) and v for k, v in r["times"].items())]
    peers: list[str] = []
    for r in rows:
        for k, v in r["times"].items():
            if (is_peer(k) or k in NOT_PEERS) and v and k not in peers:
                peers.append(k)
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(rows) * max(1, len(peers)) / 2 + 2))
    height = 0.8 / max(1, len(peers))
    for j, p in enumerate(peers):
        ys, xs = [], []
        for i, r in enumerate(rows):
            v = r["times"].get(p)
            if v:
                ys.append(i + (j - (len(peers) - 1) / 2) * height)
                xs.append(r["times"][ember_key] / v)
        ax.barh(ys, xs, height=height, label=f"ember / {p}", left=0)
    ax.axvline(1.0, color="black", lw=1)
    ax.set_xscale("log")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([r["workload"] for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ember time / peer time (log scale; < 1: ember faster)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
