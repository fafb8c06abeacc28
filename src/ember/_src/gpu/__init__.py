"""The GPU backends: one device-kernel pipeline (:mod:`.kernels`) rendered to WGSL (:mod:`.wgsl`, run
through WebGPU by :mod:`.webgpu`) and to CUDA C (:mod:`.cuda`, compiled with NVRTC by
:mod:`.cuda_runtime`, its PTX cached on disk by :mod:`.kernel_cache`), over one op table
(:mod:`.ops`), after the target-independent rewrites both backends share (:mod:`ember._src.rewrites`);
loops nested in a scan body are unrolled, and conds in it made selects, by :mod:`.nested`; a static
``scan`` runs on either device from one loop schedule (:mod:`.loop_schedule`, run by
:mod:`.webgpu_loops` and :mod:`.cuda_loops`).
Importing this package registers ``BACKENDS["webgpu"]`` and ``BACKENDS["cuda"]``, their device
platforms (``devices.PLATFORMS``:
``device_put``, ``memory_stats``) and the hooks that run eager ops and ``jit`` calls on device arrays
where they live (:mod:`.residency`); the device libraries (``wgpu``, NVRTC) load on first use, so
importing ember never needs them.
"""

from ember._src import core, devices, jit
from ember._src.gpu import cuda_runtime, residency, webgpu
from ember._src.gpu.cuda_runtime import cuda_backend
from ember._src.gpu.webgpu import webgpu_backend

jit.BACKENDS["webgpu"] = webgpu_backend
jit.BACKENDS["cuda"] = cuda_backend
devices.register_platform("webgpu", webgpu)
devices.register_platform("cuda", cuda_runtime)
residency.RUNTIMES["webgpu"] = (webgpu.put, webgpu.WebGPUBuffer)
residency.RUNTIMES["cuda"] = (cuda_runtime.put, cuda_runtime.CUDABuffer)
if not core.device_eager_hook:
    core.device_eager_hook.append(residency.eager_apply)
if not jit.device_call_hook:
    jit.device_call_hook.append(residency.jit_call)
jit.CLEAR_HOOKS.append(residency.clear)
devices.GPU_DEFAULT_WATCHERS.append(residency.park_dispatchers)
