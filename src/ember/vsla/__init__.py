"""Variable-shape linear algebra: tensors combined under trailing-zero padding (see docs/vsla.md)."""
from ember._src.vsla.dropout import dropout
from ember._src.vsla.ops import (
    gather,
    layer_norm,
    matmul,
    mean,
    pyramid,
    reshape,
    rms_norm,
    scatter,
    slice,
    softmax,
    sum,
    transpose,
    window,
)
from ember._src.vsla.ragged import Ragged, ragged
from ember._src.vsla.varray import FFT_THRESHOLD, VArray, array, conv, kron, next_pow2, stack, unstack
from ember._src.vsla.vjit import VJitFunction, grad, jit

__all__ = ["FFT_THRESHOLD", "Ragged", "VArray", "VJitFunction", "array", "conv", "dropout", "gather", "grad",
           "jit", "kron", "layer_norm", "matmul", "mean", "next_pow2", "pyramid", "ragged", "reshape",
           "rms_norm", "scatter", "slice", "softmax", "stack", "sum", "transpose", "unstack", "window"]
