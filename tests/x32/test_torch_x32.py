"""Imported PyTorch models in the default (32-bit) mode: torch's int64 token ids and the int64
index arithmetic of the exported graph run as int32, with no dtype warnings, and the logits match
PyTorch eager."""

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch importer tests need torch")
pytest.importorskip("transformers", reason="the model tests need transformers")

import ember.torch as et  # noqa: E402
from tests.torch import models  # noqa: E402


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_causal_lm_in_default_mode_matches_torch(name):
    model = getattr(models, name)()
    ids = torch.randint(0, 100, (1, 5))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="Explicitly requested dtype")
        m = et.import_module(model, (), {"input_ids": ids, "use_cache": False},
                             dynamic_axes={"input_ids": (None, "seq")})
        g = torch.Generator().manual_seed(5)
        for n in (3, 17):
            x = torch.randint(0, 100, (1, n), generator=g)
            out = m(x.numpy())  # int64 ids
            assert out.dtype == np.float32
            with torch.inference_mode():
                want = model(input_ids=x, use_cache=False).logits.numpy()
            np.testing.assert_allclose(np.asarray(out), want, atol=1e-4, rtol=0)
