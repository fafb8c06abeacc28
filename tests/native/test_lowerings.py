"""Every primitive records how the native backend runs it (``Primitive.lowering``) or why it has
no native lowering (``na("lowering", ...)``); only the loop primitives, whose native lowering is
being built separately, may still have neither."""

from __future__ import annotations

import ember  # noqa: F401  (registers the native backend and its lowerings)
from ember._src import core
from ember._src.native import lowerings

PENDING = {"scan", "while", "cond"}  # native loops are built in their own workstream


def test_every_primitive_has_a_lowering_or_a_reason():
    lowerings.declare()
    missing = sorted(n for n, p in core.PRIMITIVES.items()
                     if p.lowering is None and "lowering" not in p.not_applicable)
    assert set(missing) <= PENDING, missing
    both = [n for n, p in core.PRIMITIVES.items()
            if p.lowering is not None and "lowering" in p.not_applicable]
    assert not both, both


def test_former_fallbacks_now_lower_natively():
    lowerings.declare()  # primitives registered after the native backend's import (e.g. checkpoint)
    for name in ("checkpoint", "custom_jvp_call", "custom_vjp_call", "dynamic_slice", "dynamic_update_slice",
                 "threefry2x32", "cumsum", "cumprod", "cummax", "cummin", "cholesky", "triangular_solve",
                 "lu", "qr", "eigh", "svd", "sort", "scatter", "digamma", "erf_inv", "polygamma",
                 "bitcast_convert_type", "fft", "eig", "complex", "real", "imag", "conj"):
        assert isinstance(core.PRIMITIVES[name].lowering, str) and core.PRIMITIVES[name].lowering.startswith(
            "native"), name
    for name in ("random_gamma", "random_poisson"):
        assert "fallback step" in core.PRIMITIVES[name].not_applicable["lowering"], name
