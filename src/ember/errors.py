"""Exceptions raised by ember.

Every error ember raises for bad input derives from :class:`EmberError`, and each also derives
from the built-in exception a NumPy user would expect (``ValueError``, ``TypeError``), so
existing ``except`` clauses keep working.
"""

from __future__ import annotations


class EmberError(Exception):
    """Base class of all ember errors."""


class ShapeError(EmberError, ValueError):
    """Shapes do not agree: the message names the axes (or argument positions) and their sizes."""


class AxisError(ShapeError, IndexError):
    """An axis argument is out of range for the array's rank (as NumPy's ``AxisError``, it is
    both a ``ValueError`` and an ``IndexError``)."""


class DTypeError(EmberError, TypeError):
    """An operation got an unsupported or incompatible dtype."""


class TracerError(EmberError, TypeError):
    """A traced (abstract) value was used where a concrete Python value is needed."""


class CompileError(EmberError, RuntimeError):
    """The native compiler failed; the message holds its output and the saved source path."""


class ValidationError(EmberError, RuntimeError):
    """A program, schedule or memory plan failed validation."""


class DeletedArrayError(EmberError, RuntimeError):
    """An array was used after ``delete()`` released its buffer."""


__all__ = [
    "AxisError",
    "EmberError",
    "ShapeError",
    "DTypeError",
    "TracerError",
    "CompileError",
    "ValidationError",
    "DeletedArrayError",
]
