"""Shared test data for the ember.numpy tests."""

import numpy as np


def make(shape, dtype=np.float32, seed=0):
    """Deterministic random data of ``dtype``: normals, integers in [-50, 50), or random bools."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype) == np.bool_:
        return rng.random(shape) > 0.5
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-50, 50, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)
