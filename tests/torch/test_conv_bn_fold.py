"""Eval-mode batch norm folded into constant convolution kernels (the ``fold_batch_norm`` pass), the
residual add absorbed into the product (``absorb_residual``) and bias / ReLU in the GEMM's store
(``scheduling/gemm_epilogue.py``): imported ResNet blocks against torch in eval mode (batch 1 and 3,
a dynamic batch), what the passes produce, a batch norm whose statistics are arguments left
alone, and gradients of a jitted conv + batch norm program with the pass applied."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch importer tests need torch")

import ember  # noqa: E402
import ember.numpy as jnp  # noqa: E402
import ember.torch as et  # noqa: E402
from ember import lax  # noqa: E402
from ember._src.native.rewrite.passes import run_passes  # noqa: E402
from tests.native.conftest import requires_cc  # noqa: E402

pytestmark = requires_cc
nn = torch.nn


def _conv_bn(cin: int, cout: int, k: int, s: int = 1) -> nn.Module:
    return nn.Sequential(nn.Conv2d(cin, cout, k, s, k // 2, bias=False), nn.BatchNorm2d(cout))


class _Bottleneck(nn.Module):
    def __init__(self, cin: int, width: int, s: int):
        super().__init__()
        self.a, self.b = _conv_bn(cin, width, 1), _conv_bn(width, width, 3, s)
        self.c = _conv_bn(width, 4 * width, 1)
        self.down = _conv_bn(cin, 4 * width, 1, s) if s != 1 or cin != 4 * width else None

    def forward(self, x):
        y = self.c(torch.relu(self.b(torch.relu(self.a(x)))))
        return torch.relu(y + (x if self.down is None else self.down(x)))


class _Net(nn.Module):
    """A stem, a bottleneck with an identity residual, one with a strided downsample, a 1x1 head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 1, 1), nn.BatchNorm2d(32))  # a conv bias too
        self.b1, self.b2, self.head = _Bottleneck(32, 8, 1), _Bottleneck(32, 16, 2), _conv_bn(64, 8, 1)

    def forward(self, x):
        return self.head(self.b2(self.b1(torch.relu(self.stem(x)))))


def _eval(model: nn.Module, seed: int) -> nn.Module:
    """``model`` in eval mode with non-trivial statistics and affine parameters."""
    g = torch.Generator().manual_seed(seed)
    for mod in model.modules():
        if isinstance(mod, nn.BatchNorm2d):
            with torch.no_grad():
                mod.running_mean.copy_(torch.rand(mod.num_features, generator=g) - 0.5)
                mod.running_var.copy_(torch.rand(mod.num_features, generator=g) * 1.5 + 0.5)
                mod.weight.copy_(torch.rand(mod.num_features, generator=g) + 0.5)
                mod.bias.copy_(torch.rand(mod.num_features, generator=g) - 0.5)
    return model.eval()


def _check(got, want) -> None:
    got = np.asarray(got)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


def _steps(sess: ember.InferenceSession, x: np.ndarray):
    return sess._jit.lower({}, x).executable.schedule.steps


@pytest.mark.parametrize("batch", [1, 3])
def test_conv_bn_relu_block(batch):
    torch.manual_seed(0)
    model = _eval(nn.Sequential(_conv_bn(8, 16, 1), nn.ReLU(), _conv_bn(16, 16, 1), nn.ReLU(),
                                _conv_bn(16, 8, 1)), 1)
    x = torch.randn(batch, 8, 7, 6)
    sess = ember.InferenceSession(et.import_module(model, kwargs={"input": x}))
    with torch.inference_mode():
        want = model(x).numpy()
    _check(sess.run({"input": x.numpy()})["output"], want)
    steps = _steps(sess, x.numpy())
    # the middle convolution is a product whose store adds the folded shift and applies the ReLU
    assert any(s.kind == "gemm" and s.epilogue is not None and s.epilogue.bias is not None and s.epilogue.relu
               for s in steps), [s.kind for s in steps]
    assert not any(e.prim.name == "sub" for s in steps for e in s.eqns)  # no (x - mean) left


@pytest.mark.parametrize("batch", [1, 3])
def test_bottlenecks_with_residual_adds(batch):
    torch.manual_seed(1)
    model = _eval(_Net(), 2)
    x = torch.randn(batch, 3, 10, 10)
    sess = ember.InferenceSession(et.import_module(model, kwargs={"x": x}))
    with torch.inference_mode():
        want = model(x).numpy()
    _check(next(iter(sess.run({"x": x.numpy()}).values())), want)
    steps = _steps(sess, x.numpy())
    residual = [s for s in steps if s.kind == "gemm" and s.epilogue is not None and len(s.eqns[0].inputs) == 3
                and s.eqns[0].params["beta"] == 1.0 and s.eqns[0].params["c_dims"] == (0, 1)]
    assert residual and all(s.epilogue.relu and s.epilogue.bias is not None for s in residual)


def test_dynamic_batch_one_compile():
    torch.manual_seed(2)
    model = _eval(_Net(), 3)
    m = et.import_module(model, (torch.randn(2, 3, 8, 8),), dynamic_axes={"x": ("batch", None, None, None)})
    for b in (2, 5, 3):
        xb = torch.randn(b, 3, 8, 8)
        with torch.inference_mode():
            want = model(xb).numpy()
        _check(m(xb.numpy()), want)
    assert m._jitted.cache_info()["compiles"] == 1


RNG = np.random.default_rng(7)
W = RNG.standard_normal((6, 4, 3, 3)).astype(np.float32)  # OIHW
GAMMA, BETA = RNG.uniform(0.5, 1.5, 6).astype(np.float32), RNG.uniform(-0.5, 0.5, 6).astype(np.float32)
MEAN, VAR = RNG.uniform(-0.5, 0.5, 6).astype(np.float32), RNG.uniform(0.5, 2.0, 6).astype(np.float32)


def _bn(y, mean, var, gamma, beta, eps=1e-5):
    c = (1, -1, 1, 1)
    return (y - jnp.reshape(mean, c)) * jnp.reshape(lax.rsqrt(var + eps) * gamma, c) + jnp.reshape(beta, c)


def _conv(x):
    return lax.conv_general_dilated(x, jnp.asarray(W), (1, 1), ((1, 1), (1, 1)),
                                    dimension_numbers=("NCHW", "OIHW", "NCHW"))


def _torch_ref(x, mean=MEAN, var=VAR, spatial=None):
    y = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(W), padding=1)
    if spatial is not None:
        y = y * torch.from_numpy(spatial)
    return torch.nn.functional.batch_norm(y, torch.from_numpy(mean), torch.from_numpy(var),
                                          torch.from_numpy(GAMMA), torch.from_numpy(BETA), eps=1e-5)


def _folded(f, *args) -> bool:
    """Whether ``fold_batch_norm`` changes ``f``'s program."""
    program = ember.jit(f, backend="native").lower(*args).executable.original
    p = run_passes(program, ("inline_calls", "simplify", "cse"))
    return run_passes(p, ("fold_batch_norm",)) is not p


def test_constant_statistics_fold():
    x = RNG.standard_normal((2, 4, 5, 5)).astype(np.float32)
    f = lambda x: _bn(_conv(x), MEAN, VAR, GAMMA, BETA)  # noqa: E731
    assert _folded(f, x)
    _check(ember.jit(f, backend="native")(x), _torch_ref(x).numpy())


def test_statistics_passed_in_are_not_folded():
    x = RNG.standard_normal((2, 4, 5, 5)).astype(np.float32)
    f = lambda x, mean, var: _bn(_conv(x), mean, var, GAMMA, BETA)  # noqa: E731
    assert not _folded(f, x, MEAN, VAR)
    _check(ember.jit(f, backend="native")(x, MEAN, VAR), _torch_ref(x).numpy())


def test_kernel_passed_in_or_per_pixel_scale_not_folded():
    x = RNG.standard_normal((1, 4, 5, 5)).astype(np.float32)
    spatial = RNG.uniform(0.5, 1.5, (1, 1, 5, 5)).astype(np.float32)  # varies over H, W: not per channel
    g = lambda x: _bn(_conv(x) * jnp.asarray(spatial), MEAN, VAR, GAMMA, BETA)  # noqa: E731
    assert not _folded(g, x)
    _check(ember.jit(g, backend="native")(x), _torch_ref(x, spatial=spatial).numpy())

    def h(x, w):
        y = lax.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1)),
                                     dimension_numbers=("NCHW", "OIHW", "NCHW"))
        return _bn(y, MEAN, VAR, GAMMA, BETA)
    assert not _folded(h, x, W)
    _check(ember.jit(h, backend="native")(x, W), _torch_ref(x).numpy())


def test_grad_of_jitted_conv_bn():
    """The forward convolution's kernel is folded; the gradient (w.r.t. the input) stays exact."""
    x = RNG.standard_normal((2, 4, 6, 6)).astype(np.float32)

    def loss(x):
        return jnp.sum(jnp.maximum(_bn(_conv(x), MEAN, VAR, GAMMA, BETA), 0.0) ** 2)
    assert _folded(ember.grad(loss), x)
    got = np.asarray(ember.jit(ember.grad(loss), backend="native")(x))
    xt = torch.from_numpy(x).requires_grad_(True)
    (torch.relu(_torch_ref_t(xt)) ** 2).sum().backward()
    want = xt.grad.numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


def _torch_ref_t(xt):
    y = torch.nn.functional.conv2d(xt, torch.from_numpy(W), padding=1)
    return torch.nn.functional.batch_norm(y, torch.from_numpy(MEAN), torch.from_numpy(VAR),
                                          torch.from_numpy(GAMMA), torch.from_numpy(BETA), eps=1e-5)
