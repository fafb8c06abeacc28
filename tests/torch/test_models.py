"""Imported PyTorch models against PyTorch eager: GPT-2, a Llama-style decoder with grouped-query
attention, a BERT encoder with a padding mask and a small CNN; every sequence length (or batch
size) runs on one trace and one C compile."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the PyTorch importer needs torch")
transformers = pytest.importorskip("transformers", reason="the model tests build transformers models")

import ember.torch as et  # noqa: E402


def _check_lengths(im, model_fn, lengths, batch=2, vocab=100, tol=1e-4):
    for n in lengths:
        x = torch.randint(0, vocab, (batch, n))
        with torch.no_grad():
            want = model_fn(x)
        got = np.asarray(im(x.numpy()))
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=0, atol=tol)
    info = im.jitted.cache_info()
    assert info["traces"] == 1 and info["compiler_runs"] <= 1, info  # one compile for every length


def test_gpt2_logits_every_length_one_compile():
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=256,
                                  use_cache=False)
    m = transformers.GPT2LMHeadModel(cfg).eval()
    im = et.import_module(m, (torch.randint(0, 100, (2, 7)),), dynamic_axes={"input_ids": ("batch", "seq")})
    assert im.input_names == ["input_ids"] and "transformer.wte.weight" in im.params
    _check_lengths(im, lambda x: m(x).logits.numpy(), [1, 7, 64, 130])


def test_llama_with_grouped_query_attention():
    torch.manual_seed(1)
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=100,
                                   max_position_embeddings=256, use_cache=False)
    m = transformers.LlamaForCausalLM(cfg).eval()
    im = et.import_module(m, (torch.randint(0, 100, (2, 7)),), dynamic_axes={"input_ids": ("batch", "seq")})
    _check_lengths(im, lambda x: m(x).logits.numpy(), [1, 7, 64, 130])


def test_bert_encoder_with_padding_mask():
    torch.manual_seed(2)
    cfg = transformers.BertConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                  num_attention_heads=4, vocab_size=100, max_position_embeddings=128)
    m = transformers.BertModel(cfg).eval()
    ids, mask = torch.randint(0, 100, (2, 7)), torch.ones(2, 7, dtype=torch.long)
    axes = {"input_ids": ("batch", "seq"), "attention_mask": ("batch", "seq")}
    im = et.import_module(m, (ids, mask), dynamic_axes=axes)
    assert im.input_names == ["input_ids", "attention_mask"]
    for n in (3, 9, 33):
        x, mk = torch.randint(0, 100, (3, n)), torch.ones(3, n, dtype=torch.long)
        mk[0, n - 2:] = 0
        mk[2, 1:] = 0
        with torch.no_grad():
            want = m(x, mk).last_hidden_state.numpy()
        got = im(x.numpy(), mk.numpy())
        got = np.asarray(got[0] if isinstance(got, tuple) else got)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)


class _CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.c2 = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=2)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):
        x = torch.relu(self.bn(self.c1(x)))
        x = torch.nn.functional.max_pool2d(x, 2)
        x = torch.nn.functional.avg_pool2d(torch.relu(self.c2(x)), 2)
        x = torch.nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


def test_cnn_conv_batchnorm_pools():
    torch.manual_seed(3)
    net = _CNN().eval()
    with torch.no_grad():
        net.bn.running_mean.uniform_(-1, 1)
        net.bn.running_var.uniform_(0.5, 2.0)
    im = et.import_module(net, (torch.randn(2, 3, 16, 16),), dynamic_axes={"x": ("batch", None, None, None)})
    for b in (1, 4):
        x = torch.randn(b, 3, 16, 16)
        with torch.no_grad():
            want = net(x).numpy()
        np.testing.assert_allclose(np.asarray(im(x.numpy())), want, rtol=0, atol=1e-5)
    assert im.jitted.cache_info()["traces"] == 1
