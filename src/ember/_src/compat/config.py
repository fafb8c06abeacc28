"""``ember.config``: ``config.update(name, value)`` with JAX's setting names mapped to ember's.

Names declared in ember's flag registry (``ember._src.flags``, e.g. ``jax_threefry_partitionable``)
are set there; the others below map to ember's settings. Settings ember has no counterpart for are
rejected with a message saying so (never ignored).
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from typing import Any

from ember._src.debug import set_debug
from ember._src.jit import set_default_backend
from ember._src.prims.dot import set_default_matmul_precision
from ember._src.validation import set_validation


def _only(name: str, allowed: tuple, why: str) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if value not in allowed:
            raise ValueError(f"config.update({name!r}, {value!r}): {why}")
    return check


def _flag_registry() -> Any:
    """``ember._src.flags`` when this build has it (a process-wide registry of boolean flags)."""
    try:
        return importlib.import_module("ember._src.flags")
    except ImportError:
        return None


def _platforms(value: Any) -> None:
    names = [v.strip() for v in str(value).split(",") if v.strip()]
    if not names or any(n != "cpu" for n in names):
        raise ValueError(f"config.update('jax_platforms', {value!r}): ember runs on the host CPU only "
                         "('cpu')")


class Config:
    """JAX-style configuration: ``update(name, value)`` and reading ``config.<name>``."""

    def __init__(self) -> None:
        self._setters: dict[str, Callable[[Any], None]] = {
            "jax_log_compiles": lambda v: set_debug(1 if v else 0),
            "jax_platforms": _platforms,
            "jax_platform_name": _platforms,
            "jax_threefry_partitionable": _only("jax_threefry_partitionable", (False, 0),
                                                "ember.random implements the original (non-partitionable) "
                                                "threefry scheme only in this build"),
            "jax_default_prng_impl": _only("jax_default_prng_impl", ("threefry2x32",),
                                           "ember.random implements threefry2x32 only"),
            "ember_debug": set_debug,
            "ember_validate": set_validation,
            "ember_default_backend": set_default_backend,
            "jax_default_matmul_precision": set_default_matmul_precision,
        }
        self._values: dict[str, Any] = {"jax_log_compiles": False, "jax_platforms": "cpu",
                                        "jax_platform_name": "cpu",
                                        "jax_threefry_partitionable": False,
                                        "jax_default_prng_impl": "threefry2x32",
                                        "jax_default_matmul_precision": None}

    def update(self, name: str, value: Any) -> None:
        """Set a configuration option by its JAX (``jax_*``) or ember (``ember_*``) name."""
        flags = _flag_registry()
        if flags is not None and name in flags.FLAGS:
            flags.set_flag(name, value)
            return
        setter = self._setters.get(name)
        if setter is None:
            known = ", ".join(sorted(set(self._setters) | set(flags.FLAGS if flags is not None else ())))
            raise ValueError(f"config.update: ember has no setting {name!r} (settings ember has: {known})")
        setter(value)
        self._values[name] = value

    def register(self, name: str, setter: Callable[[Any], None], value: Any = None) -> None:
        """Declare a setting (for other ember modules): ``setter(value)`` applies it."""
        self._setters[name] = setter
        self._values[name] = value

    def read(self, name: str) -> Any:
        """The current value of a setting (``config.read("jax_enable_x64")``), as JAX's ``read``."""
        return getattr(self, name)

    @property
    def values(self) -> dict[str, Any]:
        """Every setting's current value by name (a fresh dict; set values with :meth:`update`)."""
        flags = _flag_registry()
        out = dict(self._values)
        if flags is not None:
            out.update({name: flags.get(name) for name in flags.FLAGS})
        return out

    @property
    def x64_enabled(self) -> bool:
        """Whether 64-bit dtypes are enabled (the ``jax_enable_x64`` setting)."""
        return bool(self.read("jax_enable_x64"))

    def config_with_absl(self) -> None:
        """Accepted as in JAX, where it declares the settings as absl flags; ember reads its settings
        from :meth:`update` and the environment only, so there is nothing to declare."""

    def parse_flags_with_absl(self) -> None:
        """Accepted as in JAX (test programs call it first); ember has no absl flags to parse, and
        its settings' environment variables are read when ember is imported."""

    def __getattr__(self, name: str) -> Any:
        flags = _flag_registry()
        if flags is not None and name in flags.FLAGS:
            return flags.get(name)
        values = self.__dict__.get("_values", {})
        if name in values:
            return values[name]
        raise AttributeError(f"ember.config has no setting {name!r}")


config = Config()


@contextlib.contextmanager
def default_matmul_precision(precision: Any) -> Iterator[None]:
    """Sets ``jax_default_matmul_precision`` within a block, as JAX's context manager.

    ``precision``: a precision name (``"float32"``, ``"tensorfloat32"``, ``"bfloat16"``, ...), a
    ``lax.Precision``, or None. The CPU computes every level alike; the CUDA backend's float32
    GEMMs run at it (``docs/gpu.md``)."""
    old = config.jax_default_matmul_precision
    config.update("jax_default_matmul_precision", precision)
    try:
        yield
    finally:
        config.update("jax_default_matmul_precision", old)


__all__ = ["Config", "config", "default_matmul_precision"]
