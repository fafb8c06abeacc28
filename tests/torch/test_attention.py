"""``scaled_dot_product_attention`` imported as one fused ``attention`` step, against torch:
sequence lengths and head dims from 1 up, grouped-query heads, causal with ``L != S`` (torch's
top-left alignment), boolean masks with fully masked rows (torch gives zeros), additive masks,
float64; and a GPT-2 session whose activation memory grows linearly in the sequence length."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch importer tests need torch")

import ember  # noqa: E402
from ember._src.torch_import.ops import OPS, Ctx  # noqa: E402

SDPA = OPS["aten.scaled_dot_product_attention.default"].fn
g = torch.Generator().manual_seed(18)


def qkv(B, H, Hk, L, S, D, dtype=torch.float32):
    return tuple(torch.randn(*shape, generator=g, dtype=dtype) for shape in ((B, H, L, D), (B, Hk, S, D),
                                                                              (B, Hk, S, D)))


def run(q, k, v, mask=None, **kw):
    """The handler under jit on the native backend; checks the program has one attention step."""
    args = [t.numpy() for t in (q, k, v)] + ([] if mask is None else [mask.numpy()])
    f = ember.jit(lambda *a: SDPA(Ctx((), "float32", "sdpa"), *a[:3], *a[3:], **kw), backend="native")
    out = np.asarray(f(*args))
    sched = f.lower(*args).executable.schedule
    assert sched.count("fallback") == 0 and \
        [st.eqns[0].prim.name for st in sched.steps if st.kind == "call"] == ["attention"], str(sched)
    return out


@pytest.mark.parametrize("L,S,D", [(1, 1, 8), (7, 7, 1), (64, 64, 64), (130, 130, 80), (1, 130, 64),
                                   (7, 3, 8), (3, 9, 8)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_matches_torch(L, S, D, is_causal):
    q, k, v = qkv(2, 4, 2, L, S, D)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=is_causal, enable_gqa=True)
    got = run(q, k, v, is_causal=is_causal, enable_gqa=True)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=3e-5)


def test_masks_and_fully_masked_rows():
    q, k, v = qkv(1, 2, 2, 9, 11, 16)
    mask = torch.rand(1, 2, 9, 11, generator=g) > 0.4
    mask[0, 1, 3] = False
    mask[0, :, 7] = False
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    got = run(q, k, v, mask)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=3e-5)
    assert np.all(got[0, 1, 3] == 0)
    add = torch.randn(9, 11, generator=g)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=add, scale=0.4)
    np.testing.assert_allclose(run(q, k, v, add, scale=0.4), want.numpy(), rtol=1e-4, atol=3e-5)


def test_float64():
    q, k, v = qkv(1, 3, 1, 20, 33, 8, torch.float64)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    np.testing.assert_allclose(run(q, k, v, is_causal=True, enable_gqa=True), want.numpy(), rtol=1e-11,
                               atol=1e-12)


def test_gpt2_activation_memory_is_linear_in_sequence_length():
    transformers = pytest.importorskip("transformers")
    import ember.torch as et

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=1, n_embd=64, n_head=4, vocab_size=50, n_positions=1024)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    ids = torch.zeros(1, 8, dtype=torch.long)
    sess = ember.InferenceSession(et.import_module(model, (), {"input_ids": ids, "use_cache": False},
                                                   dynamic_axes={"input_ids": (None, "seq")}))
    act = {n: sess.memory(seq=n)["ACTIVATIONS"] for n in (512, 1024)}
    # one head's 1024 x 1024 float32 scores alone would be 4 MiB
    assert act[1024] < 1024 * 1024 * 4 and act[1024] <= 2.1 * act[512], act
    x = np.random.default_rng(0).integers(0, 50, (1, 1024))
    with torch.inference_mode():
        want = model(input_ids=torch.from_numpy(x), use_cache=False).logits.numpy()
    np.testing.assert_allclose(sess.run({"input_ids": x})["logits"], want, rtol=0, atol=1e-4)
