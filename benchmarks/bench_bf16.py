"""GPT-2 with bfloat16 weights: ember's float32 session, its ``weights="bfloat16"`` session and ONNX
Runtime (float32) at batch 1, wall and process CPU time per call side by side (docs/torch.md,
"bfloat16 weights").

    python benchmarks/bench_bf16.py [--layers 2] [--seq 1024] [--rounds 5] [--threads N] [--no-ort]

Builds the model of ``bench_models.py`` (random weights, vocab 50257), checks the bfloat16 logits
against the float32 session's, prints the PARAMS bytes of both sessions, then times the runtimes in
interleaved rounds (each timed call after a 0.2 s pause and one untimed call, as ``bench_models.py``
does) and prints medians and ranges of wall time (``time.perf_counter``) and process CPU time
(``time.process_time``). ``--threads N`` limits every runtime to N threads (pin the process too, e.g.
``taskset -c 0``, for one-thread comparisons on a shared machine). Writes no result file.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import threads  # noqa: E402

threads.quiet_openblas()
if "--threads" in sys.argv:  # before NumPy and torch load
    threads.limit_threads(int(sys.argv[sys.argv.index("--threads") + 1]))

import numpy as np  # noqa: E402

import ember  # noqa: E402
from ember._src.native import prepare  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    import bench_models as bm
    import torch
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--no-ort", action="store_true")
    a = p.parse_args(argv)
    if threads.bench_threads():
        torch.set_num_threads(threads.bench_threads())
    prepare()
    model = bm.build(a.layers, 50257)
    s32 = bm.ember_session(model)
    s16 = ember.InferenceSession(s32._m, weights="bfloat16")
    ids = np.random.default_rng(a.seq).integers(0, 50257, (1, a.seq))
    feeds = {"input_ids": ids}
    diff = np.abs(s32.run(feeds)["logits"] - s16.run(feeds)["logits"]).max()
    print(f"max |bf16 - float32| logits: {diff:.3e}")
    p32, p16 = s32.memory(seq=a.seq)["PARAMS"], s16.memory(seq=a.seq)["PARAMS"]
    print(f"PARAMS float32 {p32} bytes, bfloat16 {p16} bytes")
    impls = {"ember float32": lambda: s32.run(feeds), "ember bfloat16": lambda: s16.run(feeds)}
    if not a.no_ort:
        ort = bm.ort_session(model, os.path.join(tempfile.mkdtemp(), "gpt2.onnx"))
        impls["onnxruntime float32"] = lambda: ort.run(None, feeds)
    wall: dict[str, list[float]] = {k: [] for k in impls}
    cpu: dict[str, list[float]] = {k: [] for k in impls}
    for fn in impls.values():
        fn()
    for _ in range(a.rounds):
        for k, fn in impls.items():
            time.sleep(0.2)
            fn()
            t, c = time.perf_counter(), time.process_time()
            fn()
            wall[k].append(time.perf_counter() - t)
            cpu[k].append(time.process_time() - c)
    print(f"GPT-2 {a.layers} layers, seq {a.seq}, threads {threads.bench_threads() or 'default'}, "
          f"{a.rounds} rounds, load average {os.getloadavg()[0]:.1f}")
    for k in impls:
        w, c = [1e3 * x for x in wall[k]], [1e3 * x for x in cpu[k]]
        print(f"  {k:20s} wall {statistics.median(w):8.1f} ms [{min(w):.1f}-{max(w):.1f}]   "
              f"cpu {statistics.median(c):8.1f} ms [{min(c):.1f}-{max(c):.1f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
