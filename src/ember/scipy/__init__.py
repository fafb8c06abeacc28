"""``ember.scipy``: SciPy-style ``special`` functions and ``linalg`` routines."""

from ember.scipy import (
    linalg,
    special,
    stats,  # noqa: E402
)

__all__ = ["linalg", "special"]
__all__ += ["stats"]
from ember.scipy import integrate  # noqa: E402

__all__ += ["integrate"]
from ember.scipy import optimize  # noqa: E402

__all__ += ["optimize"]
from ember.scipy import signal  # noqa: E402

__all__ += ["signal"]
from ember.scipy import ndimage  # noqa: E402

__all__ += ["ndimage"]
