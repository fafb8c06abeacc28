"""Greedy generation with a key/value cache equals transformers' greedy generate."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the generation tests need torch")
transformers = pytest.importorskip("transformers", reason="the generation tests need transformers")

import ember  # noqa: E402
import ember.torch as et  # noqa: E402
from ember._src.torch_import.kv_cache import cache_step, empty_cache, greedy_generate  # noqa: E402

AXES = {"input_ids": (None, "seq"), "past": (None, None, None, None, "past", None)}


def _gpt2():
    torch.manual_seed(10)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=200, n_positions=128,
                                  initializer_range=0.3, bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(cfg).eval(), 4, 16


def _llama():
    torch.manual_seed(11)
    cfg = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                   num_key_value_heads=2, intermediate_size=128, vocab_size=200,
                                   max_position_embeddings=128, initializer_range=0.3,
                                   bos_token_id=0, eos_token_id=0)
    return transformers.LlamaForCausalLM(cfg).eval(), 2, 16


@pytest.mark.parametrize("build", [_gpt2, _llama], ids=["gpt2", "llama"])
def test_greedy_generation_matches_transformers(build):
    model, kv_heads, head_dim = build()
    step = cache_step(model)
    ex = (torch.zeros(1, 2, dtype=torch.long), torch.zeros(2, 2, 1, kv_heads, 2, head_dim))
    imported = et.import_module(step, ex, dynamic_axes=AXES)
    assert imported.output_names == ["logits", "present"]
    session = ember.InferenceSession(imported, state_inputs={"past": "present"})
    with pytest.raises(ember._src.session.SessionError, match="state input 'past' has no value"):
        session.run({"input_ids": np.zeros((1, 2), np.int64)})
    session.set_state("past", empty_cache(2, 1, kv_heads, head_dim))
    prompt = np.random.default_rng(12).integers(0, 200, (1, 6))
    new = 16
    toks = greedy_generate(session, prompt, new)
    assert np.asarray(session._fed_state["past"]).shape[4] == 1 + 6 + new - 1  # padding slot + tokens
    pt = torch.from_numpy(prompt)
    with torch.inference_mode():
        ref = model.generate(pt, attention_mask=torch.ones_like(pt), max_new_tokens=new, do_sample=False)
    np.testing.assert_array_equal(toks, ref.numpy())
    assert len(set(toks[0, 6:].tolist())) > 3  # not a degenerate repetition
    info = session.cache_info()
    assert info["compiles"] == 1 and info["specializations"] == new
