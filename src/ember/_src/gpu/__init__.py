"""The GPU backends: one device-kernel pipeline (:mod:`.kernels`) rendered to WGSL (:mod:`.wgsl`, run
through WebGPU by :mod:`.webgpu`) and to CUDA C (:mod:`.cuda`, compiled with NVRTC by
:mod:`.cuda_runtime`), over one op table (:mod:`.ops`). Importing this package registers
``BACKENDS["webgpu"]`` and ``BACKENDS["cuda"]``; the device libraries (``wgpu``, NVRTC) load on
first use, so importing ember never needs them.
"""

from ember._src.gpu.cuda_runtime import cuda_backend
from ember._src.gpu.webgpu import webgpu_backend
from ember._src.jit import BACKENDS

BACKENDS["webgpu"] = webgpu_backend
BACKENDS["cuda"] = cuda_backend
