"""Variable-shape linear algebra: tensors combined under trailing-zero padding (see docs/vsla.md)."""
from ember._src.vsla.ops import layer_norm, matmul, mean, pyramid, rms_norm, softmax, sum, transpose, window
from ember._src.vsla.varray import FFT_THRESHOLD, VArray, array, conv, kron, next_pow2, stack, unstack

__all__ = ["FFT_THRESHOLD", "VArray", "array", "conv", "kron", "layer_norm", "matmul", "mean", "next_pow2",
           "pyramid", "rms_norm", "softmax", "stack", "sum", "transpose", "unstack", "window"]
