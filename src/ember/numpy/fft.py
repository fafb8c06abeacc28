"""``ember.numpy.fft``: the same transforms as ``ember.fft``."""

from ember.fft import *  # noqa: F403
from ember.fft import __all__  # noqa: F401
