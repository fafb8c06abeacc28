"""Convolutions: ember's native ``conv`` step (``ember._src.native.emit.conv``: implicit GEMM on
register tiles, depthwise direct loop) against JAX jit, PyTorch (``torch.nn.functional.conv2d`` in
``inference_mode``) and ONNX Runtime (a one-``Conv`` ONNX model built with ``onnx.helper``, all
graph optimizations), float32.

    python benchmarks/bench_conv.py [--quick] [--threads N] [--clock wall|cpu] [--rows resnet,deep,small]
        [--match NAME]

Workloads: the ResNet-18 layer shapes at batch 1 and 8 (56x56x64->64 3x3, 28x28x128->128 3x3, the
strided 1x1 downsample 56x56x64->128, the 7x7 stride-2 stem 224x224x3->64), with ``--rows deep`` the
other ResNet-18 and ResNet-50 layer shapes at batch 1 (the deeper 3x3s, stride-2 3x3s and 1x1
downsamples, ResNet-50's 1x1 reduce/expand at each width), and the earlier small
rows (8x32x32x16->32: 3x3, 7x7, 3x3 stride 2, depthwise 3x3, the kernel gradient of a 3x3 conv, the
input gradient of the 3x3 stride 2, a 3x3 stride-2 max pool), and the input gradient of the strided
1x1 downsample at batch 1 and 8. ember and JAX run NHWC/HWIO; PyTorch and ONNX Runtime their native NCHW/OIHW
(ember's NCHW time is the column "ember native NCHW"). Every implementation's output is compared
with a NumPy reference (ember's reference backend) before timing; timing interleaves the
implementations in rounds (``common.interleaved``: medians, quartiles in the JSON).
``--threads N`` limits every library to N threads (else each library's default); ``--clock cpu``
reports process CPU time per call instead of wall time (for ``--threads 1`` on a loaded, shared
machine). Writes ``benchmarks/results/conv.{json,md}`` (``conv_threadsN`` with ``--threads N``,
``_cpu`` appended with ``--clock cpu``; a selection by ``--rows``, ``--match`` or ``--impls`` appends
its names, so it never overwrites the full table).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from threads import limit_threads, quiet_openblas  # noqa: E402

quiet_openblas()
if "--threads" in sys.argv:  # before NumPy, JAX and torch load
    limit_threads(int(sys.argv[sys.argv.index("--threads") + 1]))

import argparse  # noqa: E402

import numpy as np  # noqa: E402
from common import bench_threads, cpu_interleaved, have, interleaved, medians, report  # noqa: E402

import ember  # noqa: E402
from ember import lax  # noqa: E402

NHWC = ("NHWC", "HWIO", "NHWC")
NCHW = ("NCHW", "OIHW", "NCHW")


def conv_cfg(n: int, hw: int, c: int, o: int, k: int, s: int, groups: int = 1, grad: str = "") -> dict:
    """One workload; ``grad``: "" (the convolution), "kernel" or "input" (that cotangent of the sum)."""
    return dict(n=n, hw=hw, c=c, o=o, k=k, s=s, groups=groups, grad=grad)


def workloads(rows: list[str], quick: bool) -> list[tuple[str, dict]]:
    out = []
    if "resnet" in rows:
        for n in ((1,) if quick else (1, 8)):
            out += [(f"resnet 3x3 {n}x56x56x64->64", conv_cfg(n, 56, 64, 64, 3, 1)),
                    (f"resnet 3x3 {n}x28x28x128->128", conv_cfg(n, 28, 128, 128, 3, 1)),
                    (f"resnet 1x1/2 {n}x56x56x64->128", conv_cfg(n, 56, 64, 128, 1, 2)),
                    (f"resnet stem 7x7/2 {n}x224x224x3->64", conv_cfg(n, 224, 3, 64, 7, 2)),
                    (f"input grad 1x1/2 {n}x56x56x64->128", conv_cfg(n, 56, 64, 128, 1, 2, grad="input"))]
    if "deep" in rows:  # the rest of ResNet-18's and ResNet-50's layer shapes (batch 1)
        out += [(f"resnet 3x3 1x{hw}x{hw}x{c}->{c}", conv_cfg(1, hw, c, c, 3, 1))
                for hw, c in ((14, 256), (7, 512))]
        out += [(f"resnet 3x3/2 1x{hw}x{hw}x{c}->{2 * c}", conv_cfg(1, hw, c, 2 * c, 3, 2))
                for hw, c in ((56, 64), (28, 128), (14, 256))]
        out += [(f"resnet 1x1/2 1x{hw}x{hw}x{c}->{2 * c}", conv_cfg(1, hw, c, 2 * c, 1, 2))
                for hw, c in ((28, 128), (14, 256))]
        for hw, w in ((56, 64), (28, 128), (14, 256), (7, 512)):  # ResNet-50's bottleneck 1x1s
            out += [(f"resnet50 1x1 1x{hw}x{hw}x{4 * w}->{w}", conv_cfg(1, hw, 4 * w, w, 1, 1)),
                    (f"resnet50 1x1 1x{hw}x{hw}x{w}->{4 * w}", conv_cfg(1, hw, w, 4 * w, 1, 1))]
        out += [(f"resnet50 3x3/2 1x{hw}x{hw}x{c}->{c}", conv_cfg(1, hw, c, c, 3, 2))
                for hw, c in ((56, 128), (28, 256), (14, 512))]
        out += [(f"resnet50 1x1/2 1x{hw}x{hw}x{c}->{2 * c}", conv_cfg(1, hw, c, 2 * c, 1, 2))
                for hw, c in ((56, 256), (28, 512), (14, 1024))]
    if "small" in rows:
        n, hw, c, o = (2, 16, 8, 16) if quick else (8, 32, 16, 32)
        out += [(f"conv 3x3 {n}x{hw}x{hw}x{c}->{o}", conv_cfg(n, hw, c, o, 3, 1)),
                (f"conv 7x7 {n}x{hw}x{hw}x{c}->{o}", conv_cfg(n, hw, c, o, 7, 1)),
                (f"conv 3x3 stride 2 {n}x{hw}x{hw}x{c}->{o}", conv_cfg(n, hw, c, o, 3, 2)),
                (f"depthwise 3x3 {n}x{hw}x{hw}x{c}", conv_cfg(n, hw, c, c, 3, 1, groups=c)),
                (f"kernel grad 3x3 {n}x{hw}x{hw}x{c}->{o}", conv_cfg(n, hw, c, o, 3, 1, grad="kernel")),
                (f"input grad 3x3 stride 2 {n}x{hw}x{hw}x{c}->{o}",
                 conv_cfg(n, hw, c, o, 3, 2, grad="input")),
                (f"max pool 3x3/2 {n}x{hw}x{hw}x{c}", dict(n=n, hw=hw, c=c, pool=True))]
    return out


def pads(cfg: dict) -> list[tuple[int, int]]:
    """PyTorch's symmetric ``padding=k // 2`` (the ResNet layers'), written out for every library."""
    return [(cfg["k"] // 2, cfg["k"] // 2)] * 2


def lax_fn(lax_module: Any, grad: Callable, cfg: dict, dn: tuple = NHWC) -> Callable:
    """The workload over ``lax_module`` (ember's or JAX's lax); a ``grad`` workload is the gradient
    of the output's sum with respect to the kernel or the input."""
    if cfg.get("pool"):
        return lambda x: lax_module.reduce_window(x, -np.inf, lax_module.max, (1, 3, 3, 1), (1, 2, 2, 1),
                                                  "SAME")

    def conv(x: Any, w: Any) -> Any:
        return lax_module.conv_general_dilated(x, w, (cfg["s"],) * 2, pads(cfg), dimension_numbers=dn,
                                               feature_group_count=cfg["groups"])

    if cfg["grad"]:
        return grad(lambda x, w: conv(x, w).sum(), argnums=1 if cfg["grad"] == "kernel" else 0)
    return conv


def inputs(cfg: dict) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((cfg["n"], cfg["hw"], cfg["hw"], cfg["c"])).astype(np.float32)
    if cfg.get("pool"):
        return [x]
    w = rng.standard_normal((cfg["k"], cfg["k"], cfg["c"] // cfg["groups"], cfg["o"])).astype(np.float32)
    return [x, (w / np.sqrt(w[..., 0].size)).astype(np.float32)]


def to_nchw(x: np.ndarray, kernel: bool = False) -> np.ndarray:
    return np.ascontiguousarray(x.transpose((3, 2, 0, 1) if kernel else (0, 3, 1, 2)))


def torch_runner(cfg: dict, xs: list[np.ndarray]) -> Callable[[], Any] | None:
    import torch

    if bench_threads():
        torch.set_num_threads(bench_threads())
    if cfg.get("pool"):
        return None
    x, w = torch.from_numpy(to_nchw(xs[0])), torch.from_numpy(to_nchw(xs[1], kernel=True))
    conv2d = torch.nn.functional.conv2d
    kw = dict(stride=cfg["s"], padding=cfg["k"] // 2, groups=cfg["groups"])
    if cfg["grad"]:
        ones = torch.ones_like(conv2d(x, w, **kw))
        if cfg["grad"] == "input":
            return lambda: torch.nn.grad.conv2d_input(x.shape, w, ones, **kw)
        return lambda: torch.nn.grad.conv2d_weight(x, w.shape, ones, **kw)

    def run() -> Any:
        with torch.inference_mode():
            return conv2d(x, w, **kw)

    return run


def onnx_runner(cfg: dict, xs: list[np.ndarray]) -> Callable[[], Any] | None:
    """One ``Conv`` node over an NCHW input, the kernel an initializer (as an exported model holds
    it), every graph optimization on, ``intra_op_num_threads`` = the thread limit when one is set."""
    if cfg.get("pool") or cfg["grad"]:
        return None
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    x, w = to_nchw(xs[0]), to_nchw(xs[1], kernel=True)
    p = cfg["k"] // 2
    node = helper.make_node("Conv", ["x", "w"], ["y"], strides=[cfg["s"]] * 2, pads=[p, p, p, p],
                            group=cfg["groups"], kernel_shape=[cfg["k"]] * 2)
    xinfo = helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)
    graph = helper.make_graph([node], "conv", [xinfo],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=[numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = min(model.ir_version, 9)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if bench_threads():
        opts.intra_op_num_threads = bench_threads()
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return lambda: sess.run(None, {"x": x})[0]


def jax_runner(jax: Any, cfg: dict, xs: list[np.ndarray]) -> Callable[[], Any]:
    jf = jax.jit(lax_fn(jax.lax, jax.grad, cfg))
    args = [jax.device_put(v) for v in xs]
    return lambda: jf(*args).block_until_ready()


def runners(cfg: dict, xs: list[np.ndarray], jax: Any, opts: dict) -> tuple[dict, dict]:
    """(name -> zero-argument call, name -> whether its output is NCHW)."""
    import ember.numpy as enp

    out: dict[str, Callable[[], Any]] = {}
    nchw: dict[str, bool] = {}
    f = ember.jit(lax_fn(lax, ember.grad, cfg), backend="native", **opts)
    ex = [enp.asarray(v) for v in xs]
    out["ember native"] = lambda: f(*ex)
    if not cfg.get("pool") and not cfg["grad"]:
        fn = ember.jit(lax_fn(lax, ember.grad, cfg, NCHW), backend="native", **opts)
        en = [enp.asarray(to_nchw(xs[0])), enp.asarray(to_nchw(xs[1], kernel=True))]
        out["ember native NCHW"] = lambda: fn(*en)
        nchw["ember native NCHW"] = True
    if jax is not None:
        out["jax jit"] = jax_runner(jax, cfg, xs)
    for name, make, module in (("torch", torch_runner, "torch"), ("onnxruntime", onnx_runner, "onnxruntime")):
        if have(module) and (module != "onnxruntime" or have("onnx")):
            run = make(cfg, xs)
            if run is not None:
                out[name] = run
                nchw[name] = True
    return out, nchw


def check(name: str, got: Any, want: np.ndarray, nchw: bool, grad: str) -> None:
    """``got`` (in its own layout) against the NHWC/HWIO reference."""
    got = np.asarray(got.detach().numpy() if hasattr(got, "detach") else got)
    if nchw:
        got = got.transpose((2, 3, 1, 0) if grad == "kernel" else (0, 2, 3, 1))
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-4 * scale, err_msg=name)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--threads", type=int, default=None, help="limit every library to N threads")
    ap.add_argument("--rows", default="resnet,small", help="comma-separated: resnet, deep, small")
    ap.add_argument("--match", default="", help="only the workloads whose name contains this")
    ap.add_argument("--impls", default="", help="comma-separated: only these implementations (e.g. "
                    "'ember native,onnxruntime')")
    ap.add_argument("--max-seconds", type=float, default=8.0, help="timing budget per workload")
    ap.add_argument("--lead-in", type=float, default=0.005,
                    help="seconds of untimed calls before each wall-clock sample (other libraries' idle "
                    "threads stop spinning meanwhile)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall: elapsed time (common.interleaved); cpu: process CPU time per call (use with "
                         "--threads 1 on a loaded machine)")
    args = ap.parse_args()
    from ember._src.native import prepare

    prepare()
    jax = None
    if have("jax"):
        import jax
        jax.config.update("jax_platforms", "cpu")
    opts = {"num_threads": args.threads} if args.threads else {}
    rows = []
    for name, cfg in workloads(args.rows.split(","), args.quick):
        if args.match not in name:
            continue
        xs = inputs(cfg)
        want = np.asarray(ember.jit(lax_fn(lax, ember.grad, cfg), backend="numpy")(*xs))
        impls, nchw = runners(cfg, xs, jax, opts)
        if args.impls:
            impls = {k: v for k, v in impls.items() if k in args.impls.split(",")}
        for k, run in impls.items():
            check(f"{name}: {k}", run(), want, nchw.get(k, False), cfg.get("grad", ""))
        stats = (cpu_interleaved(impls, rounds=9, sample_time=0.02) if args.clock == "cpu"
                 else interleaved(impls, max_seconds=args.max_seconds, lead_in=args.lead_in))
        rows.append({"workload": name, "times": medians(stats), "stats": stats})
        print(name, {k: f"{v * 1e3:.3f} ms" for k, v in medians(stats).items()}, flush=True)
    threads = f"{args.threads} thread(s)" if args.threads else "each library's default threads"
    clock = "process CPU time per call" if args.clock == "cpu" else "wall time per call"
    name = f"conv_threads{args.threads}" if args.threads else "conv"
    name += "_cpu" if args.clock == "cpu" else ""
    if args.rows != "resnet,small" or args.match or args.impls:  # a selection: not the full table's file
        name += "_" + "_".join(filter(None, [args.rows.replace(",", "-"), args.match, args.impls]))
        name = "".join(c if c.isalnum() or c in "_-" else "-" for c in name)
    print(report(f"Convolutions and pooling (float32; {threads}; {clock})", rows, name))


if __name__ == "__main__":
    main()
