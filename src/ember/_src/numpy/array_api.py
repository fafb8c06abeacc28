"""Array API standard (2024.12) inspection utilities: ``__array_namespace_info__``.

``ember.numpy`` is the namespace: ``x.__array_namespace__()`` returns it. See ``docs/array_api.md``
for what is covered and the known deviations.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember._src import dtypes as dt

__array_api_version__ = "2024.12"

_DEVICE = "cpu"

_KINDS: dict[str, tuple[np.dtype, ...]] = {
    "bool": (dt.bool_,),
    "signed integer": (dt.int8, dt.int16, dt.int32, dt.int64),
    "unsigned integer": (dt.uint8, dt.uint16, dt.uint32, dt.uint64),
    "real floating": (dt.float32, dt.float64),
    "complex floating": (dt.complex64, dt.complex128),
}
_KINDS["integral"] = _KINDS["signed integer"] + _KINDS["unsigned integer"]
_KINDS["numeric"] = _KINDS["integral"] + _KINDS["real floating"] + _KINDS["complex floating"]


class ArrayNamespaceInfo:
    """The object ``__array_namespace_info__()`` returns (Array API inspection API)."""

    __module__ = "ember.numpy"

    def capabilities(self) -> dict[str, Any]:
        """Optional features: boolean indexing and data-dependent shapes work on concrete arrays
        only (under ``jit`` they raise ``TracerError``), as in JAX, so both report ``False``."""
        return {"boolean indexing": False, "data-dependent shapes": False, "max dimensions": None}

    def default_device(self) -> str:
        """ember arrays live in host memory: ``'cpu'``."""
        return _DEVICE

    def devices(self) -> list[str]:
        """The devices arrays can be placed on."""
        return [_DEVICE]

    def _check_device(self, device: Any) -> None:
        if device is not None and device != _DEVICE:
            raise ValueError(f"unknown device {device!r}; ember has only {_DEVICE!r}")

    def default_dtypes(self, *, device: Any = None) -> dict[str, np.dtype]:
        """The default dtypes: float32, complex64, int32 (JAX's defaults) and int32 indices."""
        self._check_device(device)
        return {"real floating": dt.default_float, "complex floating": dt.default_complex,
                "integral": dt.int32, "indexing": dt.int32}

    def dtypes(self, *, device: Any = None, kind: str | tuple | None = None) -> dict[str, np.dtype]:
        """The Array API dtypes ember supports in the current mode, optionally restricted to
        ``kind`` (a kind name, a dtype, or a tuple of them): with ``jax_enable_x64`` off (the
        default) the 64-bit types are left out, as JAX does, since arrays cannot have them."""
        self._check_device(device)
        if kind is None:
            kind = "numeric"
            out = {"bool": dt.bool_}
        else:
            out = {}
        kinds = kind if isinstance(kind, tuple) else (kind,)
        for k in kinds:
            if isinstance(k, str):
                if k not in _KINDS:
                    raise ValueError(f"unknown dtype kind {k!r}; expected one of {sorted(_KINDS)}")
                for d in _KINDS[k]:
                    if not dt.narrows(d):
                        out[d.name] = d
            else:
                d = dt.canonicalize(k)
                out[d.name] = d
        return out


def __array_namespace_info__() -> ArrayNamespaceInfo:
    """The Array API inspection namespace (capabilities, devices, default and supported dtypes)."""
    return ArrayNamespaceInfo()


__all__ = ["__array_namespace_info__"]
