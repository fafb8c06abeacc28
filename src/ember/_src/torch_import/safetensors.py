"""Read and write the safetensors format with NumPy only (no torch, no safetensors package).

Layout: an 8-byte little-endian header length ``n``, ``n`` bytes of JSON (``{name: {"dtype": "F32",
"shape": [...], "data_offsets": [begin, end]}, "__metadata__": {...}}``, offsets relative to the end
of the header), then the raw little-endian tensor bytes.
"""

from __future__ import annotations

import json
import struct

import numpy as np

_CODES = {"float64": "F64", "float32": "F32", "float16": "F16", "int64": "I64", "int32": "I32",
          "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL"}
_DTYPES = {v: k for k, v in _CODES.items()}


class SafetensorsError(ValueError):
    """A safetensors file that cannot be read (truncated, bad header, unknown dtype)."""


def save(path: str, tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> None:
    header: dict = {}
    blobs, offset = [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        code = _CODES.get(a.dtype.name)
        if code is None:
            raise TypeError(f"safetensors: dtype {a.dtype} of {name!r} is not supported")
        data = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": code, "shape": list(a.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for b in blobs:
            f.write(b)


def load(path: str) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """``(tensors, metadata)`` from a safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise SafetensorsError(f"{path}: truncated (no header length)")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise SafetensorsError(f"{path}: header length {n} exceeds the file size {len(data)}")
    try:
        header = json.loads(data[8:8 + n])
    except ValueError as e:
        raise SafetensorsError(f"{path}: the header is not valid JSON ({e})") from None
    body = memoryview(data)[8 + n:]
    meta = header.pop("__metadata__", {}) or {}
    out = {}
    for name, info in header.items():
        try:
            dtype = np.dtype(_DTYPES[info["dtype"]]).newbyteorder("<")
            b, e = info["data_offsets"]
            shape = tuple(info["shape"])
        except (KeyError, TypeError, ValueError):
            raise SafetensorsError(f"{path}: bad header entry for {name!r}: {info!r}") from None
        if not 0 <= b <= e <= len(body) or (e - b) != int(np.prod(shape, dtype=np.int64)) * dtype.itemsize:
            raise SafetensorsError(f"{path}: the bytes of {name!r} ({b}..{e}) do not fit its shape "
                                   "or the file")
        out[name] = np.frombuffer(body[b:e], dtype=dtype).reshape(shape).astype(dtype.newbyteorder("="))
    return out, meta
