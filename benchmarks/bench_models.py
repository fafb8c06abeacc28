"""GPT-2 (random weights) imported with ember.torch: ember InferenceSession vs PyTorch eager
(``inference_mode``), ``torch.compile`` and ONNX Runtime (``torch.onnx.export``, all graph
optimizations) at batch 1 and several sequence lengths; latency medians over interleaved rounds,
and ember's planned activation memory (arena peak for the binding).

    python benchmarks/bench_models.py [--layers 2,12] [--seqs 16,128,512,1024] [--rounds 7]
                                      [--no-compile] [--no-ort] [--vocab 50257]

Writes ``benchmarks/results/models.{json,md}``. On a loaded machine run a subset
(``--layers 2 --seqs 16,128``) and read the numbers as noisy.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import have, report  # noqa: E402

import ember  # noqa: E402


def build(layers: int, vocab: int):
    import torch
    import transformers
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=layers, n_embd=768, n_head=12, vocab_size=vocab, n_positions=1024)
    return transformers.GPT2LMHeadModel(cfg).eval()


def ember_session(model):
    import torch

    import ember.torch as et
    ids = torch.zeros(1, 8, dtype=torch.long)
    m = et.import_module(model, (), {"input_ids": ids, "use_cache": False},
                         dynamic_axes={"input_ids": (None, "seq")})
    return ember.InferenceSession(m)


def ort_session(model, path: str):
    import onnxruntime as ort
    import torch

    class Logits(torch.nn.Module):
        def __init__(self, lm):
            super().__init__()
            self.lm = lm

        def forward(self, input_ids):
            return self.lm(input_ids=input_ids, use_cache=False).logits

    ids = torch.zeros(1, 8, dtype=torch.long)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # export a copy: the TorchScript exporter leaves the module it traced in a changed state
        torch.onnx.export(Logits(copy.deepcopy(model)), (ids,), path, input_names=["input_ids"],
                          output_names=["logits"], dynamic_axes={"input_ids": {1: "seq"}}, dynamo=False)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


def implementations(sess, model, peers: dict, ort_s, ids: np.ndarray) -> dict:
    import torch
    tids = torch.from_numpy(ids)

    def eager(m=model):
        with torch.inference_mode():
            return m(input_ids=tids, use_cache=False).logits
    impls = {"ember native": lambda: sess.run({"input_ids": ids}), "torch eager": eager}
    if "torch.compile" in peers:
        impls["torch.compile"] = lambda: eager(peers["torch.compile"])
    if ort_s is not None:
        impls["onnxruntime"] = lambda: ort_s.run(None, {"input_ids": ids})
    return impls


def interleaved(impls: dict, rounds: int) -> dict:
    samples: dict[str, list[float]] = {k: [] for k in impls}
    for fn in impls.values():
        fn()
    for _ in range(rounds):
        for k, fn in impls.items():
            t = time.perf_counter()
            fn()
            samples[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in samples.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--layers", default="2,12")
    p.add_argument("--seqs", default="16,128,512,1024")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--no-ort", action="store_true")
    a = p.parse_args(argv)
    import torch
    rows = []
    for layers in [int(x) for x in a.layers.split(",")]:
        model = build(layers, a.vocab)
        t0 = time.perf_counter()
        sess = ember_session(model)
        import_s = time.perf_counter() - t0
        peers: dict = {}
        if not a.no_compile:
            peers["torch.compile"] = torch.compile(model)
        ort_s = None
        if not a.no_ort and have("onnxruntime"):
            try:
                ort_s = ort_session(model, os.path.join(tempfile.mkdtemp(), "gpt2.onnx"))
            except Exception as e:  # noqa: BLE001 - report and go on without the peer
                print(f"ONNX Runtime peer skipped: {type(e).__name__}: {str(e)[:200]}")
        for n in [int(x) for x in a.seqs.split(",")]:
            ids = np.random.default_rng(n).integers(0, a.vocab, (1, n))
            times = interleaved(implementations(sess, model, peers, ort_s, ids), a.rounds)
            mem = sess.memory(seq=n)
            with torch.inference_mode():
                ref = model(input_ids=torch.from_numpy(ids), use_cache=False).logits.numpy()
            err = float(np.abs(sess.run({"input_ids": ids})["logits"] - ref).max())
            rows.append({"workload": f"GPT-2 {layers} layers, seq {n}", "times": times,
                         "ember_activation_bytes": mem["ACTIVATIONS"], "max_abs_err": err,
                         "ember_import_s": import_s, "compiles": sess.cache_info()["compiles"]})
            print(rows[-1], flush=True)
    text = report("GPT-2 inference (batch 1, random weights)", rows, "models",
                  {"rounds": a.rounds, "vocab": a.vocab})
    text += "\n| workload | ember activation memory (arena peak) | max abs err vs torch |\n|---|---|---|\n"
    text += "".join(f"| {r['workload']} | {r['ember_activation_bytes'] / 2**20:.1f} MiB | "
                    f"{r['max_abs_err']:.1e} |\n" for r in rows)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
