"""``ember.optim``: optax-style optimizers (gradient transformations), schedules, clipping, wrappers
(``inject_hyperparams``, ``multi_transform``, ...) and losses."""

from ember._src.compat import losses as _losses
from ember._src.compat import optim as _optim
from ember._src.compat import optim_wrappers as _wrappers
from ember._src.compat import schedules as _schedules
from ember._src.compat.losses import *  # noqa: F403
from ember._src.compat.optim import *  # noqa: F403
from ember._src.compat.optim_wrappers import *  # noqa: F403
from ember._src.compat.schedules import *  # noqa: F403

__all__ = sorted(_optim.__all__ + _schedules.__all__ + _wrappers.__all__ + _losses.__all__)
