"""The CUDA tests' skip markers: NVRTC (compiling needs no GPU) and a CUDA device (running)."""

from __future__ import annotations

import pytest

from ember._src.gpu import cuda_runtime

NO_NVRTC = cuda_runtime.nvrtc_unavailable_reason()
needs_nvrtc = pytest.mark.skipif(NO_NVRTC is not None, reason=f"NVRTC unavailable: {NO_NVRTC}")
NO_DEVICE = cuda_runtime.unavailable_reason()
needs_device = pytest.mark.skipif(NO_DEVICE is not None, reason=f"no CUDA device: {NO_DEVICE}")
