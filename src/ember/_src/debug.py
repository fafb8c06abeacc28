"""Debug logging: ``ember.set_debug(level)`` controls the ``logging`` logger named ``"ember"``.

Level 0 (the default) logs warnings only. Level 1 logs compiles (traces), retraces with their
reason, specializations of named dynamic axes and backend fallbacks, at ``logging.DEBUG``.
Level 2 also logs every cache hit (noisy: one line per call).
"""

from __future__ import annotations

import logging
import sys

logger = logging.getLogger("ember")
_level = 0
_handler: logging.Handler | None = None


def set_debug(level: int | bool = 1) -> None:
    """Set ember's debug level (0 off, 1 compiles/retraces/specializations, 2 also cache hits).

    When neither the ``"ember"`` logger nor the root logger has a handler, a stderr handler is
    added so the messages show without configuring :mod:`logging`.
    """
    global _level, _handler
    _level = int(level)
    logger.setLevel(logging.DEBUG if _level > 0 else logging.WARNING)
    if _level > 0 and _handler is None and not logger.handlers and not logging.getLogger().handlers:
        _handler = logging.StreamHandler(sys.stderr)
        _handler.setFormatter(logging.Formatter("ember: %(message)s"))
        logger.addHandler(_handler)


def debug_level() -> int:
    """The level last set with :func:`set_debug`."""
    return _level
