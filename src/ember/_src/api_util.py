"""Small top-level conveniences: ``device_put`` and ``block_until_ready``."""

from __future__ import annotations

from typing import Any

from ember._src import tree as tu
from ember._src.numpy.ufuncs import asarray


def device_put(x: Any, device: Any = None) -> Any:
    """Convert every leaf of ``x`` to an ember array on the host (the only device today)."""
    if device not in (None, "cpu"):
        raise ValueError(f"unknown device {device!r}; ember arrays live on 'cpu'")
    return tu.tree_map(asarray, x)


def block_until_ready(x: Any) -> Any:
    """Return ``x``; ember's computations are synchronous (kept for JAX compatibility)."""
    return x
