"""C emission: the program's translation unit, the C op table, and the call steps (BLAS, LAPACK, FFT,
MPI, ember's GEMM kernel) rendered into it."""
