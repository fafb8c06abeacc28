"""``ember.fft``: NumPy's discrete Fourier transforms over the ``fft`` primitive.

Every transform takes ``n``/``s`` (crop or zero-pad to that length), ``axis``/``axes`` and
``norm`` (``"backward"`` (default), ``"ortho"`` or ``"forward"``) with NumPy's meaning. Results
keep single precision for float32/complex64 input (NumPy would return double precision);
integer input is transformed in complex64/float32. Implemented in ``ember._src.numpy.fft_functions``.
"""

from ember._src.numpy.fft_functions import (
    fft,
    fft2,
    fftfreq,
    fftn,
    fftshift,
    hfft,
    ifft,
    ifft2,
    ifftn,
    ifftshift,
    ihfft,
    irfft,
    irfft2,
    irfftn,
    rfft,
    rfft2,
    rfftfreq,
    rfftn,
)

__all__ = ["fft", "fft2", "fftfreq", "fftn", "fftshift", "hfft", "ifft", "ifft2", "ifftn",
           "ifftshift", "ihfft", "irfft", "irfft2", "irfftn", "rfft", "rfft2", "rfftfreq", "rfftn"]
