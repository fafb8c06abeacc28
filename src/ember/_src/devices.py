"""Devices: the :class:`Device` value, the default device (``default_device`` and
``$EMBER_DEFAULT_DEVICE``) and the table of device platforms that hold arrays.

A GPU backend registers a *platform* here when it loads (:func:`register_platform`); the layers
below the backends reach device arrays only through this table (``device_put``, ``memory_stats``,
the ``ember.numpy`` constructors under a default device), never by importing the backend.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import warnings
from collections.abc import Iterator
from typing import Any, NamedTuple, Protocol

import numpy as np

DEFAULT_DEVICE_ENV = "EMBER_DEFAULT_DEVICE"


class Device(NamedTuple):
    """A device ember runs on: the host CPU, or the WebGPU / CUDA device of a GPU backend."""

    id: int = 0
    platform: str = "cpu"
    device_kind: str = "cpu"
    process_index: int = 0

    def __repr__(self) -> str:
        kind = {"cpu": "Cpu", "webgpu": "WebGPU", "cuda": "Cuda"}.get(self.platform, self.platform)
        return f"{kind}Device(id={self.id})"

    def __str__(self) -> str:
        return self.platform if self.platform == "cpu" else f"{self.platform}:{self.id}"

    def memory_stats(self) -> dict[str, int]:
        """The device's memory figures (JAX's ``Device.memory_stats()``): see :func:`memory_stats`."""
        return memory_stats(self)


class Platform(Protocol):
    """What a device platform registered with :func:`register_platform` provides."""

    def put(self, value: np.ndarray, weak_type: bool) -> Any: ...
    def memory_stats(self) -> dict[str, int]: ...
    def unavailable_reason(self) -> str | None: ...


PLATFORMS: dict[str, Platform] = {}
"""Device platforms by name (``"webgpu"``, ``"cuda"``), registered by the GPU backends."""


def register_platform(name: str, platform: Platform) -> None:
    """Make the device arrays of ``name`` reachable from the layers below the backends."""
    PLATFORMS[name] = platform


def parse_device(device: Any) -> Device | None:
    """``device`` as a :class:`Device` (None stays None): a Device, ``"cpu"``, ``"webgpu"``,
    ``"webgpu:0"``, ``"cuda:0"``, or an object with ``platform`` and ``id`` (a JAX-style device)."""
    if device is None or isinstance(device, Device):
        return device
    if isinstance(device, str):
        name, _, idx = device.partition(":")
        if name == "cpu" and idx in ("", "0"):
            return Device()
        if name in ("webgpu", "cuda") and idx in ("", "0"):
            return Device(0, name, name)
        raise ValueError(f"unknown device {device!r}; ember's devices: 'cpu', 'webgpu:0', 'cuda:0'")
    platform = getattr(device, "platform", None)
    if isinstance(platform, str):
        return parse_device(platform if platform == "cpu" else f"{platform}:{getattr(device, 'id', 0)}")
    raise ValueError(f"unknown device {device!r}; ember's devices: 'cpu', 'webgpu:0', 'cuda:0'")


def platform(device: Device) -> Platform:
    """The registered platform of a GPU ``device`` (RuntimeError saying what to install when it
    cannot run here)."""
    p = PLATFORMS.get(device.platform)
    if p is None:
        raise RuntimeError(f"device {device}: the {device.platform} backend is not loaded")
    why = p.unavailable_reason()
    if why is not None:
        raise RuntimeError(f"device {device} is unavailable: {why}")
    return p


def on_device(x: Any) -> Device | None:
    """The GPU device an array lives on, or None for host values."""
    return x.device if getattr(type(x), "_device_resident", False) else None


# -- the default device ------------------------------------------------------------------------

_DEFAULT: contextvars.ContextVar[Device | None] = contextvars.ContextVar("ember_default_device", default=None)
_ENV_CACHE: list = [None, None]  # [environment value, parsed Device]
GPU_DEFAULT_ACTIVE = [0]
"""How many ``default_device`` blocks naming a GPU are open in the process, plus one while
``$EMBER_DEFAULT_DEVICE`` names a GPU: while nonzero, ``jit`` calls take the Python path (which
routes them to the default device) instead of the C dispatcher."""


GPU_DEFAULT_WATCHERS: list = []
"""``watch(active)`` callbacks run when ``GPU_DEFAULT_ACTIVE`` becomes nonzero (True) or zero
again (False): ``jit`` parks its C dispatchers meanwhile."""


def _gpu_default(delta: int) -> None:
    before = GPU_DEFAULT_ACTIVE[0]
    GPU_DEFAULT_ACTIVE[0] += delta
    if (before == 0) != (GPU_DEFAULT_ACTIVE[0] == 0):
        for watch in GPU_DEFAULT_WATCHERS:
            watch(GPU_DEFAULT_ACTIVE[0] != 0)


def _env_default() -> Device | None:
    raw = os.environ.get(DEFAULT_DEVICE_ENV) or None
    if raw != _ENV_CACHE[0]:
        try:
            dev = parse_device(raw)
        except ValueError as e:
            raise ValueError(f"${DEFAULT_DEVICE_ENV}: {e}") from None
        _ENV_CACHE[:] = [raw, dev]
    return _ENV_CACHE[1]


def default_device_now() -> Device | None:
    """The default device in effect: the innermost ``default_device`` block's, else
    ``$EMBER_DEFAULT_DEVICE``'s; None where neither names a GPU (the host)."""
    d = _DEFAULT.get()
    if d is None:
        d = _env_default()
    return None if d is None or d.platform == "cpu" else d


@contextlib.contextmanager
def default_device(device: Any) -> Iterator[Device | None]:
    """Inside the block, ``ember.numpy`` constructors put their arrays on ``device`` and ``jit``
    calls without device arrays among their inputs run there (JAX's ``jax.default_device``).
    ``"cpu"`` restores the host inside an outer block; ``None`` leaves the default as it is."""
    dev = parse_device(device)
    if dev is None:
        yield default_device_now()
        return
    if dev.platform != "cpu":
        platform(dev)  # a clear error now when the device cannot run here
    token = _DEFAULT.set(dev)
    gpu = int(dev.platform != "cpu")
    _gpu_default(gpu)
    try:
        yield dev
    finally:
        _gpu_default(-gpu)
        _DEFAULT.reset(token)


def env_names_gpu() -> bool:
    """Whether ``$EMBER_DEFAULT_DEVICE`` names a GPU (a value naming no device: a warning, and no)."""
    try:
        d = _env_default()
    except ValueError as e:
        warnings.warn(f"{e}; using the host", RuntimeWarning, stacklevel=2)
        return False
    return d is not None and d.platform != "cpu"


GPU_DEFAULT_ACTIVE[0] += env_names_gpu()  # read once, when ember loads


# -- memory ------------------------------------------------------------------------------------


def memory_stats(device: Any) -> dict[str, int]:
    """The memory figures of a GPU ``device`` (its buffer pool): ``bytes_in_use``,
    ``peak_bytes_in_use``, ``bytes_reserved``, ``pool_bytes``, ``num_allocs``, ``largest_alloc_size``
    and ``bytes_limit`` where a limit is set."""
    dev = parse_device(device)
    if dev is None or dev.platform == "cpu":
        raise ValueError("memory_stats(device): name a GPU device; ember.memory_stats() reports the host")
    return platform(dev).memory_stats()
