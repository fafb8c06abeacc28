"""Encoder models built on ``nn.MultiheadAttention`` (random weights), imported with ember.torch:
ember InferenceSession vs PyTorch eager (``inference_mode``) and ONNX Runtime (``torch.onnx.export``,
all graph optimizations), interleaved rounds, each call timed by wall clock and process CPU time.

* ``encoder d<D> seq<L> b<B>``: an ``nn.TransformerEncoder`` of 4 ``nn.TransformerEncoderLayer``
  (``batch_first=True``, 8 heads, feed-forward 4 x d, ReLU), imported with dynamic batch and sequence
  axes (one compile serves every row of a model);
* ``ViT-B/16 b<B>``: the torchvision architecture written with plain torch modules (its wheel does not
  load against CPU torch here): a 16 x 16 stride-16 patch convolution, a class token, learned position
  embeddings, 12 pre-norm ``nn.TransformerEncoderLayer`` (d 768, 12 heads, MLP 3072, GELU), a final
  layer norm and the class head; 224 px images, imported with a dynamic batch axis.

    python benchmarks/bench_encoders.py [--rows encoder,vit] [--batches 1,8] [--rounds 7]
                                        [--threads N] [--no-ort]

``--threads N`` limits every runtime to N threads (as ``bench_models.py``). The same runner is
called by ``bench_models.py --encoders``. Writes ``benchmarks/results/encoders.{json,md}``
(``encoders_threads<N>.{json,md}`` with ``--threads N``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import threads  # noqa: E402

threads.quiet_openblas()
if "--threads" in sys.argv and __name__ == "__main__":  # before NumPy and torch load
    threads.limit_threads(int(sys.argv[sys.argv.index("--threads") + 1]))

import numpy as np  # noqa: E402
from common import have, ort_cpu_session, report  # noqa: E402

import ember  # noqa: E402


def encoder_stack(d: int, layers: int = 4, heads: int = 8, seed: int = 0):
    """An ``nn.TransformerEncoder`` of ``layers`` post-norm ReLU layers (``batch_first``)."""
    import torch
    torch.manual_seed(seed)
    layer = torch.nn.TransformerEncoderLayer(d, heads, dim_feedforward=4 * d, dropout=0.0, batch_first=True)
    return torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).eval()


def vit(image: int = 224, patch: int = 16, d: int = 768, layers: int = 12, heads: int = 12, mlp: int = 3072,
        classes: int = 1000, seed: int = 0):
    """ViT-B/16's architecture (torchvision's ``vit_b_16`` with the defaults) as plain torch modules."""
    import torch
    from torch import nn

    class ViT(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv_proj = nn.Conv2d(3, d, kernel_size=patch, stride=patch)
            self.class_token = nn.Parameter(torch.randn(1, 1, d) * 0.02)
            n = (image // patch) ** 2 + 1
            self.pos_embedding = nn.Parameter(torch.randn(1, n, d) * 0.02)
            layer = nn.TransformerEncoderLayer(d, heads, dim_feedforward=mlp, dropout=0.0, activation="gelu",
                                               batch_first=True, norm_first=True, layer_norm_eps=1e-6)
            self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.ln = nn.LayerNorm(d, eps=1e-6)
            self.head = nn.Linear(d, classes)

        def forward(self, x):
            x = self.conv_proj(x).flatten(2).transpose(1, 2)
            x = torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embedding
            return self.head(self.ln(self.encoder(x))[:, 0])

    torch.manual_seed(seed)
    return ViT().eval()


def workloads(rows: list[str], batches: list[int]) -> list[tuple[str, object, object, dict]]:
    """``(name, model, example input, dynamic axes)`` per row."""
    import torch
    out = []
    if "encoder" in rows:
        for d, L in ((256, 128), (768, 197)):
            model = encoder_stack(d)
            for b in batches:
                x = torch.randn(b, L, d, generator=torch.Generator().manual_seed(b))
                out.append((f"encoder 4 layers d{d} seq{L} b{b}", model, x, {"src": ("batch", "seq", None)}))
    if "vit" in rows:
        model = vit()
        for b in batches:
            x = torch.randn(b, 3, 224, 224, generator=torch.Generator().manual_seed(b))
            out.append((f"ViT-B/16 224px b{b}", model, x, {"x": ("batch", None, None, None)}))
    return out


def ort_session(model, x, name: str, axes: dict):
    """ONNX Runtime session of a TorchScript ``torch.onnx`` export with the same dynamic axes."""
    import torch
    path = os.path.join(tempfile.mkdtemp(), "model.onnx")
    dyn = {name: {i: a for i, a in enumerate(axes[name]) if a is not None}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), path, input_names=[name], output_names=["out"], dynamic_axes=dyn,
                          dynamo=False)
    return ort_cpu_session(path)


def interleaved(impls: dict, rounds: int, settle: float) -> dict:
    """Per implementation: median and range of wall and process CPU seconds per call, one timed call
    of each per round in turn, each after a pause of ``settle`` s and one untimed call."""
    samples: dict[str, list[tuple[float, float]]] = {k: [] for k in impls}
    for fn in impls.values():
        fn()
    for _ in range(rounds):
        for k, fn in impls.items():
            time.sleep(settle)
            fn()
            w, c = time.perf_counter(), time.process_time()
            fn()
            samples[k].append((time.perf_counter() - w, time.process_time() - c))
    out = {}
    for k, v in samples.items():
        wall, cpu = [a for a, _ in v], [b for _, b in v]
        out[k] = {"wall": statistics.median(wall), "wall_min": min(wall), "wall_max": max(wall),
                  "cpu": statistics.median(cpu), "cpu_min": min(cpu), "cpu_max": max(cpu)}
    return out


def run(rows: list[str], batches: list[int], rounds: int, settle: float, ort: bool) -> list[dict]:
    """Import, check against torch and time every workload; one result dict per row."""
    import torch

    import ember.torch as et
    results = []
    imported: dict[int, tuple] = {}  # one import (and compile) per model serves its batch sizes
    for name, model, x, axes in workloads(rows, batches):
        key = id(model)
        inp = next(iter(axes))
        if key not in imported:
            t0 = time.perf_counter()
            sess = ember.InferenceSession(et.import_module(model, (x,), dynamic_axes=axes))
            sess.run({inp: x.numpy()})
            ort_s = None
            if ort and have("onnxruntime"):
                try:
                    ort_s = ort_session(model, x, inp, axes)
                except Exception as e:  # noqa: BLE001 - report and go on without the peer
                    print(f"ONNX Runtime peer skipped: {type(e).__name__}: {str(e)[:200]}")
            imported[key] = (sess, ort_s, time.perf_counter() - t0)
        sess, ort_s, import_s = imported[key]
        xn = x.numpy()

        def eager(m=model, x=x):
            with torch.inference_mode():
                return m(x)
        impls = {"ember native": lambda s=sess, f={inp: xn}: s.run(f), "torch eager": eager}
        if ort_s is not None:
            impls["onnxruntime"] = lambda o=ort_s, f={inp: xn}: o.run(None, f)
        ref = eager().numpy()
        err = float(np.abs(next(iter(sess.run({inp: xn}).values())) - ref).max())
        load = os.getloadavg()[0]
        stats = interleaved(impls, rounds, settle)
        results.append({"workload": name, "times": {k: v["wall"] for k, v in stats.items()}, "stats": stats,
                        "max_abs_err": err, "load_avg_1min": load, "ember_import_s": import_s,
                        "compiles": sess.cache_info()["compiles"]})
        ms = {k: f"wall {v['wall'] * 1e3:.2f} ms cpu {v['cpu'] * 1e3:.2f} ms" for k, v in stats.items()}
        print(name, ms, f"err {err:.1e}", flush=True)
    return results


def table(rows: list[dict]) -> str:
    """Markdown: median (min-max) wall and CPU ms per runtime, and ember's ratio to each peer."""
    peers = [k for k in ("torch eager", "onnxruntime") if any(k in r["stats"] for r in rows)]
    head = "| workload | ember wall ms | ember CPU ms | " + " | ".join(
        f"{p} wall ms | {p} CPU ms | ember/{p} (CPU)" for p in peers) + " | max abs err | load |\n"
    text = head + "|" + "---|" * (head.count("|") - 1) + "\n"

    def cell(s: dict, k: str) -> str:
        return f"{s[k] * 1e3:.2f} ({s[k + '_min'] * 1e3:.2f}-{s[k + '_max'] * 1e3:.2f})"
    for r in rows:
        e = r["stats"]["ember native"]
        parts = [r["workload"], cell(e, "wall"), cell(e, "cpu")]
        for p in peers:
            s = r["stats"].get(p)
            parts += [cell(s, "wall"), cell(s, "cpu"), f"{e['cpu'] / s['cpu']:.2f}"] if s else ["-", "-", "-"]
        parts += [f"{r['max_abs_err']:.1e}", f"{r['load_avg_1min']:.1f}"]
        text += "| " + " | ".join(parts) + " |\n"
    return text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", default="encoder,vit")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--settle", type=float, default=0.2)
    p.add_argument("--threads", type=int, default=None, help="limit every runtime to N threads")
    p.add_argument("--no-ort", action="store_true")
    a = p.parse_args(argv)
    import torch

    from ember._src.native import prepare
    if threads.bench_threads():
        torch.set_num_threads(threads.bench_threads())
    prepare()
    rows = run(a.rows.split(","), [int(b) for b in a.batches.split(",")], a.rounds, a.settle, not a.no_ort)
    name = f"encoders_threads{threads.bench_threads()}" if threads.bench_threads() else "encoders"
    text = report("Encoders with nn.MultiheadAttention (random weights)", rows, name,
                  {"rounds": a.rounds, "threads": threads.bench_threads(),
                   "torch_threads": torch.get_num_threads(), "cpus": os.cpu_count(), "settle_s": a.settle})
    text += "\n" + table(rows)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
