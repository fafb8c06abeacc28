"""Small transformers/torchvision-style models with fixed seeds, shared by the torch tests."""

import functools

import pytest

torch = pytest.importorskip("torch", reason="the torch importer tests need torch")
transformers = pytest.importorskip("transformers", reason="the model tests need transformers")


@functools.cache
def gpt2():
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=256,
                                  bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(cfg).eval()


@functools.cache
def imported_gpt2():
    """:func:`gpt2` imported once per process with dynamic batch and sequence, from a batch-1 example
    (widened for the export); tests that share it compare counters as differences."""
    import ember.torch as et
    ids = torch.randint(0, 100, (1, 8), generator=torch.Generator().manual_seed(6))
    return et.import_module(gpt2(), kwargs={"input_ids": ids, "use_cache": False},
                            dynamic_axes={"input_ids": ("batch", "seq")})


@functools.cache
def llama():
    torch.manual_seed(1)
    cfg = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                   num_key_value_heads=2, intermediate_size=128, vocab_size=100,
                                   max_position_embeddings=256, bos_token_id=0, eos_token_id=0)
    return transformers.LlamaForCausalLM(cfg).eval()


@functools.cache
def bert():
    torch.manual_seed(2)
    cfg = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                  intermediate_size=128, vocab_size=100, max_position_embeddings=128)
    return transformers.BertModel(cfg).eval()


@functools.cache
def mixtral():
    """A one-layer mixture of 4 experts, 2 per token (transformers' grouped_mm_fallback op)."""
    torch.manual_seed(3)
    cfg = transformers.MixtralConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=4,
                                     num_key_value_heads=2, intermediate_size=64, vocab_size=100,
                                     num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=64,
                                     bos_token_id=0, eos_token_id=0)
    return transformers.MixtralForCausalLM(cfg).eval()


def check_dynamic_image_model(model, example_hw, sizes, seed=3):
    """``model`` (an image model with a ``last_hidden_state``) imported once from a batch-2 example
    of ``example_hw`` with dynamic batch, height and width, against torch eager at each
    ``(batch, h, w)`` of ``sizes``, with one compile; returns the imported module."""
    import numpy as np

    import ember.torch as et
    im = et.import_module(model, (torch.randn(2, 3, *example_hw),),
                          dynamic_axes={"pixel_values": ("batch", None, "h", "w")})
    g = torch.Generator().manual_seed(seed)
    for b, h, w in sizes:
        x = torch.randn(b, 3, h, w, generator=g)
        with torch.inference_mode():
            want = model(x).last_hidden_state.numpy()
        got = np.asarray(im(x.numpy())[0])
        assert got.shape == want.shape and np.abs(want).max() > 1e-3
        np.testing.assert_allclose(got, want, atol=2e-5 * np.abs(want).max(), rtol=0)
    assert im._jitted.cache_info()["compiles"] == 1
    return im
