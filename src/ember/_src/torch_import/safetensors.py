"""Read and write the safetensors format with NumPy only (no torch, no safetensors package).

Layout: an 8-byte little-endian header length ``n``, ``n`` bytes of JSON (``{name: {"dtype": "F32",
"shape": [...], "data_offsets": [begin, end]}, "__metadata__": {...}}``, offsets relative to the end
of the header), then the raw little-endian tensor bytes.
"""

from __future__ import annotations

import json
import math
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
        a = np.asarray(tensors[name])
        a = np.ascontiguousarray(a).reshape(a.shape)  # ascontiguousarray alone makes a 0-d array 1-d
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
    """``(tensors, metadata)`` from a safetensors file.

    The header is checked before anything is allocated by it: every entry must have exactly the
    fields ``dtype`` (a known code), ``shape`` (non-negative integers) and ``data_offsets`` (inside
    the file, as long as the shape and dtype say). Raises :class:`SafetensorsError`; ``OSError``
    when the file cannot be read.
    """
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise SafetensorsError(f"{path}: truncated (no header length)")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise SafetensorsError(f"{path}: header length {n} exceeds the file size {len(data)}")
    try:
        header = json.loads(data[8:8 + n])
    except (ValueError, RecursionError) as e:
        raise SafetensorsError(f"{path}: the header is not valid JSON ({str(e)[:200]})") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: the header is not a JSON object")
    body = memoryview(data)[8 + n:]
    meta = header.pop("__metadata__", {}) or {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise SafetensorsError(f"{path}: __metadata__ must map names to strings")
    out = {}
    for name, info in header.items():
        where = f"{path}: header[{json.dumps(name)[:80]}]"
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise SafetensorsError(f"{where}: must have exactly the fields dtype, shape, data_offsets")
        if not isinstance(info["dtype"], str) or info["dtype"] not in _DTYPES:
            raise SafetensorsError(f"{where}.dtype: unknown dtype code {str(info['dtype'])[:40]!r}")
        dtype = np.dtype(_DTYPES[info["dtype"]]).newbyteorder("<")
        shape, offsets = info["shape"], info["data_offsets"]
        if not isinstance(shape, list) or not all(_is_size(d) for d in shape):
            raise SafetensorsError(f"{where}.shape: must be a list of non-negative integers")
        if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_size(d) for d in offsets):
            raise SafetensorsError(f"{where}.data_offsets: must be [begin, end], non-negative integers")
        b, e = offsets
        nbytes = math.prod(shape) * dtype.itemsize  # Python integers: no overflow
        if not b <= e <= len(body) or e - b != nbytes:
            raise SafetensorsError(f"{where}: the bytes of {name!r} ({b}..{e}) do not fit its shape "
                                   f"{tuple(shape)} or the file ({len(body)} data bytes)")
        try:
            a = np.frombuffer(body[b:e], dtype=dtype).reshape(shape)
        except ValueError as err:  # e.g. a zero-size shape with a dimension too large for NumPy
            raise SafetensorsError(f"{where}.shape: {err}") from None
        out[name] = a.astype(dtype.newbyteorder("="))
    return out, meta


def _is_size(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0
