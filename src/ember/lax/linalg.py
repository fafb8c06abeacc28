"""``ember.lax.linalg``: the decomposition primitives with ``jax.lax.linalg`` conventions."""

from ember._src.prims.linalg import (
    cholesky,
    eig,
    eigh,
    lu,
    lu_pivots_to_permutation,
    qr,
    svd,
    triangular_solve,
)

__all__ = ["cholesky", "eig", "eigh", "lu", "lu_pivots_to_permutation", "qr", "svd", "triangular_solve"]
