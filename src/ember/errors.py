"""Exceptions raised by ember.

Every error ember raises for bad input derives from :class:`EmberError`, and each also derives
from the built-in exception a NumPy user would expect (``ValueError``, ``TypeError``), so
existing ``except`` clauses keep working.
"""

from __future__ import annotations


class EmberError(Exception):
    """Base class of all ember errors."""


class ShapeError(EmberError, ValueError, TypeError):
    """Shapes do not agree: the message names the axes (or argument positions) and their sizes.

    Both a ``ValueError`` (NumPy's class for these) and a ``TypeError`` (JAX's, for the shape
    errors of ``lax`` operations, ``dot``, ``reshape``, ...), so either ``except`` clause catches it."""


class BindingError(ShapeError):
    """The sizes a call binds to a program's named axes break one of its shape constraints (the
    message names the binding and the constraint); raised before anything runs."""


class AxisError(ShapeError, IndexError):
    """An axis argument is out of range for the array's rank (as NumPy's ``AxisError``, it is
    both a ``ValueError`` and an ``IndexError``)."""


class DTypeError(EmberError, TypeError):
    """An operation got an unsupported or incompatible dtype."""


class TracerError(EmberError, TypeError):
    """A traced (abstract) value was used where a concrete Python value is needed."""


class ConcretizationTypeError(TracerError):
    """A traced value was used where a concrete one is needed (``float(x)``, a shape, a static
    argument): JAX's ``ConcretizationTypeError``."""


class TracerBoolConversionError(ConcretizationTypeError):
    """``bool()`` of a traced value (a Python ``if``/``while``/``and`` on it): use ``lax.cond``,
    ``jnp.where`` or ``lax.while_loop``. JAX's ``TracerBoolConversionError``."""


class TracerIntegerConversionError(TracerError):
    """A traced value used as a Python integer index (``__index__``: ``some_list[x]``,
    ``range(x)``): JAX's ``TracerIntegerConversionError``."""


class TracerArrayConversionError(TracerError):
    """A traced value converted to a NumPy array (``np.asarray(x)``): JAX's
    ``TracerArrayConversionError``."""


class UnexpectedTracerError(TracerError):
    """A traced value outlived its transformation (saved in a global or a list from inside
    ``jit``/``grad``/``vmap``) and was used afterwards: JAX's ``UnexpectedTracerError``."""


class NonConcreteBooleanIndexError(TracerError, IndexError):
    """Boolean-mask indexing with a traced mask (the result's size would depend on the values):
    JAX's ``NonConcreteBooleanIndexError``."""


class KeyReuseError(EmberError, TypeError):
    """A random key was used twice where fresh keys are required: JAX's ``KeyReuseError``
    (ember has no key-reuse checker; the class exists for ``except`` clauses)."""


class CompileError(EmberError, RuntimeError):
    """The native compiler failed; the message holds its output and the saved source path."""


class ValidationError(EmberError, RuntimeError):
    """A program, schedule or memory plan failed validation."""


class DeletedArrayError(EmberError, RuntimeError):
    """An array was used after ``delete()`` released its buffer."""


__all__ = [
    "AxisError",
    "BindingError",
    "EmberError",
    "ShapeError",
    "DTypeError",
    "TracerError",
    "ConcretizationTypeError",
    "TracerBoolConversionError",
    "TracerIntegerConversionError",
    "TracerArrayConversionError",
    "UnexpectedTracerError",
    "NonConcreteBooleanIndexError",
    "KeyReuseError",
    "CompileError",
    "ValidationError",
    "DeletedArrayError",
    "CheckError",
]


class CheckError(EmberError, RuntimeError):
    """A condition a program asserts at run time does not hold (``ember``'s ``check`` primitive;
    an imported model's ``torch._assert_async``). A ``RuntimeError``, as torch raises for it."""
