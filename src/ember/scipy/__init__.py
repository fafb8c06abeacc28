"""``ember.scipy``: SciPy-style ``special`` functions and ``linalg`` routines."""

from ember.scipy import linalg, special

__all__ = ["linalg", "special"]
