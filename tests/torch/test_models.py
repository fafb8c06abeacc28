"""Imported GPT-2 / Llama / BERT / CNN models against PyTorch eager."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch importer tests need torch")
pytest.importorskip("transformers", reason="the model tests need transformers")

import ember.torch as et  # noqa: E402
from tests.torch import models  # noqa: E402

LENGTHS = (1, 7, 64, 130)


def _logits(model, **kw):
    with torch.inference_mode():
        return model(**kw, use_cache=False).logits.numpy()


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_causal_lm_logits_one_compile(name):
    model = getattr(models, name)()
    ids = torch.randint(0, 100, (1, 7))
    m = et.import_module(model, (), {"input_ids": ids, "use_cache": False},
                         dynamic_axes={"input_ids": (None, "seq")})
    assert m.input_names == ["input_ids"] and m.output_names == ["logits"]
    g = torch.Generator().manual_seed(3)
    for n in LENGTHS:
        x = torch.randint(0, 100, (1, n), generator=g)
        out = np.asarray(m(x.numpy()))
        np.testing.assert_allclose(out, _logits(model, input_ids=x), atol=1e-4, rtol=0)
    info = m._jitted.cache_info()
    assert info["compiles"] == 1 and info["compiler_runs"] <= 1 and info["specializations"] == len(LENGTHS)


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_batch_with_padding_mask(name):
    model = getattr(models, name)()
    g = torch.Generator().manual_seed(4)
    ids = torch.randint(0, 100, (3, 9), generator=g)
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[1, 6:] = 0
    mask[2, 2:] = 0
    m = et.import_module(model, (), {"input_ids": ids, "attention_mask": mask, "use_cache": False},
                         dynamic_axes={"input_ids": ("batch", "seq"), "attention_mask": ("batch", "seq")})
    for n in (9, 5):
        out = np.asarray(m(ids[:, :n].numpy(), mask[:, :n].numpy()))
        ref = _logits(model, input_ids=ids[:, :n], attention_mask=mask[:, :n])
        keep = mask[:, :n].numpy().astype(bool)  # padded positions' logits are unspecified
        np.testing.assert_allclose(out[keep], ref[keep], atol=1e-4, rtol=0)
