"""A fuzz of small random torch modules: imported and run on two batch sizes against torch eager."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the fuzz needs torch")

import ember.torch as et  # noqa: E402


class _Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


class _Residual(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.lin = torch.nn.Linear(d, d)

    def forward(self, x):
        return x + torch.tanh(self.lin(x))


def _put_column(x):
    y = x.clone()
    y[:, 0] = y[:, -1] * 2.0
    y[:, torch.tensor([-1])] += 1.0
    return y


def _pad(x, widths, mode):
    return torch.nn.functional.pad(x[:, None, :], widths, mode=mode)


def _resample(x, d):
    """Nearest upsampling of the features, then bilinear or bicubic back to ``d`` (x as
    [batch, 1, 1, d])."""
    f = torch.nn.functional
    up = f.interpolate(x[:, None, None, :], scale_factor=2.0, mode="nearest")
    mode = "bicubic" if d % 3 == 0 else "bilinear"
    return f.interpolate(up, size=(1, d), mode=mode, align_corners=d % 2 == 0)[:, 0, 0, :]


def _layer(rng, d):
    """A random shape-preserving layer on [batch, d]."""
    choices = [
        lambda: torch.nn.Linear(d, d), lambda: torch.nn.ReLU(), lambda: torch.nn.GELU(),
        lambda: torch.nn.GELU(approximate="tanh"), lambda: torch.nn.SiLU(), lambda: torch.nn.Sigmoid(),
        lambda: torch.nn.LayerNorm(d), lambda: torch.nn.Softmax(dim=-1), lambda: torch.nn.Dropout(0.3),
        lambda: torch.nn.Hardtanh(-0.5, 0.5), lambda: torch.nn.LeakyReLU(0.1), lambda: torch.nn.ELU(),
        lambda: torch.nn.Softplus(2.0), lambda: torch.nn.Hardswish(), lambda: torch.nn.Hardsigmoid(),
        lambda: _Residual(d),
        lambda: _Fn(lambda x: x - x.mean(-1, keepdim=True)),
        lambda: _Fn(lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)),
        lambda: _Fn(lambda x: torch.cumsum(x, dim=-1) / d),
        lambda: _Fn(lambda x: torch.where(x > 0, x, 0.5 * x)),
        lambda: _Fn(lambda x: torch.cat([x[:, 1:], x[:, :1]], dim=-1)),
        lambda: _Fn(lambda x: x.max(dim=-1, keepdim=True).values + x),
        lambda: _Fn(lambda x: (x.unsqueeze(1) * x.unsqueeze(2)).sum(1) / d),
        lambda: _Fn(lambda x: torch.clamp(x, min=-1.0) * 0.9),
        # ordering, scatters, gathers, padding and resampling
        lambda: _Fn(lambda x: torch.sort(x, dim=-1, descending=True).values),
        lambda: _Fn(lambda x: x - torch.topk(x, min(2, d), dim=-1).values[:, -1:]),
        lambda: _Fn(lambda x: torch.gather(x, -1, torch.argsort(x, dim=-1))),
        lambda: _Fn(lambda x: torch.zeros_like(x).scatter(-1, torch.argsort(x, dim=-1), x * 2)),
        lambda: _Fn(lambda x: x.scatter_add(-1, (torch.arange(d) // 2).expand_as(x), x)),
        lambda: _Fn(lambda x: x.scatter_reduce(-1, (torch.arange(d) // 2).expand_as(x), x * 2, "amax")),
        lambda: _Fn(lambda x: torch.flip(x, (-1,)) + torch.roll(x, 1, -1)),
        lambda: _Fn(lambda x: torch.index_select(x, -1, torch.arange(d - 1, -1, -1))),
        lambda: _Fn(lambda x: torch.cumprod(torch.tanh(x) * 0.5 + 1.0, dim=-1)),
        lambda: _Fn(lambda x: x + torch.histc(x, bins=d, min=-2.0, max=2.0)),
        lambda: _Fn(_put_column),
        lambda: torch.nn.GroupNorm(1, d) if d > 1 else torch.nn.Identity(),  # torch refuses 1 value a group
        lambda: _Fn(lambda x: _pad(x, (1, 2), "replicate")[:, 0, 2:-1]),
        lambda: _Fn(lambda x: _pad(x, (min(1, d - 1), 0), "reflect")[:, 0, :d]),
        lambda: _Fn(lambda x: _resample(x, d)),
    ]
    return choices[rng.integers(len(choices))]()


@pytest.mark.parametrize("seed", range(16))
def test_random_module(seed):
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    d = int(rng.integers(1, 9))
    model = torch.nn.Sequential(*[_layer(rng, d) for _ in range(int(rng.integers(2, 7)))]).eval()
    x = torch.randn(3, d)
    m = et.import_module(model, (x,), dynamic_axes={"input": ("batch", None)})
    for b in (3, 1, 5):
        xb = torch.randn(b, d)
        with torch.inference_mode():
            ref = model(xb).numpy()
        np.testing.assert_allclose(np.asarray(m(xb.numpy())), ref, atol=2e-5, rtol=1e-4, err_msg=str(model))
