"""Read and write the safetensors format through the ``safetensors`` package (its framework-free
API: no torch), with NumPy arrays made here so that every dtype real checkpoints use is read:
F64/F32/F16, BF16 and the float8 kinds (through ``ml_dtypes``), the signed and unsigned integers
and BOOL.

The package parses and validates the header (an 8-byte little-endian length, a JSON header with
``dtype``, ``shape`` and ``data_offsets`` per tensor, bounded in size; every tensor's bytes inside
the file, as long as its shape and dtype say, the tensors covering the data without gaps or
overlaps) before anything is allocated from it. Unknown fields of a header entry are ignored, as
the format allows.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

# the file's dtype code -> the NumPy dtype (the writer passes the dtype's name, which the package
# maps back to the same code)
_DTYPES: dict[str, Any] = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
    "F8_E4M3": ml_dtypes.float8_e4m3fn, "F8_E5M2": ml_dtypes.float8_e5m2,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8,
    "U64": np.uint64, "U32": np.uint32, "U16": np.uint16, "U8": np.uint8, "BOOL": np.bool_,
}
_NAMES = {np.dtype(v).name for v in _DTYPES.values()}


class SafetensorsError(ValueError):
    """A safetensors file that cannot be read (truncated, bad header, unknown dtype)."""


def _package() -> Any:
    try:
        import safetensors
    except ImportError:
        raise ImportError("reading and writing weights.safetensors needs the safetensors package "
                          "(a dependency of ember): pip install safetensors") from None
    return safetensors


def save(path: str, tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> None:
    """Write ``tensors`` (NumPy arrays of the dtypes above) and the string ``metadata`` to ``path``."""
    st = _package()
    specs, alive = {}, []
    for name in sorted(tensors):
        a = np.asarray(tensors[name])
        if a.dtype.name not in _NAMES:
            raise TypeError(f"safetensors: dtype {a.dtype} of {name!r} is not supported")
        a = np.ascontiguousarray(a.astype(a.dtype.newbyteorder("<"), copy=False)).reshape(a.shape)
        alive.append(a)  # the spec holds a raw pointer: the array must outlive serialize_file
        specs[name] = st.TensorSpec(dtype=a.dtype.name, shape=list(a.shape), data_ptr=a.ctypes.data,
                                    data_len=a.nbytes)
    meta = {str(k): str(v) for k, v in metadata.items()} if metadata else None
    st.serialize_file(specs, path, metadata=meta)


def load(path: str) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """``(tensors, metadata)`` from a safetensors file (arrays in native byte order, writable).

    Raises :class:`SafetensorsError` for a damaged file or a dtype ember does not read (the
    package's message), ``OSError`` when the file cannot be read.
    """
    st = _package()
    with open(path, "rb") as f:
        data = f.read()
    try:
        views = st.deserialize(data)
        with st.safe_open(path, framework="numpy") as f:
            meta = f.metadata() or {}
    except st.SafetensorError as e:
        raise SafetensorsError(f"{path}: {e}") from None
    out = {}
    for name, view in views:
        dtype = _DTYPES.get(view["dtype"])
        if dtype is None:
            raise SafetensorsError(f"{path}: {name!r} has the dtype {view['dtype']}, which ember does "
                                   f"not read")
        out[name] = np.frombuffer(view["data"], dtype=np.dtype(dtype).newbyteorder("<")).reshape(
            view["shape"]).astype(dtype)
    return out, dict(meta)
