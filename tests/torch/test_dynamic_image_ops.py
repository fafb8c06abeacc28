"""Image ops over named dynamic axes (height and width): upsampling, adaptive average pooling and
``ceil_mode`` pooling, each against PyTorch at several sizes with one compile. Before, each raised
at import (their indices, bins or windows were computed from static sizes)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch importer tests need torch")
F = torch.nn.functional

import ember.torch as et  # noqa: E402
from ember.errors import ShapeError  # noqa: E402

SIZES = ((2, 20, 17), (1, 9, 8), (2, 31, 6), (1, 4, 5), (1, 2, 3))


class Op(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x, y):
        return self.fn(x, y)


def _check(fn, sizes=SIZES, other=lambda h, w: (h + 3, 2 * w - 1)):
    """``fn(x, y)`` imported with x of (b, 3, h, w) and y of (b, 2, H, W), all dynamic."""
    m = Op(fn)
    x0, y0 = torch.randn(2, 3, 20, 17), torch.randn(2, 2, 23, 33)
    im = et.import_module(m, (x0, y0), dynamic_axes={"x": ("b", None, "h", "w"), "y": ("b", None, "H", "W")})
    g = torch.Generator().manual_seed(0)
    for b, h, w in sizes:
        x, y = torch.randn(b, 3, h, w, generator=g), torch.randn(b, 2, *other(h, w), generator=g)
        want = m(x, y).numpy()
        got = np.asarray(im(x.numpy(), y.numpy()))
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * max(1.0, np.abs(want).max()))
    assert im._jitted.cache_info()["compiles"] == 1
    return im


@pytest.mark.parametrize("mode,align", [("bilinear", False), ("bilinear", True), ("nearest", None),
                                        ("bicubic", False), ("bicubic", True)])
def test_upsample_to_another_inputs_symbolic_size(mode, align):
    kw = {} if align is None else {"align_corners": align}
    _check(lambda x, y: F.interpolate(x, size=y.shape[2:], mode=mode, **kw))
    # sizes below the input's (downsampling) and of one row
    _check(lambda x, y: F.interpolate(x, size=y.shape[2:], mode=mode, **kw),
           other=lambda h, w: (1, max(1, w // 3)))


@pytest.mark.parametrize("mode,align,factor",
                         [("bilinear", False, 2), ("bilinear", True, 3), ("nearest", None, 2),
                          ("bicubic", False, 2), ("bicubic", True, 3)])
def test_upsample_by_an_integer_factor(mode, align, factor):
    kw = {} if align is None else {"align_corners": align}
    _check(lambda x, y: F.interpolate(x, scale_factor=factor, mode=mode, **kw))


@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("size", [(7, 5), (20, 40), (1, 3), (9, 9)])
def test_bicubic_at_static_sizes(size, align):
    """Bicubic upsampling at static sizes (its taps and weights are constants): DINOv2 resizes its
    8 x 8 position grid to the patch grid this way. Up, down, to one row, and the identity size."""
    m = Op(lambda x, y: F.interpolate(x, size=size, mode="bicubic", align_corners=align))
    x = torch.randn(2, 3, 8, 9)
    im = et.import_module(m, (x, x))
    want = m(x, x).numpy()  # (torch's float32 result is within about 3e-6 of its float64 one)
    np.testing.assert_allclose(np.asarray(im(x.numpy(), x.numpy())), want, rtol=0,
                               atol=1e-5 * np.abs(want).max())


def test_upsample_a_dynamic_axis_by_a_fraction_names_it():
    """torch records the size as ``TruncToInt(1.5 * ToFloat(h))``, which is not a size ember names."""
    from ember._src.torch_import.export import ExportError
    with pytest.raises(ExportError, match="unsupported size expression TruncToInt"):
        _check(lambda x, y: F.interpolate(x, scale_factor=1.5, mode="nearest"))


@pytest.mark.parametrize("out", [(2, 3), (6, 1), (4, 4), (1, 5)])
def test_adaptive_avg_pool(out):
    """Bins of a symbolic axis, overlapping where the axis is shorter than the bins (2 -> 6)."""
    _check(lambda x, y: F.adaptive_avg_pool2d(x, out))


@pytest.mark.parametrize("pool", [
    lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True),
    lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True),
    lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
    lambda x: F.avg_pool2d(x, 2, 2, 0, ceil_mode=True),
    lambda x: F.max_pool2d(x, 3, 2, 0, ceil_mode=True),
    lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, divisor_override=4),
])
def test_ceil_mode_pooling(pool):
    """A window spanning stride + padding or more: torch never drops the last window, so the
    output size is ``(n + 2 p - k + s - 1) // s + 1`` at every size."""
    _check(lambda x, y: pool(x), sizes=SIZES[:4])


def test_ceil_mode_with_a_short_window_names_the_axis():
    with pytest.raises(NotImplementedError, match="window of 1 shorter than stride 2"):
        _check(lambda x, y: F.max_pool2d(x, 1, 2, 0, ceil_mode=True))


@pytest.mark.parametrize("pool", [
    lambda x: F.avg_pool2d(x, 100, ceil_mode=True),
    lambda x: F.max_pool2d(x, 100, ceil_mode=True),
    lambda x: F.avg_pool2d(x, 100, padding=3, ceil_mode=True, count_include_pad=False),
    lambda x: F.avg_pool2d(x, 100, padding=3, ceil_mode=True),
    lambda x: F.avg_pool2d(x, 100, ceil_mode=True, divisor_override=7),
])
def test_one_oversized_window_then_flatten(pool):
    """transformers' EfficientNet pools its map with a window longer than the map, then flattens:
    imported as one window over the map, its size restated as torch's ``(n - 1) // 100 + 1``. Up to
    ``100 - 2 padding`` rows that is 1 and matches torch; past it the call raises: torch's export
    range for the axis ends there, and its guard asks for a one-pixel pooled map."""
    im = _check(lambda x, y: pool(x).flatten(1), sizes=SIZES + ((1, 94, 1), (2, 94, 94)))
    big = np.zeros((1, 3, 101, 5), np.float32), np.zeros((1, 2, 104, 9), np.float32)
    for call in (im, im.jit()):  # (torch's range for h ends at 100 - 2 padding, or its guard fails)
        with pytest.raises(ShapeError, match="h: 101.*(torch's export assumed|past (100|94), the largest)"):
            call(*big)


def test_a_view_torch_guarded_raises_where_its_sizes_differ():
    """``y.view(b, -1)`` after the one-window pool: the element counts are equal only while one
    window covers the map; the view's ``ShapeError`` names the op."""
    im = _check(lambda x, y: F.avg_pool2d(x, 100, ceil_mode=True).view(x.shape[0], -1), sizes=SIZES[:2])
    with pytest.raises(ShapeError, match="ensure_shape"):
        im.jit()(np.zeros((1, 3, 150, 5), np.float32), np.zeros((1, 2, 153, 9), np.float32))


@pytest.mark.parametrize("pool", [
    lambda x: F.max_pool2d(x, 2),
    lambda x: F.avg_pool2d(x, 3, 2),
    lambda x: F.max_pool2d(x, 2, 1, dilation=2),
    lambda x: F.avg_pool2d(x, (1, 3), (1, 2)),
])
def test_pooling_without_padding(pool):
    """A window without padding over a dynamic axis raised ``cannot decide h >= 2``: the window
    count is now ``(n - span) // stride + 1``, as a convolution's, and a size the window does not
    fit raises at the call (as torch raises)."""
    im = _check(lambda x, y: pool(x), sizes=SIZES[:4])
    small = np.zeros((1, 3, 1, 1), np.float32), np.zeros((1, 2, 4, 1), np.float32)
    with pytest.raises(ShapeError, match="binding"):
        im(*small)


def test_padding_to_a_multiple_of_a_window():
    """Swin's ``maybe_pad``: ``(4 - w % 4) % 4`` columns of padding (``operator.mod`` on a size,
    which had no handler)."""
    _check(lambda x, y: F.pad(x, (0, (4 - x.shape[3] % 4) % 4)) * 2, sizes=SIZES[:4])


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("dynamic", [True, False])
def test_nonfinite_values_stay_where_torch_puts_them(value, dynamic):
    """A NaN or infinity stays in its own adaptive bins (the bins were a product with 0/1 weights,
    which spread it to every bin: 0 * nan) and bilinear weights sum as torch's (``a + (b - a) t``
    turned an infinity into NaN)."""
    def fn(x, y):
        return (F.adaptive_avg_pool2d(x, (3, 2)), F.interpolate(x, scale_factor=2, mode="bilinear"),
                F.interpolate(x, size=(7, 5), mode="bilinear", align_corners=True))
    m = Op(fn)
    x0, y0 = torch.randn(2, 3, 8, 6), torch.randn(2, 2, 4, 4)
    axes = {"x": ("b", None, "h", "w"), "y": ("b", None, "H", "W")} if dynamic else None
    im = et.import_module(m, (x0, y0), dynamic_axes=axes)
    for shape in ((2, 3, 8, 6), (1, 3, 5, 7)) if dynamic else ((2, 3, 8, 6),):
        x = torch.randn(*shape)
        x[0, 0, 1, 2] = value
        y = torch.randn(shape[0], 2, 4, 4)
        for got, want in zip(im(x.numpy(), y.numpy()), m(x, y)):
            want = want.numpy()
            assert np.isfinite(want).any() and not np.isfinite(want).all()
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fn", [lambda x: F.max_pool2d(x, 2, 1, dilation=3),
                                lambda x: F.avg_pool2d(x, 3, 1),
                                lambda x: F.conv2d(x, torch.ones(4, 3, 3, 3), stride=1)])
def test_an_input_smaller_than_the_window_raises_as_torch_does(fn):
    """Where no window fits a dynamic axis the window count is 0: torch raises ("Output size is too
    small"), and so does the import (a constraint of the program per binding) instead of returning
    an empty array. Sizes where a window fits match torch."""
    im = _check(lambda x, y: fn(x), sizes=((2, 20, 17), (1, 4, 5)))
    small = np.zeros((1, 3, 2, 5), np.float32), np.zeros((1, 2, 5, 9), np.float32)
    with pytest.raises(RuntimeError):
        fn(torch.from_numpy(small[0]))
    with pytest.raises(ShapeError, match="no window fits axis 2 of the input, which torch rejects|"
                                         "size -3 \\+ h would be -1"):  # (a convolution's own check)
        im(*small)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_float64_images_use_float64_coordinates(mode):
    """torch computes a float64 image's source coordinates and weights in float64 (its opmath
    type); with x64 on the import does too, static and dynamic sizes, NaN kept in place: within
    1e-12 of torch (float32 coordinates were 1e-6 off)."""
    from ember._src import flags
    with flags.override("jax_enable_x64", True):
        fn = lambda x, y: F.interpolate(x, size=y.shape[2:], mode=mode, align_corners=False)  # noqa: E731
        m = Op(fn)
        x0, y0 = torch.randn(2, 3, 6, 5, dtype=torch.float64), torch.zeros(2, 1, 9, 11, dtype=torch.float64)
        axes = {"x": ("b", None, "h", "w"), "y": ("b", None, "H", "W")}
        dyn = et.import_module(m, (x0, y0), dynamic_axes=axes)
        static = et.import_module(m, (x0, y0))
        for im, sizes in ((dyn, ((6, 5, 9, 11), (3, 4, 2, 7))), (static, ((6, 5, 9, 11),))):
            for h, w, hh, ww in sizes:
                x = torch.randn(2, 3, h, w, dtype=torch.float64)
                x[0, 0, 1, 1] = float("nan")
                y = torch.zeros(2, 1, hh, ww, dtype=torch.float64)
                got, want = np.asarray(im(x.numpy(), y.numpy())), m(x, y).numpy()
                assert got.dtype == np.float64
                np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)  # (NaN where torch has NaN)
