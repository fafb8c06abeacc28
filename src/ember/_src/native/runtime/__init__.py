"""Running programs: the C compiler and its content-addressed cache, the call dispatcher, per-machine
runtime libraries (thread pool, interrupt flag, GEMM kernel build), output buffer pools, the
program-level disk cache."""
