"""Native backend infrastructure: C compiler driver, BLAS/LAPACK pointers, buffer pool, memory planner."""
