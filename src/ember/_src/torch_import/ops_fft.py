"""ATen handlers of the Fourier transforms and the complex views around them: ``_fft_r2c``,
``_fft_c2r``, ``_fft_c2c`` (what ``torch.fft.*`` exports as) on ``ember.numpy.fft``, and
``view_as_real``/``view_as_complex`` (``.real``/``.imag`` of a complex tensor export as a
``view_as_real`` and a ``select``). torch's ``normalization`` code scales a transform by nothing
(0), ``1/sqrt(n)`` (1) or ``1/n`` (2), whichever its direction."""

from __future__ import annotations

import ember.numpy as jnp
from ember._src.torch_import.ops import _dims, handler

# normalization code -> numpy's ``norm`` for a forward and for an inverse transform
_FORWARD = {0: "backward", 1: "ortho", 2: "forward"}
_INVERSE = {0: "forward", 1: "ortho", 2: "backward"}


def _fftn(x, dim, normalization: int, forward: bool, onesided: bool = False):
    axes = _dims(dim, x.ndim)
    if onesided:
        return jnp.fft.rfftn(x, axes=axes, norm=_FORWARD[normalization])
    fn, norms = (jnp.fft.fftn, _FORWARD) if forward else (jnp.fft.ifftn, _INVERSE)
    return fn(x, axes=axes, norm=norms[normalization])


@handler("aten._fft_r2c.default", doc="real-to-complex FFT over dims (onesided: the halved last dim)")
def _fft_r2c(ctx, x, dim, normalization, onesided):
    return _fftn(x, dim, normalization, True, onesided)


@handler("aten._fft_c2r.default", doc="complex-to-real inverse FFT over dims (last dim of last_dim_size)")
def _fft_c2r(ctx, x, dim, normalization, last_dim_size):
    axes = _dims(dim, x.ndim)
    sizes = [x.shape[a] for a in axes[:-1]] + [last_dim_size]
    return jnp.fft.irfftn(x, s=sizes, axes=axes, norm=_INVERSE[normalization])


@handler("aten._fft_c2c.default", doc="complex FFT over dims, forward or inverse")
def _fft_c2c(ctx, x, dim, normalization, forward):
    return _fftn(x, dim, normalization, forward)


@handler("aten.view_as_real.default", doc="a complex tensor as (real, imaginary) pairs in a last dim of 2")
def _view_as_real(ctx, x):
    return jnp.stack([jnp.real(x), jnp.imag(x)], axis=-1)


@handler("aten.view_as_complex.default", doc="a last dim of 2 (real, imaginary) as a complex tensor")
def _view_as_complex(ctx, x):
    return jnp.asarray(x[..., 0] + 1j * x[..., 1]).astype(ctx.dtype)
