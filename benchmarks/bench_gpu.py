"""GPU backends vs PyTorch (eager and ``torch.compile``), JAX and CuPy on the GPU, issue #34's rows:

- ``latency``: a small jitted call (``x + 1`` on 4 float32), device arrays, waited for (goal < 10 us);
- ``copy``: device-to-device copy of 2^24 float32 (torch ``clone``, CuPy ``copy``, ``jnp.copy``,
  ember ``jit(numpy.copy)``): the bandwidth reference of the chain, no goal of its own;
- ``chain``: elementwise chain on 2^24 float32 (goal: >= 80% of the best measured copy bandwidth,
  bytes read and written per element alike);
- ``softmax``: row softmax 4096x4096 (reported, no goal set);
- ``matmul_f32`` / ``matmul_bf16``: 8192^3 ``a @ b`` (float32 at full precision: torch TF32 off,
  JAX ``precision="highest"``; bfloat16 at each library's default) (goal <= 1.1x torch);
- ``mlp``: one SGD training step of a 3-layer ReLU MLP 4096 wide, batch 256, mean squared error,
  ``value_and_grad`` inside one jitted step (goal <= 1.0x JAX);
- ``gpt2``: GPT-2 (12 layers, 768 wide, ``transformers``' config, random weights) inference on
  1024 tokens, last position's logits, ember's importer + ``InferenceSession(device=...)``
  (goal <= 1.0x ``torch.compile``).

    python benchmarks/bench_gpu.py [--backends cuda,webgpu] [--rows chain,mlp] [--out DIR]
                                   [--quick] [--no-compile] [--budget SECONDS]

Writes ``gpu.{json,md}`` to ``DIR`` (default ``benchmarks/results``) after every row, so a run cut
short keeps what it measured. ember's inputs are device arrays (``ember.device_put``) and each
timed call waits for its result (``block_until_ready``), as the peers' inputs live on the GPU and
their calls are synchronized. Each implementation's result is checked against NumPy (or torch for
GPT-2) before it is timed; the JSON keeps the raw medians, the largest error, the device names,
which cuBLAS ran, and why any implementation was skipped (an ember program its backend cannot run,
e.g. bfloat16 on WebGPU, is a skipped cell, never a failed run). Peers without a CUDA device are
left out, and so is an ember backend that cannot run here (their reasons are in the JSON); WebGPU
runs the ``latency``, ``copy`` and ``chain`` rows unless ``--webgpu-rows`` (or ``--quick``) says
otherwise (on an NVIDIA GPU it goes through the Vulkan driver: the elementwise row). Past
``--budget`` seconds the remaining work is skipped (``torch.compile`` of GPT-2 needs
``--compile-seconds`` of it left). ``--quick`` uses small sizes (a smoke run, e.g. WebGPU on
Mesa's lavapipe); ``--cpu-peers`` runs torch and JAX on the CPU, columns marked ``(cpu)``, to
check the peers' code paths where there is no GPU. Written without a GPU at hand: not yet run on one.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from bench_gpu_models import gpt2_row, mlp_row, torch_columns
from common import fmt, load_text, machine, timeit

import ember
import ember.numpy as enp

# JAX takes 75% of the GPU's memory when it starts unless told not to: torch, CuPy and ember's pool
# share the device in this run.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

ROWS = ("latency", "copy", "chain", "softmax", "matmul_f32", "matmul_bf16", "mlp", "gpt2")
PEERS = ("torch eager", "torch.compile", "jax", "cupy")


def _chain(x):  # noqa: ANN001, ANN202 - shared by every implementation
    return (x * 1.5 + 0.5) * (x - 0.25) + x * x


@dataclass
class Ctx:
    """What the rows share: sizes, ember backends, the peers found and the time budget."""

    quick: bool
    backends: list[str]
    compile: bool
    deadline: float
    compile_seconds: float
    webgpu_rows: set[str] = field(default_factory=set)
    key: str = ""  # the row being built
    torch: Any = None
    tdev: str = "cuda"  # torch's device ("cpu" with --cpu-peers)
    jax: Any = None  # the JAX GPU device
    cupy: Any = None
    left_out: dict[str, str] = field(default_factory=dict)
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def sync(self) -> None:
        """Wait for torch's queued work (on the GPU)."""
        if self.tdev == "cuda":
            self.torch.cuda.synchronize()

    def ember_backends(self) -> list[str]:
        """ember's backends on the row being built (WebGPU only on ``--webgpu-rows``)."""
        return [b for b in self.backends if b != "webgpu" or self.key in self.webgpu_rows]


@dataclass
class Row:
    """A workload: ``impls`` maps a column to a builder returning the timed zero-argument call (it
    checks the result first); ``big`` rows get fewer repetitions."""

    key: str
    title: str
    impls: dict[str, Callable[[], Callable[[], Any]]]
    big: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


CHECKED: list[float] = []  # the largest errors of the column being built


def _check(got: Any, want: np.ndarray, rtol: float, atol: float, what: str) -> float:
    """Assert ``got`` is within tolerance of the reference ``want``; record and return the largest
    absolute error."""
    got = np.asarray(got, dtype=np.float32)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=what)
    err = float(np.max(np.abs(got - want))) if want.size else 0.0
    CHECKED.append(err)
    return err


def _torch_sync(c: Ctx) -> Callable[[Any], Any]:
    def run(out: Any) -> Any:
        c.sync()
        return out
    return run


def _ember(c: Ctx, fn: Callable, args: tuple, want: Callable[[Any], tuple[Any, np.ndarray]],
           tol: tuple[float, float], dtype: Any = None) -> dict[str, Callable]:
    """One column per ember backend: ``fn`` jitted, inputs put on the device, ``want(out)`` gives
    (the part of the result to check, its reference)."""
    def build(b: str) -> Callable[[], Callable[[], Any]]:
        def make() -> Callable[[], Any]:
            xs = tuple(enp.asarray(a).astype(dtype) if dtype is not None else a for a in args)
            d = ember.device_put(xs, f"{b}:0")
            f = ember.jit(fn, backend=b)
            got, ref = want(f(*d))
            _check(got, ref, *tol, f"ember {b}")
            return lambda: ember.block_until_ready(f(*d))
        return make
    return {f"ember {b}": build(b) for b in c.ember_backends()}


def _peers(c: Ctx, fns: dict[str, Callable], args: tuple, want: Callable[[Any], tuple[Any, np.ndarray]],
           tol: tuple[float, float], torch_dtype: str = "float32") -> dict[str, Callable]:
    """Columns for the peers found: ``fns`` maps "torch"/"jax"/"cupy" to the function in that
    library's terms."""
    out: dict[str, Callable] = {}
    if c.torch is not None and "torch" in fns:
        torch = c.torch

        def torch_make(compiled: bool) -> Callable[[], Callable[[], Any]]:
            def make() -> Callable[[], Any]:
                t = [torch.from_numpy(a).to(c.tdev).to(getattr(torch, torch_dtype)) for a in args]
                g = torch.compile(fns["torch"]) if compiled else fns["torch"]
                sync = _torch_sync(c)
                got, ref = want(sync(g(*t)))
                _check(got.float().cpu().numpy() if hasattr(got, "cpu") else got, ref, *tol, "torch")
                return lambda: sync(g(*t))
            return make
        out.update(torch_columns(c, torch_make))
    if c.jax is not None and "jax" in fns:
        import jax
        import jax.numpy as jnp

        def jax_make() -> Callable[[], Any]:
            f = jax.jit(fns["jax"])
            t = [jax.device_put(jnp.asarray(a, dtype=torch_dtype), c.jax) for a in args]
            got, ref = want(f(*t))
            _check(np.asarray(jnp.asarray(got, jnp.float32)), ref, *tol, "jax")
            return lambda: f(*t).block_until_ready()
        out["jax"] = jax_make
    if c.cupy is not None and "cupy" in fns:
        cp = c.cupy

        def cupy_make() -> Callable[[], Any]:
            t = [cp.asarray(a) for a in args]
            sync = cp.cuda.Device().synchronize
            got, ref = want(fns["cupy"](*t))
            _check(cp.asnumpy(got), ref, *tol, "cupy")
            return lambda: (fns["cupy"](*t), sync())
        out["cupy"] = cupy_make
    return out


def _whole(ref: np.ndarray) -> Callable[[Any], tuple[Any, np.ndarray]]:
    return lambda out: (out, ref)


def rows(c: Ctx, keys: list[str]) -> list[Row]:  # noqa: C901 - one small block per row
    f32, out = np.float32, []
    n = 1 << (16 if c.quick else 24)
    for key in keys:
        c.key = key
        if key == "latency":
            x = np.arange(4, dtype=f32)
            fns = {"torch": lambda t: t + 1, "jax": lambda t: t + 1}
            impls = {**_ember(c, lambda t: t + 1, (x,), _whole(x + 1), (0, 0)),
                     **_peers(c, fns, (x,), _whole(x + 1), (0, 0))}
            out.append(Row(key, "small jitted call latency (x + 1 on 4 float32)", impls))
        elif key == "copy":
            x = c.rng.standard_normal(n).astype(f32)
            fns = {"torch": lambda t: t.clone(), "jax": lambda t: t.copy(), "cupy": lambda t: t.copy()}
            impls = {**_ember(c, enp.copy, (x,), _whole(x), (0, 0)),
                     **_peers(c, fns, (x,), _whole(x), (0, 0))}
            out.append(Row(key, f"device-to-device copy 2^{n.bit_length() - 1} float32", impls,
                           extra={"bytes": 2 * x.nbytes}))
        elif key == "chain":
            x = c.rng.standard_normal(n).astype(f32)
            fns = {"torch": _chain, "jax": _chain, "cupy": _chain}
            ref = _chain(x)
            impls = {**_ember(c, _chain, (x,), _whole(ref), (1e-5, 1e-5)),
                     **_peers(c, fns, (x,), _whole(ref), (1e-5, 1e-5))}
            out.append(Row(key, f"elementwise chain 2^{n.bit_length() - 1} float32", impls,
                           extra={"bytes": 2 * x.nbytes}))
        elif key == "softmax":
            s = 256 if c.quick else 4096
            x = c.rng.standard_normal((s, s)).astype(f32)
            e = np.exp(x - x.max(-1, keepdims=True))
            ref = e / e.sum(-1, keepdims=True)
            import importlib
            fns = {"torch": lambda t: c.torch.softmax(t, -1),
                   "jax": lambda t: importlib.import_module("jax").nn.softmax(t, -1)}
            impls = {**_ember(c, lambda t: ember.nn.softmax(t, axis=-1), (x,), _whole(ref), (1e-5, 1e-6)),
                     **_peers(c, fns, (x,), _whole(ref), (1e-5, 1e-6))}
            out.append(Row(key, f"row softmax {s}x{s} float32", impls))
        elif key in ("matmul_f32", "matmul_bf16"):
            out.append(_matmul_row(c, key))
        elif key == "mlp":
            out.append(mlp_row(c, Row, _check))
        elif key == "gpt2":
            out.append(gpt2_row(c, Row, _check))
    return out


def _matmul_row(c: Ctx, key: str) -> Row:
    m = 256 if c.quick else 8192
    bf16 = key.endswith("bf16")
    a, b = (c.rng.standard_normal((m, m)).astype(np.float32) for _ in range(2))
    if bf16:  # the reference multiplies the bfloat16-rounded inputs
        a, b = (np.asarray(enp.asarray(v).astype(enp.bfloat16).astype(enp.float32)) for v in (a, b))
    k = min(m, 64)  # rows checked: a full 8192^3 product on the host would take long
    ref = a[:k].astype(np.float64) @ b.astype(np.float64)
    tol = (2e-2, 2e-1 * np.sqrt(m)) if bf16 else (1e-4, 1e-4 * np.sqrt(m))
    part = lambda r: (r[:k], ref)  # noqa: E731
    import importlib
    fns = {"torch": lambda x, y: x @ y,
           "jax": lambda x, y: importlib.import_module("jax.numpy").matmul(
               x, y, precision=None if bf16 else "highest")}
    dt = "bfloat16" if bf16 else "float32"
    impls = {**_ember(c, lambda x, y: x @ y, (a, b), part, tol, enp.bfloat16 if bf16 else None),
             **_peers(c, fns, (a, b), part, tol, torch_dtype=dt)}
    return Row(key, f"matmul {m}^3 {dt}", impls, big=True)


# --------------------------------------------------------------------------------------------------
# goals and the report
# --------------------------------------------------------------------------------------------------

def goal(row: dict, copy_bw: float | None) -> tuple[str, dict[str, str]]:
    """The row's goal and, per ember column, the measured value against it."""
    t = {k: v for k, v in row["times"].items() if v is not None}
    peers = {k: v for k, v in t.items() if not k.startswith("ember")}
    best = min(peers, key=peers.__getitem__) if peers else None
    key, res = row["key"], {}
    for col in (k for k in t if k.startswith("ember")):
        e = t[col]
        ratio = f"{e / peers[best]:.2f}x {best}" if best else "no peer"
        if key == "latency":
            res[col] = f"{'yes' if e < 10e-6 else '**no**'} ({fmt(e)}; {ratio})"
        elif key == "chain":
            if copy_bw:
                frac = row["bytes"] / e / copy_bw
                res[col] = f"{'yes' if frac >= 0.8 else '**no**'} ({frac:.0%} of copy bandwidth; {ratio})"
            else:
                res[col] = f"n/a (no copy measured; {ratio})"
        elif key.startswith("matmul") or key in ("mlp", "gpt2"):
            want, lim = {"mlp": ("jax", 1.0), "gpt2": ("torch.compile", 1.0)}.get(key, ("torch", 1.1))
            ref = {k: v for k, v in peers.items() if k.startswith(want)}
            if ref:
                p = min(ref, key=ref.__getitem__)
                r = e / ref[p]
                res[col] = f"{'yes' if r <= lim else '**no**'} ({r:.2f}x {p})"
            else:
                res[col] = f"n/a (no {want} measured; {ratio})"
        else:
            res[col] = ratio
    text = {"latency": "< 10 us", "chain": ">= 80% of copy bandwidth", "matmul_f32": "<= 1.1x torch",
            "matmul_bf16": "<= 1.1x torch", "mlp": "<= 1.0x JAX", "gpt2": "<= 1.0x torch.compile"}
    return text.get(key, "none (reference)" if key == "copy" else "none set"), res


def write(out: Path, done: list[dict], meta: dict) -> str:
    copy = next((r for r in done if r["key"] == "copy"), None)
    copy_t = [v for v in (copy or {"times": {}})["times"].values() if v]
    copy_bw = copy["bytes"] / min(copy_t) if copy and copy_t else None
    impls = list(dict.fromkeys(k for r in done for k in r["times"]))
    md = ["## GPU backends (median seconds per call)", "", f"host: {machine()}; load {load_text()}; "
          f"GPU: {meta['gpu']}", "", "| workload | " + " | ".join(impls) + " | goal | ember vs goal |",
          "|---" * (len(impls) + 3) + "|"]
    for r in done:
        g, res = goal(r, copy_bw)
        r["goal"], r["goal_result"] = g, res
        cells = [fmt(r["times"].get(k)) if r["times"].get(k) else ("skipped" if k in r["skipped"] else "-")
                 for k in impls]
        md.append(f"| {r['title']} | " + " | ".join(cells) + f" | {g} | "
                  + ("; ".join(f"{k}: {v}" for k, v in res.items()) or "-") + " |")
    if copy_bw:
        md += ["", f"copy bandwidth (best of the copy row, bytes read + written): {copy_bw / 1e9:.1f} GB/s"]
    skipped = [f"- {r['title']} / {k}: {v}" for r in done for k, v in r["skipped"].items()]
    md += ["", "skipped:", *skipped] if skipped else []
    md += ["", *(f"{k} left out: {v}" for k, v in meta["backends_left_out"].items())]
    md += ["", f"CUDA GEMM: {meta['cublas']}"]
    meta = {**meta, "copy_bandwidth_bytes_per_s": copy_bw, "rows": done}
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu.json").write_text(json.dumps(meta, indent=1, default=str))
    (out / "gpu.md").write_text("\n".join(md) + "\n")
    return "\n".join(md)


# --------------------------------------------------------------------------------------------------
# peers and the driver
# --------------------------------------------------------------------------------------------------

def find_peers(c: Ctx, want: set[str], cpu: bool = False) -> None:
    """Fill ``c`` with the peers that have a CUDA device (any device with ``cpu``: a check of the
    peers' code paths, not a comparison); record why the others are left out."""
    try:
        import torch

        if cpu:
            c.torch, c.tdev = torch, "cpu"
        elif torch.cuda.is_available():
            c.torch = torch
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
        else:
            c.left_out["torch"] = "no CUDA device in torch"
    except ImportError as e:
        c.left_out["torch"] = f"not installed ({e})"
    try:
        import jax

        gpus = [d for d in jax.devices() if d.platform == "gpu" or cpu]
        if gpus:
            c.jax = gpus[0]
        else:
            c.left_out["jax"] = f"no GPU device in JAX (only {jax.devices()[0].platform})"
    except ImportError as e:
        c.left_out["jax"] = f"not installed ({e})"
    except RuntimeError as e:
        c.left_out["jax"] = f"no GPU backend ({e})"
    if ("copy" in want or "chain" in want) and not cpu:
        try:
            import cupy

            cupy.cuda.runtime.getDeviceCount()
            c.cupy = cupy
        except Exception as e:  # noqa: BLE001 - any CuPy failure (missing, no driver) leaves it out
            c.left_out["cupy"] = f"{type(e).__name__}: {e}"


def _cublas() -> str:
    from ember._src.gpu import cuda_blas

    if cuda_blas.load() is not None:
        return f"cuBLAS loaded from {cuda_blas._STATE['path']}"
    return f"ember's tiled kernel ({cuda_blas.unavailable_reason()})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="cuda,webgpu", help="ember backends, comma-separated")
    ap.add_argument("--rows", default=",".join(ROWS), help=f"rows to run, from {','.join(ROWS)}")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    ap.add_argument("--reps", type=int, default=50, help="most timed calls per implementation")
    ap.add_argument("--big-reps", type=int, default=5, help="most timed calls on the matmul/MLP/GPT-2 rows")
    ap.add_argument("--webgpu-rows", default=None, help="rows WebGPU runs (default: all with --quick, "
                    "else latency,copy,chain: the elementwise row and its references)")
    ap.add_argument("--cpu-peers", action="store_true", help="run torch and JAX on the CPU (columns "
                    "marked '(cpu)'): checks the peers' code paths where there is no GPU")
    ap.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    ap.add_argument("--budget", type=float, default=135.0, help="seconds; later work is skipped")
    ap.add_argument("--compile-seconds", type=float, default=60.0,
                    help="budget left needed to try torch.compile on GPT-2")
    a = ap.parse_args(argv)
    keys = [k.strip() for k in a.rows.split(",") if k.strip()]
    bad = [k for k in keys if k not in ROWS]
    if bad:
        ap.error(f"--rows: unknown row(s) {', '.join(bad)} (choose from {', '.join(ROWS)})")
    ember.config.update("jax_enable_x64", False)  # device programs are 32-bit (WebGPU has no 64-bit types)
    from ember._src.jit import BACKENDS

    backends, skipped_backends = [], {}
    for b in (b.strip() for b in a.backends.split(",") if b.strip()):
        why = BACKENDS[b].unavailable_reason() if b in BACKENDS else f"unknown backend {b!r}"
        if why:
            skipped_backends[f"ember {b}"] = why
            print(f"ember {b} left out: {why}", file=sys.stderr)
        else:
            backends.append(b)
    wg = a.webgpu_rows if a.webgpu_rows is not None else (",".join(ROWS) if a.quick else "latency,copy,chain")
    c = Ctx(a.quick, backends, not a.no_compile, time.perf_counter() + a.budget, a.compile_seconds,
            webgpu_rows={k.strip() for k in wg.split(",")})
    find_peers(c, set(keys), a.cpu_peers)
    for k, v in c.left_out.items():
        print(f"peer left out: {k}: {v}", file=sys.stderr)
    gpu = c.torch.cuda.get_device_name(0) if c.torch is not None and c.tdev == "cuda" else "-"
    meta = {"devices": [str(d) for d in ember.devices("all")], "gpu": gpu, "cublas": _cublas(),
            "quick": a.quick, "peers_left_out": c.left_out,
            "backends_left_out": skipped_backends, "machine": machine()}
    done: list[dict] = []
    for row in rows(c, keys):
        rec: dict[str, Any] = {"key": row.key, "title": row.title, "times": {}, "skipped": {},
                               "max_error": {}, **row.extra}
        for name, make in row.impls.items():
            name = name if name.startswith("ember") or not a.cpu_peers else f"{name} (cpu)"
            if c.left() <= 0:
                rec["times"][name], rec["skipped"][name] = None, f"past the --budget of {a.budget:g} s"
                continue
            try:
                CHECKED.clear()
                fn = make()
                rec["max_error"][name] = max(CHECKED) if CHECKED else None
                reps = a.big_reps if row.big else a.reps
                rec["times"][name] = timeit(fn, min_time=0.05 if row.big else 0.2, min_runs=min(3, reps),
                                            max_runs=reps if row.key != "latency" else 2000, warmup=1)
            except Exception as e:  # noqa: BLE001 - one implementation failing skips its cell only
                rec["times"][name], rec["skipped"][name] = None, f"{type(e).__name__}: {str(e)[:300]}"
        print(row.title, {k: fmt(v) for k, v in rec["times"].items()}, flush=True)
        done.append(rec)
        text = write(Path(a.out), done, meta)
    print(text if done else "no rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
