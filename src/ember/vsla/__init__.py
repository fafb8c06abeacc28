"""Variable-shape linear algebra: tensors combined under trailing-zero padding (see docs/vsla.md)."""
from ember._src.vsla.varray import VArray, array, conv, kron, next_pow2, stack, unstack

__all__ = ["VArray", "array", "conv", "kron", "next_pow2", "stack", "unstack"]
