"""Primitive families. Importing this package declares every primitive with its rules."""

from ember._src.prims import (  # noqa: F401
    attention,
    callback,
    check,
    conv,
    debug_callback,
    dot,
    dynamic_slicing,
    elementwise,
    fft,
    indexing,
    linalg,
    misc,
    movement,
    process,
    ragged,
    random_bits,
    reductions,
    wide_dot,
)
