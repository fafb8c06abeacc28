"""``ember.optim``: optax-style optimizers (gradient transformations), schedules and clipping."""

from ember._src.compat import optim as _optim
from ember._src.compat import schedules as _schedules
from ember._src.compat.optim import *  # noqa: F403
from ember._src.compat.schedules import *  # noqa: F403

__all__ = sorted(_optim.__all__ + _schedules.__all__)
