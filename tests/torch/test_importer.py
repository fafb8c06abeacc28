"""ATen handlers against PyTorch (small modules exported and imported one by one), the errors the
importer gives, ``weights="arguments"`` with ``ember.grad`` against torch autograd, and an
``ExportedProgram`` given directly."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the PyTorch importer needs torch")

import ember  # noqa: E402
import ember.torch as et  # noqa: E402
from ember._src.torch_import.ops import HANDLERS  # noqa: E402

F = torch.nn.functional


class _Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def _r(*shape, dtype=torch.float32):
    g = torch.Generator().manual_seed(sum(shape) + len(shape))
    if dtype == torch.bool:
        return torch.rand(*shape, generator=g) > 0.5
    if dtype in (torch.int64, torch.int32):
        return torch.randint(0, 5, shape, generator=g, dtype=dtype)
    return torch.randn(*shape, generator=g, dtype=dtype)


CASES = {
    "arith": (lambda a, b: (a + 2 * b - a * b / (b.abs() + 1)) ** 2, [_r(3, 4), _r(4)]),
    "unary": (lambda a: torch.exp(-a.abs()) + torch.tanh(a) + torch.sigmoid(a) + torch.sqrt(a.abs() + 1)
              + torch.rsqrt(a.abs() + 1) + torch.sin(a) * torch.cos(a) + torch.erf(a), [_r(5, 3)]),
    "activations": (lambda a: F.gelu(a) + F.gelu(a, approximate="tanh") + F.silu(a) + F.relu(a), [_r(4, 6)]),
    "compare_where": (lambda a, b: torch.where((a > b) & (a != 0) | (b <= -1), a, b.clamp(-0.5, 0.5)),
                      [_r(3, 4), _r(3, 4)]),
    "reductions": (lambda a: a.sum(1) + a.mean(1) + a.amax(1) - a.amin(1) + a.sum(), [_r(3, 7)]),
    "softmax_logsoftmax": (lambda a: F.softmax(a, -1) + F.log_softmax(a, 0), [_r(4, 6)]),
    "layer_norm": (lambda a, w, b: F.layer_norm(a, (6,), w, b, 1e-5), [_r(2, 3, 6), _r(6), _r(6)]),
    "shapes": (lambda a: a.view(4, 3).t().reshape(2, 6).unsqueeze(0).permute(2, 0, 1).squeeze(1)
               .transpose(0, 1), [_r(3, 4)]),
    "expand_slice_cat": (lambda a: torch.cat([a.expand(3, 4, 5)[:, 1:3], a.expand(3, 4, 5)[:, :1]], 1)
                         [..., ::2], [_r(4, 5)]),
    "split": (lambda a: torch.stack(list(a.split([1, 3], dim=1))[::-1][0].split(2, dim=0)[:1], 0),
              [_r(4, 4)]),
    "index_gather": (lambda a, i: a[i, 1:] + torch.gather(a, 1, (i % 4)[:, None].expand(-1, 3)).sum(),
                     [_r(5, 4), torch.tensor([4, 0, 2, 2, 1])]),
    "cumsum_arange": (lambda a: a.cumsum(0) + torch.arange(a.shape[0])[:, None] * 1.5, [_r(6, 2)]),
    "matmul": (lambda a, b, c: torch.addmm(c, a, b) + (a @ b) + torch.bmm(a[None], b[None])[0],
               [_r(3, 4), _r(4, 5), _r(5)]),
    "linear": (lambda a, w, b: F.linear(a, w, b), [_r(2, 3, 4), _r(5, 4), _r(5)]),
    "embedding": (lambda w, i: F.embedding(i, w), [_r(10, 3), torch.tensor([[1, 9, 0], [3, 3, 2]])]),
    "sdpa_causal": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                    [_r(1, 2, 5, 4), _r(1, 2, 5, 4), _r(1, 2, 5, 4)]),
    "sdpa_mask_gqa": (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m,
                                                                          enable_gqa=True),
                      [_r(1, 4, 3, 4), _r(1, 2, 6, 4), _r(1, 2, 6, 4),
                       _r(3, 6, dtype=torch.bool) | (torch.arange(6) == 0)]),
    "conv_pools": (lambda x, w: F.avg_pool2d(F.max_pool2d(F.conv2d(x, w, padding=1, stride=1), 2), 2),
                   [_r(2, 3, 8, 8), _r(4, 3, 3, 3)]),
    "dtypes": (lambda a: (a.to(torch.float64) * 2).to(torch.float32) + a.long().float(), [_r(3, 3)]),
    "int64_ids": (lambda i: (i * 3 + 1) // 2 % 5, [torch.tensor([[1, 2, 3], [4, 5, 6]], dtype=torch.int64)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_handlers_against_torch(name):
    fn, xs = CASES[name]
    with torch.no_grad():
        want = fn(*xs)
    im = et.import_module(_Fn(fn), tuple(xs))
    got = np.asarray(im(*[x.numpy() for x in xs]))
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)
    assert got.dtype == want.numpy().dtype


def test_unsupported_ops_listed_with_source_lines():
    def bad(a):
        return torch.special.bessel_j0(a) + torch.special.i0(a)  # two ops without handlers
    with pytest.raises(et.UnsupportedOpError) as e:
        et.import_module(_Fn(bad), (_r(3),))
    text = str(e.value)
    assert "2 ATen op(s)" in text and "bessel_j0" in text and "i0" in text
    # the user's source line (torch records frames down to the module's forward)
    assert "test_importer.py" in text and "in forward" in text


def test_data_dependent_control_flow_hint():
    def branchy(a):
        if a.sum() > 0:
            return a * 2
        return a
    with pytest.raises(Exception, match="control flow that depends on tensor values|data-dependent|"
                                        "Could not guard"):
        et.import_module(_Fn(branchy), (_r(3),))


def test_grad_through_imported_model_matches_autograd():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    x, y = _r(16, 4), _r(16, 1)
    im = et.import_module(net, (x,), weights="arguments")

    def loss(params, xb, yb):
        return ember.numpy.mean((im.fn(params, xb) - yb) ** 2)

    grads = ember.grad(loss)(im.params, x.numpy(), y.numpy())
    net.zero_grad()
    torch.mean((net(x) - y) ** 2).backward()
    for name, p in net.named_parameters():
        np.testing.assert_allclose(np.asarray(grads[name]), p.grad.numpy(), rtol=1e-5, atol=1e-6)
    # and one SGD step under jit
    step = ember.jit(lambda p, xb, yb: ember.tree.map(lambda w, g: w - 0.1 * g, p,
                                                      ember.grad(loss)(p, xb, yb)))
    new = step(im.params, x.numpy(), y.numpy())
    assert float(loss(new, x.numpy(), y.numpy())) < float(loss(im.params, x.numpy(), y.numpy()))


def test_exported_program_accepted():
    net = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU())
    x = _r(4, 3)
    ep = torch.export.export(net, (x,))
    im = et.import_module(ep)
    with torch.no_grad():
        np.testing.assert_allclose(np.asarray(im(x.numpy())), net(x).numpy(), rtol=1e-6, atol=1e-6)


def test_every_handler_has_a_description():
    assert len(HANDLERS) > 80
    assert all(h.doc for h in HANDLERS.values())
    names = dict(et.supported_ops())
    assert names["aten.addmm.default"] == HANDLERS["aten.addmm.default"].doc
