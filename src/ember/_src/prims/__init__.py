"""Primitive families. Importing this package declares every primitive with its rules."""

from ember._src.prims import (  # noqa: F401
    dot,
    elementwise,
    indexing,
    misc,
    movement,
    random_bits,
    reductions,
)
