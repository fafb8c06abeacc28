"""Imported GPT-2 / Llama / BERT / CNN models against PyTorch eager."""


import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch importer tests need torch")
pytest.importorskip("transformers", reason="the model tests need transformers")

import ember.torch as et  # noqa: E402
from ember._src.native import specialize  # noqa: E402
from tests.torch import models  # noqa: E402

LENGTHS = (1, 7, 64, 130)


def _logits(model, **kw):
    with torch.inference_mode():
        return model(**kw, use_cache=False).logits.numpy()


def _imported_llama_seq():
    ids = torch.randint(0, 100, (1, 7))
    return et.import_module(models.llama(), (), {"input_ids": ids, "use_cache": False},
                            dynamic_axes={"input_ids": (None, "seq")})


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_causal_lm_logits_one_compile(name):
    """GPT-2 through the shared import (dynamic batch and sequence), Llama with a dynamic sequence."""
    model = getattr(models, name)()
    m = models.imported_gpt2() if name == "gpt2" else _imported_llama_seq()
    assert m.input_names == ["input_ids"] and m.output_names == ["logits"]
    before = m._jitted.cache_info() if m._jitted is not None else {"specializations": 0}
    g = torch.Generator().manual_seed(3)
    for n in LENGTHS:
        x = torch.randint(0, 100, (1, n), generator=g)
        out = np.asarray(m(x.numpy()))
        np.testing.assert_allclose(out, _logits(model, input_ids=x), atol=1e-4, rtol=0)
    info = m._jitted.cache_info()
    assert info["compiles"] == 1 and info["compiler_runs"] <= 1
    assert info["specializations"] - before["specializations"] <= len(LENGTHS)


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


def test_bert_encoder_dynamic_seq():
    model = models.bert()
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(0, 100, (2, 6), generator=g)
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[1, 4:] = 0
    m = et.import_module(model, (), {"input_ids": ids, "attention_mask": mask},
                         dynamic_axes={"input_ids": (None, "seq"), "attention_mask": (None, "seq")})
    assert m.output_names == ["last_hidden_state", "pooler_output"]
    for n in (6, 11):
        x = torch.randint(0, 100, (2, n), generator=g)
        mk = torch.ones(2, n, dtype=torch.long)
        mk[0, n - 2:] = 0
        with torch.inference_mode():
            ref = model(input_ids=x, attention_mask=mk)
        hidden, pooled = m(x.numpy(), mk.numpy())
        keep = mk.numpy().astype(bool)
        np.testing.assert_allclose(np.asarray(hidden)[keep], ref.last_hidden_state.numpy()[keep], atol=1e-4)
        np.testing.assert_allclose(np.asarray(pooled), ref.pooler_output.numpy(), atol=1e-4)
    assert m._jitted.cache_info()["compiles"] == 1


class _Block(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c1 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.b1 = torch.nn.BatchNorm2d(c)
        self.c2 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.b2 = torch.nn.BatchNorm2d(c)

    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        return torch.relu(x + self.b2(self.c2(y)))


class _ResNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 5, stride=2, padding=2)
        self.bn = torch.nn.BatchNorm2d(8)
        self.pool = torch.nn.MaxPool2d(3, 2, 1)
        self.block = _Block(8)
        self.down = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.avg = torch.nn.AvgPool2d(2, 1)
        self.head = torch.nn.Linear(16, 10)

    def forward(self, x):
        x = self.pool(torch.relu(self.bn(self.stem(x))))
        x = self.avg(self.down(self.block(x)))
        x = torch.nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.head(x)


def test_resnet_style_cnn():
    torch.manual_seed(6)
    model = _ResNet()
    for mod in model.modules():  # non-trivial running statistics
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.5, 0.5)
            mod.running_var.uniform_(0.5, 2.0)
    model.eval()
    x = torch.randn(2, 3, 32, 32)
    m = et.import_module(model, (x,), dynamic_axes={"x": ("batch", None, None, None)})
    assert any(k.endswith("running_var") for k in m.params)
    for b in (2, 3):
        xb = torch.randn(b, 3, 32, 32)
        with torch.inference_mode():
            ref = model(xb).numpy()
        np.testing.assert_allclose(np.asarray(m(xb.numpy())), ref, atol=1e-4)


def test_unsupported_ops_listed_at_once_with_source_lines():
    class M(torch.nn.Module):
        def forward(self, x):
            y = torch.special.bessel_j0(x)  # no handler
            return torch.special.i0e(y) + torch.special.bessel_j0(y)

    with pytest.raises(et.UnsupportedOpError) as e:
        et.import_module(M(), (torch.randn(3),))
    msg = str(e.value)
    assert "aten.special_bessel_j0.default" in msg and "aten.special_i0e.default" in msg
    assert "test_models.py" in msg and "bessel_j0(x)" in msg
    assert set(e.value.ops) == {"aten.special_bessel_j0.default", "aten.special_i0e.default"}


def test_data_dependent_control_flow_has_a_hint():
    class M(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x * 2
            return x

    with pytest.raises(et.ExportError, match="torch.where / torch.cond"):
        et.import_module(M(), (torch.randn(3),))


def test_export_hints_match_the_cause():
    """A shape read from values gets the data-dependent hint; an error of the model's own code (a
    missing attribute) gets none (it used to get the data-dependent one)."""
    class Slice(torch.nn.Module):
        def forward(self, x):
            return x[: int(x.sum().item())]

    with pytest.raises(et.ExportError, match="torch.where / torch.cond"):
        et.import_module(Slice(), (torch.ones(3),))

    class Typo(torch.nn.Module):
        def forward(self, x):
            return x + self.bais

    with pytest.raises(et.ExportError, match="AttributeError: .*bais") as e:
        et.import_module(Typo(), (torch.ones(3),))
    assert "torch.cond" not in str(e.value) and "dynamic_axes" not in str(e.value)


def test_exported_program_accepted_and_int64_ids():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(20, 4)

        def forward(self, ids):
            return self.emb(ids).sum(-1)

    torch.manual_seed(7)
    model = M().eval()
    ids = torch.randint(0, 20, (2, 5))
    ds = {"ids": {1: torch.export.Dim("seq")}}
    ep = torch.export.export(model, (ids,), dynamic_shapes=ds, strict=False)
    m = et.import_module(ep)
    assert m.dynamic_axes == {"ids": (None, m.dynamic_axes["ids"][1])} and m.dynamic_axes["ids"][1]
    for n in (5, 9):
        x = torch.randint(0, 20, (2, n))
        np.testing.assert_allclose(np.asarray(m(x.numpy())), model(x).detach().numpy(), atol=1e-6)
    assert m._jitted.cache_info()["compiles"] == 1


def test_grad_through_imported_model_matches_torch_autograd():
    import ember

    torch.manual_seed(8)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.GELU(), torch.nn.LayerNorm(16),
                                torch.nn.Linear(16, 3))
    x = torch.randn(5, 6)
    y = torch.randint(0, 3, (5,))
    m = et.import_module(model, (x,), weights="arguments")

    def loss(params):
        logits = m.fn(params, x.numpy())
        logp = ember.nn.log_softmax(logits, axis=-1)
        return -ember.numpy.mean(ember.numpy.take_along_axis(logp, y.numpy()[:, None], axis=1))

    grads = ember.jit(ember.grad(loss))(m.params)
    ref = torch.nn.functional.cross_entropy(model(x), y)
    ref.backward()
    for name, p in model.named_parameters():
        np.testing.assert_allclose(np.asarray(grads[name]), p.grad.numpy(), atol=1e-5, err_msg=name)


def test_imported_function_under_vmap_and_jit():
    import ember

    torch.manual_seed(9)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.SiLU(), torch.nn.Linear(7, 2)).eval()
    m = et.import_module(model, (torch.randn(3, 5),))
    xs = np.random.default_rng(9).standard_normal((4, 3, 5)).astype(np.float32)
    out = ember.jit(ember.vmap(lambda x: m.fn(m.params, x)))(xs)
    with torch.inference_mode():
        ref = np.stack([model(torch.from_numpy(x)).numpy() for x in xs])
    np.testing.assert_allclose(np.asarray(out), ref, atol=1e-5)


def test_batch_one_example_with_dynamic_axes():
    """torch.export specializes an example size of 1; the importer widens a size-1 named axis to 2
    for the export, so a batch-1 example gives a graph that runs every batch size (1 included)."""
    model, m = models.gpt2(), models.imported_gpt2()
    assert m.dynamic_axes == {"input_ids": ("batch", "seq")}
    g = torch.Generator().manual_seed(7)
    for shape in ((1, 8), (1, 1), (3, 5)):
        x = torch.randint(0, 100, shape, generator=g)
        np.testing.assert_allclose(np.asarray(m(x.numpy())), _logits(model, input_ids=x), atol=1e-4, rtol=0)
    assert m._jitted.cache_info()["compiles"] == 1


def test_gpt2_token_and_position_out_of_range():
    """Issue 32: ids >= the vocabulary, negative ids and a sequence longer than the position table
    gave NaN rows (negatives wrapped); PyTorch raises IndexError, and so does the import, naming the
    input, the table, the index and the bound."""
    import ember

    model = models.gpt2()  # vocabulary 100, 256 positions
    session = ember.InferenceSession(models.imported_gpt2())
    bad = ((np.array([[1, 2, 100]]), "index 100 (at [0, 2] of the index) is out of range for size 100"),
           (np.array([[1, -1, 3]]), "index -1 (at [0, 1] of the index) is out of range for size 100"),
           (np.zeros((1, 257), np.int64), "index 256 (at [0, 256] of the index) is out of range for "
                                          "size 256"))
    for ids, text in bad:
        with pytest.raises(IndexError):
            model(input_ids=torch.from_numpy(ids), use_cache=False)
        with pytest.raises(IndexError) as e:
            session.run({"input_ids": ids})
        assert text in str(e.value) and "aten.embedding" in str(e.value), str(e.value)
    msg = str(pytest.raises(IndexError, session.run, {"input_ids": np.array([[99, 100]])}).value)
    assert "input 'input_ids' indexes the rows of" in msg and ("wte" in msg or "lm_head" in msg), msg
    assert "transformer.wpe.weight" in str(e.value) and "position_ids" in str(e.value), str(e.value)
    ok = np.array([[5, 99, 0, 42]])  # the session still runs after the errors
    np.testing.assert_allclose(session.run({"input_ids": ok})["logits"],
                               _logits(model, input_ids=torch.from_numpy(ok)), atol=1e-4, rtol=0)


def test_batch_one_example_widens_shared_axes_together():
    class Masked(torch.nn.Module):
        def forward(self, x, mask):
            return (x * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)

    x, mask = torch.randn(1, 1, 3), torch.ones(1, 1)
    m = et.import_module(Masked(), (x, mask), dynamic_axes={"x": ("b", "n", None), "mask": ("b", "n")})
    assert m.dynamic_axes == {"x": ("b", "n", None), "mask": ("b", "n")}
    g = torch.Generator().manual_seed(8)
    for b, n in ((1, 1), (2, 4), (1, 3)):
        xb, mb = torch.randn(b, n, 3, generator=g), (torch.rand(b, n, generator=g) > 0.3).float()
        mb[:, 0] = 1
        np.testing.assert_allclose(np.asarray(m(xb.numpy(), mb.numpy())), Masked()(xb, mb).numpy(), rtol=1e-5)


def test_an_axis_the_model_fixes_is_an_error():
    class Fixed(torch.nn.Module):
        def forward(self, x):
            return x.reshape(2, -1) * 2

    with pytest.raises(et.ExportError, match="static|specializ"):
        et.import_module(Fixed(), (torch.randn(1, 4),), dynamic_axes={"x": ("b", None)})


def test_mixture_of_experts_dynamic_seq():
    """A tiny Mixtral (experts routed per token through transformers' grouped matrix product) over a
    dynamic sequence axis, against PyTorch to 1e-4."""
    model = models.mixtral()
    g = torch.Generator().manual_seed(9)
    ids = torch.randint(0, 100, (2, 6), generator=g)
    m = et.import_module(model, (), {"input_ids": ids, "use_cache": False},
                         dynamic_axes={"input_ids": ("batch", "seq")})
    for shape in ((2, 6), (1, 1), (3, 11)):
        x = torch.randint(0, 100, shape, generator=g)
        np.testing.assert_allclose(np.asarray(m(x.numpy())), _logits(model, input_ids=x), atol=1e-4, rtol=0)


def _conv_bn(cin, cout, k, stride):
    conv = torch.nn.Conv2d(cin, cout, k, stride, k // 2, bias=False)
    return torch.nn.Sequential(conv, torch.nn.BatchNorm2d(cout))


class _BasicBlock(torch.nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.a, self.b = _conv_bn(cin, cout, 3, stride), _conv_bn(cout, cout, 3, 1)
        self.down = None if stride == 1 and cin == cout else _conv_bn(cin, cout, 1, stride)

    def forward(self, x):
        y = self.b(torch.relu(self.a(x)))
        return torch.relu(y + (x if self.down is None else self.down(x)))


class _NarrowResNet18(torch.nn.Module):
    """ResNet-18's structure (7x7/2 stem, 3x3/2 max pool, four stages of two basic blocks, global
    mean, linear head) at an eighth of its widths."""

    def __init__(self):
        super().__init__()
        self.stem = _conv_bn(3, 8, 7, 2)
        self.pool = torch.nn.MaxPool2d(3, 2, 1)
        blocks, cin = [], 8
        for i, width in enumerate((8, 16, 32, 64)):
            for j in range(2):
                blocks.append(_BasicBlock(cin, width, 2 if i and not j else 1))
                cin = width
        self.blocks = torch.nn.Sequential(*blocks)
        self.fc = torch.nn.Linear(64, 10)

    def forward(self, x):
        return self.fc(self.blocks(self.pool(torch.relu(self.stem(x)))).mean((2, 3)))


def test_resnet18_shape_dynamic_batch_and_image_size():
    """One compile serves three batch sizes and image sizes (odd ones included); the generated C
    stays small (the symbolic sizes are computed once, not spelled out in every index)."""
    torch.manual_seed(7)
    model = _NarrowResNet18()
    for mod in model.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.5, 0.5)
            mod.running_var.uniform_(0.5, 2.0)
    model.eval()
    m = et.import_module(model, (torch.randn(2, 3, 64, 64),), dynamic_axes={"x": ("batch", None, "h", "w")})
    for b, h, w in ((2, 64, 64), (1, 45, 71), (3, 96, 80)):
        x = torch.randn(b, 3, h, w)
        with torch.inference_mode():
            ref = model(x).numpy()
        np.testing.assert_allclose(np.asarray(m(x.numpy())), ref, atol=1e-4)
    assert m._jitted.cache_info()["compiles"] == 1
    low = m._jitted.lower(x.numpy())
    # the convolutions run the native conv step (no im2col: no tap stacks, no products of patches;
    # the one product is the classifier), from one symbolic program
    prims = [e.prim.name for e in low.program.eqns]
    assert prims.count("conv") == 20 and "concatenate" not in prims and prims.count("dot_general") == 1, prims
    assert specialize.symbolic_executable(low.program).fallback_reason is None
    source = low.compile(batch=b, h=h, w=w).as_text()  # the symbolic C
    assert source is not None and len(source) < 1 << 20 and "em_cv_run_" in source
