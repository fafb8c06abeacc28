"""Imported architectures beyond GPT-2: ResNet-18/50 (written as plain torch modules, the
torchvision layout: torchvision's wheel on the registry does not load against CPU torch), BERT-base
(``transformers``, random weights, sequence 128), an LSTM classifier and a 4-layer Longformer (base
widths, window 256, sequence 1024; ``--models longformer``); each imported with
``ember.torch.import_module`` into an ``InferenceSession`` and timed against PyTorch eager
(``inference_mode``) and ONNX Runtime (``torch.onnx.export``, all graph optimizations), checked
against torch first. Calls interleave (``bench_models.interleaved``: one timed call of each runtime
per round, each after a pause and an untimed call of its own); medians over the rounds.

    python benchmarks/bench_archs.py [--models resnet18,resnet50,bert,lstm] [--batches 1,8]
                                     [--rounds 7] [--threads N] [--clock wall|cpu] [--avx2]

``--threads N`` limits every runtime to N threads and pins the process (``threads.limit_threads``);
``--clock cpu`` times by process CPU time (one thread on a shared machine). ``--avx2`` times
ember's AVX2 path on any x86-64 host: ember compiles with ``avx2_cc.sh`` (gcc targeting an AVX2/FMA
CPU) and torch runs its AVX2 kernels (``ATEN_CPU_CAPABILITY``, ``ONEDNN_MAX_CPU_ISA``); ONNX
Runtime has no such switch and keeps the host's widest kernels, so on an AVX-512 host its ratios
are a bound, not a like-for-like comparison. Writes
``benchmarks/results/archs[_threadsN][_cpu][_avx2].{json,md}``.
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import threads  # noqa: E402

threads.quiet_openblas()


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="resnet18,resnet50,bert,lstm")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    p.add_argument("--settle", type=float, default=0.2)
    p.add_argument("--avx2", action="store_true")
    return p.parse_args(argv)


def models(torch):  # noqa: ANN001 - torch passed in (imported after the thread limits)
    """name -> (module factory, example inputs for a batch)."""
    nn = torch.nn

    def conv_bn(cin: int, cout: int, k: int, s: int) -> nn.Module:
        return nn.Sequential(nn.Conv2d(cin, cout, k, s, k // 2, bias=False), nn.BatchNorm2d(cout))

    class Basic(nn.Module):
        grow = 1

        def __init__(self, cin: int, width: int, s: int):
            super().__init__()
            self.a, self.b = conv_bn(cin, width, 3, s), conv_bn(width, width, 3, 1)
            self.down = conv_bn(cin, width, 1, s) if s != 1 or cin != width else None

        def forward(self, x):
            y = self.b(torch.relu(self.a(x)))
            return torch.relu(y + (x if self.down is None else self.down(x)))

    class Bottleneck(nn.Module):
        grow = 4

        def __init__(self, cin: int, width: int, s: int):
            super().__init__()
            self.a, self.b = conv_bn(cin, width, 1, 1), conv_bn(width, width, 3, s)
            self.c = conv_bn(width, 4 * width, 1, 1)
            self.down = conv_bn(cin, 4 * width, 1, s) if s != 1 or cin != 4 * width else None

        def forward(self, x):
            y = self.c(torch.relu(self.b(torch.relu(self.a(x)))))
            return torch.relu(y + (x if self.down is None else self.down(x)))

    class ResNet(nn.Module):
        def __init__(self, block, counts):
            super().__init__()
            self.stem, self.pool = conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)
            layers, cin = [], 64
            for i, (width, n) in enumerate(zip((64, 128, 256, 512), counts)):
                for j in range(n):
                    layers.append(block(cin, width, 2 if i and not j else 1))
                    cin = width * block.grow
            self.layers, self.fc = nn.Sequential(*layers), nn.Linear(cin, 1000)

        def forward(self, x):
            return self.fc(self.layers(self.pool(torch.relu(self.stem(x)))).mean((2, 3)))

    class Bert(nn.Module):
        def __init__(self):
            super().__init__()
            from transformers import BertConfig, BertModel
            self.m = BertModel(BertConfig())

        def forward(self, input_ids):
            mask = torch.ones_like(input_ids)
            return self.m(input_ids=input_ids, attention_mask=mask, use_cache=False).last_hidden_state

    class LSTMClassifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.lstm = nn.Embedding(1000, 128), nn.LSTM(128, 256, batch_first=True)
            self.fc = nn.Linear(256, 10)

        def forward(self, ids):
            return self.fc(self.lstm(self.emb(ids))[0][:, -1])

    class Longformer(nn.Module):
        def __init__(self):
            super().__init__()
            from transformers import LongformerConfig, LongformerModel
            self.m = LongformerModel(LongformerConfig(num_hidden_layers=4, attention_window=256,
                                                      max_position_embeddings=1030))

        def forward(self, input_ids):
            return self.m(input_ids=input_ids, attention_mask=torch.ones_like(input_ids)).last_hidden_state

    return {
        "longformer": (Longformer, lambda b: {"input_ids": torch.randint(2, 30000, (b, 1024))}),
        "resnet18": (lambda: ResNet(Basic, (2, 2, 2, 2)), lambda b: {"x": torch.randn(b, 3, 224, 224)}),
        "resnet50": (lambda: ResNet(Bottleneck, (3, 4, 6, 3)), lambda b: {"x": torch.randn(b, 3, 224, 224)}),
        "bert": (Bert, lambda b: {"input_ids": torch.randint(0, 30000, (b, 128))}),
        "lstm": (LSTMClassifier, lambda b: {"ids": torch.randint(0, 1000, (b, 64))}),
    }


def ort_session(model, inputs: dict, path: str):  # noqa: ANN001
    """ONNX Runtime's session of ``model`` exported with the example ``inputs`` (TorchScript
    exporter) to ``path``; :func:`common.ort_cpu_session` sets its options."""
    import common
    import torch

    model = copy.deepcopy(model)
    cfg = getattr(getattr(model, "m", None), "config", None)
    if hasattr(cfg, "onnx_export"):  # Longformer: its as_strided chunks export to wrong ONNX values
        cfg.onnx_export = True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (), path, kwargs=inputs, input_names=list(inputs), dynamo=False)
    return common.ort_cpu_session(path)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.threads:
        threads.limit_threads(args.threads)
    if args.avx2:  # (before ember and torch are imported)
        import os
        os.environ.update(EMBER_CC=str(Path(__file__).resolve().parent / "avx2_cc.sh"),
                          ATEN_CPU_CAPABILITY="avx2", ONEDNN_MAX_CPU_ISA="AVX2")
    import common
    import numpy as np
    import torch
    from bench_models import interleaved

    import ember
    import ember.torch

    if args.threads:
        torch.set_num_threads(args.threads)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    table = models(torch)
    rows = []
    for name in args.models.split(","):
        make, example = table[name]
        torch.manual_seed(0)
        model = make().eval()
        for b in (int(v) for v in args.batches.split(",")):
            inputs = example(b)
            feeds = {k: v.numpy() for k, v in inputs.items()}
            t0 = time.perf_counter()
            sess = ember.InferenceSession(ember.torch.import_module(model, kwargs=inputs))
            got = np.asarray(next(iter(sess.run(feeds).values())))
            first = time.perf_counter() - t0
            with torch.inference_mode():
                want = model(**inputs).numpy()
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
            impls = {"ember native": lambda s=sess, f=feeds: s.run(f)}

            def eager(m=model, i=inputs):
                with torch.inference_mode():
                    return m(**i)
            impls["torch eager"] = eager
            if common.peer_available("onnxruntime"):
                with tempfile.TemporaryDirectory() as d:
                    o = ort_session(model, inputs, str(Path(d) / "m.onnx"))
                np.testing.assert_allclose(o.run(None, feeds)[0], want, rtol=1e-3, atol=1e-3)
                impls["onnxruntime"] = lambda o=o, f=feeds: o.run(None, f)
            times = interleaved(impls, args.rounds, clock=clock, settle=args.settle)
            rows.append({"workload": f"{name} batch {b}", "times": times,
                         "ember_import_and_first_call_s": round(first, 1)})
            print(rows[-1], flush=True)
    suffix = (f"_threads{args.threads}" if args.threads else "") + ("_cpu" if args.clock == "cpu" else "") \
        + ("_avx2" if args.avx2 else "")
    clock_text = "process CPU time" if args.clock == "cpu" else "wall time"
    print(common.report(f"Imported architectures (float32; {clock_text} per call)", rows, "archs" + suffix,
                        {"clock": args.clock, "rounds": args.rounds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
