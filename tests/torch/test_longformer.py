"""Longformer with a dynamic batch and sequence. transformers' sliding-window attention does not
export (sizes through ``torch.div``, a branch on the mask's values, padding only where needed); the
importer replaces it during the export (``torch_import/longformer_attention.py``). The replacement
against the original methods, the model against torch eager at several lengths with one compile,
and global attention, which the import does not run, raising ``CheckError``."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch importer tests need torch")
pytest.importorskip("transformers", reason="needs transformers")

from transformers import LongformerConfig, LongformerModel  # noqa: E402
from transformers.models.longformer import modeling_longformer  # noqa: E402

import ember.torch as et  # noqa: E402
from ember._src.torch_import import longformer_attention  # noqa: E402
from ember.errors import CheckError  # noqa: E402

ATTENTION = modeling_longformer.LongformerSelfAttention


def _model(window=(8, 4)):
    torch.manual_seed(0)
    cfg = LongformerConfig(vocab_size=100, hidden_size=32, num_hidden_layers=len(window),
                           num_attention_heads=4, intermediate_size=64, max_position_embeddings=300,
                           attention_window=list(window), pad_token_id=1)
    return LongformerModel(cfg).eval()


@pytest.mark.parametrize("w,s,h,d", [(4, 16, 2, 3), (2, 8, 1, 1), (2, 4, 3, 5), (8, 48, 1, 4)])
def test_banded_scores_and_context_equal_the_original(w, s, h, d):
    """At the lengths the original takes (multiples of 2 w): the scores, -inf outside the sequence
    included, bit for bit; the context from the same probabilities to float rounding."""
    torch.manual_seed(s + w)
    att = ATTENTION.__new__(ATTENTION)
    att.config = LongformerConfig()
    q, k, v = (torch.randn(2, s, h, d) for _ in range(3))
    want = ATTENTION._sliding_chunks_query_key_matmul(att, q, k, w)
    got = longformer_attention.query_key_scores(None, q, k, w)
    assert torch.isinf(want).any()
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    p = torch.softmax(want, dim=-1)
    torch.testing.assert_close(longformer_attention.probs_value_context(None, p, v, w),
                               ATTENTION._sliding_chunks_matmul_attn_probs_value(att, p, v, w),
                               rtol=1e-6, atol=1e-6)


def test_scores_at_a_length_between_multiples_match_dense_banded_attention():
    """A length the original does not take (not a multiple of the window): the replacement pads its
    chunks itself; against scores computed densely and masked to the band."""
    w, s = 3, 11
    q, k = torch.randn(2, s, 2, 4), torch.randn(2, s, 2, 4)
    got = longformer_attention.query_key_scores(None, q, k, w)
    dense = torch.einsum("bihd,bjhd->bihj", q, k)
    want = torch.full((2, s, 2, 2 * w + 1), float("-inf"))
    for i in range(s):
        for j in range(max(0, i - w), min(s, i + w + 1)):
            want[:, i, :, j - i + w] = dense[:, i, :, j]
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_longformer_dynamic_batch_and_sequence():
    """The model with an attention mask (padded rows), dynamic batch and sequence: lengths that are
    and are not multiples of the window, one compile, within 1e-5 of torch eager."""
    m = _model()
    ids = torch.randint(2, 100, (2, 32))
    im = et.import_module(m, kwargs={"input_ids": ids, "attention_mask": torch.ones(2, 32, dtype=torch.long)},
                          dynamic_axes={"input_ids": ("batch", "seq"), "attention_mask": ("batch", "seq")})
    for b, s in ((2, 32), (3, 13), (1, 40), (2, 5)):
        x = torch.randint(2, 100, (b, s))
        mask = torch.ones(b, s, dtype=torch.long)
        mask[0, s // 2:] = 0
        with torch.no_grad():
            want = m(input_ids=x, attention_mask=mask).last_hidden_state.numpy()
        got = np.asarray(im(x.numpy(), mask.numpy())[0])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert im._jitted.cache_info()["compiles"] == 1


def test_global_attention_raises():
    """A token marked global (an attention-mask value of 2, or a global_attention_mask) would need
    sizes from the mask's values: the imported program raises CheckError naming it, and runs
    where no token is global."""
    m = _model(window=(4,))
    ids = torch.randint(2, 100, (2, 12))
    glob = torch.zeros(2, 12, dtype=torch.long)
    axes = {"input_ids": ("batch", "seq"), "global_attention_mask": ("batch", "seq")}
    im = et.import_module(m, kwargs={"input_ids": ids, "global_attention_mask": glob}, dynamic_axes=axes)
    x, g = torch.randint(2, 100, (3, 9)), torch.zeros(3, 9, dtype=torch.long)
    with torch.no_grad():
        want = m(input_ids=x, global_attention_mask=g).last_hidden_state.numpy()
    np.testing.assert_allclose(np.asarray(im(x.numpy(), g.numpy())[0]), want, rtol=1e-5, atol=1e-5)
    g[1, 0] = 1
    with pytest.raises(CheckError, match="Longformer's global attention"):
        im(x.numpy(), g.numpy())


def test_static_import_uses_the_replacement_and_restores_the_original():
    m = _model(window=(4,))
    ids = torch.randint(2, 100, (1, 10))
    im = et.import_module(m, kwargs={"input_ids": ids})
    with torch.no_grad():
        want = m(input_ids=ids).last_hidden_state.numpy()
    np.testing.assert_allclose(np.asarray(im(ids.numpy())[0]), want, rtol=1e-5, atol=1e-5)
    assert not hasattr(ATTENTION._sliding_chunks_query_key_matmul, "__wrapped__")
    assert not hasattr(modeling_longformer.LongformerEncoder.forward, "__wrapped__")
