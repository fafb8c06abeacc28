"""``python -m ember demo gpt2``: import a GPT-2 built from a config (random weights, nothing is
downloaded) and generate greedily with a key/value cache, checking the tokens against
``transformers``' ``generate``."""

from __future__ import annotations

import argparse
import time


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m ember demo gpt2")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--prompt", type=int, default=16, help="prompt length (random token ids)")
    p.add_argument("--new", type=int, default=32, help="tokens to generate")
    a = p.parse_args(argv)
    try:
        import torch
        import transformers
    except ImportError:
        print("the gpt2 demo needs torch and transformers (pip install 'ember[torch]')")
        return 2
    import numpy as np

    import ember
    import ember.torch as et
    from ember._src.torch_import.kv_cache import cache_step, empty_cache, greedy_generate

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=a.layers, n_embd=a.dim, n_head=a.heads, vocab_size=1000,
                                  n_positions=1024, initializer_range=0.2, bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    hd = a.dim // a.heads
    t0 = time.perf_counter()
    step = cache_step(model)
    ex_ids, ex_past = torch.zeros(1, 2, dtype=torch.long), torch.zeros(a.layers, 2, 1, a.heads, 2, hd)
    axes = {"input_ids": (None, "seq"), "past": (None, None, None, None, "past", None)}
    m = et.import_module(step, (ex_ids, ex_past), dynamic_axes=axes)
    session = ember.InferenceSession(m, state_inputs={"past": "present"})
    print(f"imported GPT-2 ({a.layers} layers, d={a.dim}) in {time.perf_counter() - t0:.1f} s")
    prompt = np.random.default_rng(0).integers(0, 1000, (1, a.prompt))
    t0 = time.perf_counter()
    session.set_state("past", empty_cache(a.layers, 1, a.heads, hd))
    toks = greedy_generate(session, prompt, a.new)
    t_first = time.perf_counter() - t0
    session.reset_state()  # again, compiled: the steady-state speed
    session.set_state("past", empty_cache(a.layers, 1, a.heads, hd))
    t0 = time.perf_counter()
    greedy_generate(session, prompt, a.new)
    t_ember = time.perf_counter() - t0
    t0 = time.perf_counter()
    with torch.inference_mode():
        pt = torch.from_numpy(prompt)
        ref = model.generate(pt, attention_mask=torch.ones_like(pt), max_new_tokens=a.new,
                             do_sample=False).numpy()
    t_torch = time.perf_counter() - t0
    info = session.cache_info()
    print(f"ember:        {toks[0, a.prompt:].tolist()}")
    print(f"transformers: {ref[0, a.prompt:].tolist()}")
    print(f"tokens equal: {np.array_equal(toks, ref)}; compiles: {info['compiles']} for {2 * a.new} steps")
    print(f"ember: first run {t_first:.2f} s (incl. the compile), then {a.new / t_ember:.0f} tokens/s; "
          f"transformers generate: {a.new / t_torch:.0f} tokens/s")
    return 0 if np.array_equal(toks, ref) else 1
