"""Partitioning a program into steps: fused kernels (loop nests over an expression DAG), index
expressions, native loops, GEMM epilogues, split loops."""
