"""Small top-level conveniences: ``device_put``, ``device_get`` and ``block_until_ready``."""

from __future__ import annotations

from typing import Any

import numpy as np

from ember._src import devices
from ember._src import tree as tu
from ember._src.array import Array
from ember._src.numpy.ufuncs import asarray


def device_put(x: Any, device: Any = None) -> Any:
    """Every leaf of ``x`` as an ember array on ``device``.

    ``None`` or ``"cpu"``: on the host (a device array is copied back); a GPU device
    (``"webgpu:0"``, ``"cuda:0"``, or an element of ``ember.devices("webgpu")``): copied into a
    device buffer, an array that stays there (``x.device``) until ``np.asarray``, ``device_get`` or
    printing copies it back. A device that cannot run here is a RuntimeError naming what to
    install."""
    dev = devices.parse_device(device)
    if dev is None or dev.platform == "cpu":
        return tu.tree_map(_host, x)
    target = devices.platform(dev)

    def one(a: Any) -> Any:
        if devices.on_device(a) == dev:
            return a
        h = asarray(_host(a))
        return target.put(np.asarray(h), h.weak_type)
    return tu.tree_map(one, x)


def _host(a: Any) -> Any:
    if devices.on_device(a) is not None:
        return Array(a.value, a.weak_type)
    return asarray(a)


def device_get(x: Any) -> Any:
    """Every array leaf of ``x`` as a NumPy array on the host (device arrays copied back; JAX's
    ``device_get``); other leaves unchanged."""
    return tu.tree_map(lambda a: np.asarray(a) if hasattr(a, "__array__") else a, x)


def block_until_ready(x: Any) -> Any:
    """Wait until every device array leaf of ``x`` is computed; returns ``x`` (host computations
    are synchronous)."""
    for a in tu.leaves(x):
        if devices.on_device(a) is not None:
            a.block_until_ready()
    return x
