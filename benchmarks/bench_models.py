"""GPT-2 (random weights) imported with ember.torch: ember InferenceSession vs PyTorch eager
(``inference_mode``), ``torch.compile`` and ONNX Runtime (``torch.onnx.export``, all graph
optimizations) at batch 1 and several sequence lengths; latency medians over interleaved rounds,
and activation memory, measured per runtime as well as each allows:

* ember: ``ACTIVATIONS`` of ``session.memory(seq=n)``, the planned arena's peak for the binding
  (intermediates and per-step workspace together; weights, inputs and outputs not included);
* PyTorch eager: the peak of the bytes torch's CPU allocator holds during one call, from the
  profiler's allocation events (``profile_memory=True``), not counting the returned logits;
* ONNX Runtime: the growth of the peak resident set size during the first call at that length in
  a fresh process (after a warm-up call at length 8; the peak, ``VmHWM``, is reset through
  ``/proc/self/clear_refs`` just before the call), less the logits' bytes: its arena grows to its
  peak then (``malloc_trim`` first, so heap pages freed earlier do not hide the growth). Pages
  touched for the first time by threads count too: approximate, reliable where it is large;
* ``torch.compile``: not measured.

    python benchmarks/bench_models.py [--layers 2,12] [--seqs 16,128,512,1024] [--rounds 7]
                                      [--no-compile] [--no-ort] [--vocab 50257] [--generate 128]
                                      [--threads N] [--clock wall|cpu] [--settle S] [--encoders]
                                      [--bf16]

``--threads N`` limits every runtime to N threads (ember's pool and OpenMP, torch, ONNX Runtime's
intra-op pool). ``--clock cpu`` times each call by the process CPU time (``time.process_time``)
instead of the elapsed time: with ``--threads 1`` on a shared, loaded machine it counts the work
each runtime does, not the time it waits for a core (with more threads it also counts their
spinning, so read it as cost, not latency).

Runtimes take turns in one process, so one runtime's idle threads must not run into the next
one's timed call: ONNX Runtime's intra-op threads spin after each call (its default
``allow_spinning``) for tens of milliseconds, and the next runtime's call then shares the two vCPUs
with them (ember's two-thread seq-16 forward took 28-32 ms within 10 ms of an ORT call, 19 ms
after 100 ms; one-thread ember 35.6 ms against 18.3 with ORT's spinning off). So each timed call
comes after a pause of ``--settle`` seconds (default 0.2: the other runtimes' threads go idle) and
one untimed call of the same runtime (its own threads awake, as in a stream of calls: each
runtime keeps whatever its spinning gains it). ``--settle 0`` times the calls back to back without
either, as before.

``--generate N`` adds a row per model: greedy generation of N tokens after a 32-token prompt with
the key/value cache kept as session state, against ``transformers`` generate (tokens/s).

``--bf16`` adds ``ember bf16``: the same session with ``weights="bfloat16"`` (the products' weights
in bfloat16, docs/torch.md); its row's error column stays the float32 session's (the bfloat16
logits' largest difference from the float32 ones is printed per length).

``--encoders`` runs the ``nn.MultiheadAttention`` models of ``bench_encoders.py`` instead (encoder
stacks, ViT-B/16; wall and CPU time per call).

Writes ``benchmarks/results/models.{json,md}``. On a loaded machine run a subset
(``--layers 2 --seqs 16,128``) and read the numbers as noisy.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import threads  # noqa: E402

threads.quiet_openblas()  # before NumPy loads OpenBLAS (its idle threads would take ember's second core)
if "--threads" in sys.argv:  # before NumPy and torch load
    threads.limit_threads(int(sys.argv[sys.argv.index("--threads") + 1]))

import numpy as np  # noqa: E402
from common import have, ort_cpu_session, report  # noqa: E402

import ember  # noqa: E402
from ember._src.native import prepare  # noqa: E402


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
    import torch

    class Logits(torch.nn.Module):
        def __init__(self, lm):
            super().__init__()
            self.lm = lm

        def forward(self, input_ids):
            # an explicit all-ones attention mask: without one, transformers' mask builder looks for
            # packed sequences with aten::diff, which the TorchScript ONNX exporter cannot export
            mask = torch.ones_like(input_ids)
            return self.lm(input_ids=input_ids, attention_mask=mask, use_cache=False).logits

    ids = torch.zeros(1, 8, dtype=torch.long)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # export a copy: the TorchScript exporter leaves the module it traced in a changed state
        torch.onnx.export(Logits(copy.deepcopy(model)), (ids,), path, input_names=["input_ids"],
                          output_names=["logits"], dynamic_axes={"input_ids": {1: "seq"}}, dynamo=False)
    return ort_cpu_session(path)


def torch_activation_bytes(model, ids: np.ndarray) -> int:
    """Peak bytes held by torch's CPU allocator during one eager call, the returned logits excluded
    (the running sum of the profiler's per-op allocations and frees, in time order)."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    tids = torch.from_numpy(ids)
    with torch.inference_mode():
        model(input_ids=tids, use_cache=False)
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            out = model(input_ids=tids, use_cache=False).logits
    out_bytes = out.numel() * out.element_size()
    cur = peak = 0
    skipped = False
    for ev in sorted(prof.events(), key=lambda e: e.time_range.start):
        m = ev.self_cpu_memory_usage
        if m == out_bytes and not skipped:  # the logits: an output, as ember's OUTPUTS
            skipped = True
            continue
        cur += m
        peak = max(peak, cur)
    return int(peak)


_ORT_PROBE = """
import ctypes
import sys
import numpy as np
import onnxruntime as ort

def status(key):
    with open("/proc/self/status") as f:
        return next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith(key + ":"))

opts = ort.SessionOptions()
opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
s = ort.InferenceSession(sys.argv[1], opts, providers=["CPUExecutionProvider"])
s.run(None, {"input_ids": np.zeros((1, 8), np.int64)})
ctypes.CDLL("libc.so.6").malloc_trim(0)  # freed heap pages go back: new allocations fault pages in
before = status("VmRSS")
with open("/proc/self/clear_refs", "w") as f:  # reset the peak (VmHWM) to the current RSS
    f.write("5")
out = s.run(None, {"input_ids": np.zeros((1, int(sys.argv[2])), np.int64)})
print(status("VmHWM") - before - out[0].nbytes)
"""


def ort_activation_bytes(path: str, n: int) -> int | None:
    """Peak RSS growth of ONNX Runtime's first call at length ``n`` in a fresh process, less the
    logits (see the module docstring); None when the probe fails."""
    r = subprocess.run([sys.executable, "-c", _ORT_PROBE, path, str(n)], capture_output=True, text=True,
                       timeout=600)
    try:
        return max(0, int(r.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        print(f"ONNX Runtime memory probe failed: {r.stderr[-300:]}")
        return None


def implementations(sess, model, peers: dict, ort_s, ids: np.ndarray, sess16=None) -> dict:
    import torch
    tids = torch.from_numpy(ids)

    def eager(m=model):
        with torch.inference_mode():
            return m(input_ids=tids, use_cache=False).logits
    impls = {"ember native": lambda: sess.run({"input_ids": ids}), "torch eager": eager}
    if sess16 is not None:
        impls["ember bf16"] = lambda: sess16.run({"input_ids": ids})
    if "torch.compile" in peers:
        impls["torch.compile"] = lambda: eager(peers["torch.compile"])
    if ort_s is not None:
        impls["onnxruntime"] = lambda: ort_s.run(None, {"input_ids": ids})
    return impls


def generation(model, layers: int, prompt_len: int, new: int) -> dict:
    """Tokens per second of greedy generation with a key/value cache (session state) vs
    ``transformers`` generate; the tokens must agree."""
    import torch

    import ember.torch as et
    from ember._src.torch_import.kv_cache import cache_step, empty_cache, greedy_generate
    ex = (torch.zeros(1, 2, dtype=torch.long), torch.zeros(layers, 2, 1, 12, 2, 64))
    axes = {"input_ids": (None, "seq"), "past": (None, None, None, None, "past", None)}
    sess = ember.InferenceSession(et.import_module(cache_step(model), ex, dynamic_axes=axes),
                                  state_inputs={"past": "present"})
    prompt = np.random.default_rng(0).integers(0, model.config.vocab_size, (1, prompt_len))
    pt = torch.from_numpy(prompt)
    times: dict[str, list[float]] = {"ember native": [], "transformers generate": []}
    for _ in range(3):
        sess.reset_state()
        sess.set_state("past", empty_cache(layers, 1, 12, 64))
        t = time.perf_counter()
        toks = greedy_generate(sess, prompt, new)
        times["ember native"].append(time.perf_counter() - t)
        t = time.perf_counter()
        with torch.inference_mode():
            ref = model.generate(pt, attention_mask=torch.ones_like(pt), max_new_tokens=new,
                                 do_sample=False)
        times["transformers generate"].append(time.perf_counter() - t)
    med = {k: statistics.median(v[1:]) for k, v in times.items()}  # the first ember run compiles
    return {"workload": f"GPT-2 {layers} layers: {new} tokens after a {prompt_len}-token prompt",
            "times": med, "tokens_per_s": {k: new / v for k, v in med.items()},
            "tokens_equal": bool(np.array_equal(toks, ref.numpy())),
            "compiles": sess.cache_info()["compiles"]}


def interleaved(impls: dict, rounds: int, clock=time.perf_counter, settle: float = 0.0) -> dict:
    """Median seconds per call of each implementation, one timed call of each per round in turn;
    ``clock`` is the timer (``time.perf_counter``: elapsed, ``time.process_time``: process CPU
    time). With ``settle`` > 0, each timed call follows a pause of ``settle`` seconds and an untimed
    call of the same implementation (see the module docstring)."""
    samples: dict[str, list[float]] = {k: [] for k in impls}
    for fn in impls.values():
        fn()
    for _ in range(rounds):
        for k, fn in impls.items():
            if settle > 0:
                time.sleep(settle)
                fn()
            t = clock()
            fn()
            samples[k].append(clock() - t)
    return {k: statistics.median(v) for k, v in samples.items()}


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:.1f} MiB"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--layers", default="2,12")
    p.add_argument("--seqs", default="16,128,512,1024")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--no-ort", action="store_true")
    p.add_argument("--generate", type=int, default=128, help="new tokens in the generation row (0: none)")
    p.add_argument("--threads", type=int, default=None, help="limit every runtime to N threads")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="wall: elapsed time; cpu: process CPU time per call (see above)")
    p.add_argument("--settle", type=float, default=0.2,
                   help="seconds of pause, then an untimed call, before each timed call (0: back to back)")
    p.add_argument("--bf16", action="store_true",
                   help="also time the session with weights='bfloat16' (ember bf16)")
    p.add_argument("--encoders", action="store_true",
                   help="run bench_encoders.py's rows (encoder stacks, ViT-B/16) instead of GPT-2")
    a = p.parse_args(argv)
    if a.encoders:
        import bench_encoders
        return bench_encoders.main(["--rounds", str(a.rounds), "--settle", str(a.settle)]
                                   + (["--no-ort"] if a.no_ort else []))
    import torch
    if threads.bench_threads():
        torch.set_num_threads(threads.bench_threads())
    clock = time.process_time if a.clock == "cpu" else time.perf_counter
    prepare()  # time the steady state: per-machine runtime libraries (GEMM kernel, thread pool) loaded
    rows = []
    for layers in [int(x) for x in a.layers.split(",")]:
        model = build(layers, a.vocab)
        t0 = time.perf_counter()
        sess = ember_session(model)
        import_s = time.perf_counter() - t0
        sess16 = ember.InferenceSession(sess._m, weights="bfloat16") if a.bf16 else None
        peers: dict = {}
        if not a.no_compile:
            peers["torch.compile"] = torch.compile(model)
        ort_s = None
        onnx_path = os.path.join(tempfile.mkdtemp(), "gpt2.onnx")
        if not a.no_ort and have("onnxruntime"):
            try:
                ort_s = ort_session(model, onnx_path)
            except Exception as e:  # noqa: BLE001 - report and go on without the peer
                print(f"ONNX Runtime peer skipped: {type(e).__name__}: {str(e)[:200]}")
        for n in [int(x) for x in a.seqs.split(",")]:
            ids = np.random.default_rng(n).integers(0, a.vocab, (1, n))
            load = os.getloadavg()[0]
            times = interleaved(implementations(sess, model, peers, ort_s, ids, sess16), a.rounds, clock,
                                a.settle)
            if sess16 is not None:
                feeds = {"input_ids": ids}
                d16 = np.abs(sess16.run(feeds)["logits"] - sess.run(feeds)["logits"])
                print(f"ember bf16 logits vs float32 session, seq {n}: max abs difference {d16.max():.2e}")
            mem = sess.memory(seq=n)
            act = {"ember native": mem["ACTIVATIONS"], "torch eager": torch_activation_bytes(model, ids)}
            if ort_s is not None:
                act["onnxruntime"] = ort_activation_bytes(onnx_path, n)
            with torch.inference_mode():
                ref = model(input_ids=torch.from_numpy(ids), use_cache=False).logits.numpy()
            err = float(np.abs(sess.run({"input_ids": ids})["logits"] - ref).max())
            rows.append({"workload": f"GPT-2 {layers} layers, seq {n}", "times": times,
                         "ember_activation_bytes": mem["ACTIVATIONS"], "activation_bytes": act,
                         "load_avg_1min": load, "max_abs_err": err,
                         "ember_import_s": import_s, "compiles": sess.cache_info()["compiles"]})
            print(rows[-1], flush=True)
        if a.generate:
            rows.append(generation(model, layers, 32, a.generate))
            print(rows[-1], flush=True)
    text = report("GPT-2 inference (batch 1, random weights)", rows, "models",
                  {"rounds": a.rounds, "vocab": a.vocab, "torch_threads": torch.get_num_threads(),
                   "threads": threads.bench_threads(), "clock": a.clock, "cpus": os.cpu_count(),
                   "settle_s": a.settle})
    text += ("\n| workload | activation memory: ember (arena peak) | torch eager (allocator peak) | "
             "onnxruntime (peak RSS growth) | max abs err vs torch | load avg |\n|---|---|---|---|---|---|\n")
    text += "".join(f"| {r['workload']} | {_mib(r['activation_bytes'].get('ember native'))} | "
                    f"{_mib(r['activation_bytes'].get('torch eager'))} | "
                    f"{_mib(r['activation_bytes'].get('onnxruntime'))} | {r['max_abs_err']:.1e} | "
                    f"{r['load_avg_1min']:.1f} |\n" for r in rows if "max_abs_err" in r)
    text += "".join(f"\n{r['workload']}: "
                    + ", ".join(f"{k} {v:.0f} tokens/s" for k, v in r["tokens_per_s"].items())
                    + f"; tokens equal: {r['tokens_equal']}\n" for r in rows if "tokens_per_s" in r)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
