"""Small top-level conveniences: ``device_put`` and ``block_until_ready``."""

from __future__ import annotations

from typing import Any

from ember._src import tree as tu
from ember._src.numpy.ufuncs import asarray


def device_put(x: Any, device: Any = None) -> Any:
    """Convert every leaf of ``x`` to an ember array on the host (arrays live there).

    A GPU device (``webgpu:0``, ``cuda:0``) is named by ``jit(f, backend=...)``, which copies a call's
    inputs to the device and its outputs back, so ``device_put`` onto one raises
    NotImplementedError saying so."""
    platform = getattr(device, "platform", device)
    if isinstance(platform, str) and platform.split(":")[0] in ("webgpu", "cuda"):
        raise NotImplementedError(f"device_put({device}): device-resident arrays are not implemented yet; "
                                  f"use jit(f, backend={platform.split(':')[0]!r}), which runs on the device "
                                  "and copies inputs and outputs per call")
    if platform not in (None, "cpu"):
        raise ValueError(f"unknown device {device!r}; ember arrays live on 'cpu'")
    return tu.tree_map(asarray, x)


def block_until_ready(x: Any) -> Any:
    """Return ``x``; ember's computations are synchronous (kept for JAX compatibility)."""
    return x
