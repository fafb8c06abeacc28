"""Every primitive records how the native backend runs it (its op-info entry, ``Primitive.lowering``)
or why it has no native lowering (``na("lowering", ...)``)."""

from __future__ import annotations

import ember  # noqa: F401  (registers the native backend and its lowerings)
from ember._src import core
from ember._src.native import opinfo


def test_every_primitive_has_a_lowering_or_a_reason():
    opinfo.declare()
    missing = sorted(n for n, p in core.PRIMITIVES.items()
                     if p.lowering is None and "lowering" not in p.not_applicable)
    assert not missing, missing
    both = [n for n, p in core.PRIMITIVES.items()
            if p.lowering is not None and "lowering" in p.not_applicable]
    assert not both, both


def test_former_fallbacks_now_lower_natively():
    opinfo.declare()
    for name in ("checkpoint", "custom_jvp_call", "custom_vjp_call", "dynamic_slice", "dynamic_update_slice",
                 "threefry2x32", "cumsum", "cumprod", "cummax", "cummin", "cholesky", "triangular_solve",
                 "lu", "qr", "eigh", "svd", "sort", "scatter", "digamma", "erf_inv", "polygamma",
                 "bitcast_convert_type", "fft", "eig", "complex", "real", "imag", "conj", "scan", "while",
                 "cond"):
        p = core.PRIMITIVES[name]
        assert p in opinfo.REGISTRY, name
        assert isinstance(p.lowering, str) and p.lowering.startswith("native"), name
    for name in ("random_gamma", "random_poisson"):
        p = core.PRIMITIVES[name]
        assert p not in opinfo.REGISTRY and "fallback step" in p.not_applicable["lowering"], name
        assert opinfo.native_kind(p) == "fallback step"


def test_native_kind_from_the_category():
    kinds = {n: opinfo.native_kind(core.PRIMITIVES[n]) for n in
             ("exp", "reshape", "reduce_sum", "take", "sort", "dot_general", "scan", "checkpoint", "copy",
              "psum")}
    assert kinds == {"exp": "fused kernel", "reshape": "fused kernel", "reduce_sum": "fused kernel",
                     "take": "fused kernel", "sort": "native call", "dot_general": "native call",
                     "scan": "native loop", "checkpoint": "inlined", "copy": "removed (identity)",
                     "psum": "never lowered"}


def test_renderer_tables_are_views_of_the_registry():
    from ember._src.native.emit import c_ops

    exp = core.PRIMITIVES["exp"]
    assert c_ops.OPS["exp"] is opinfo.REGISTRY[exp].render
    assert c_ops.COMPLEX_OPS["exp"] is opinfo.REGISTRY[exp].complex_render
    assert "real" in c_ops.COMPLEX_OPS and "real" not in c_ops.OPS
    assert set(c_ops.OPS) | set(c_ops.COMPLEX_OPS) == (opinfo.names(opinfo.OpCategory.ELEMENTWISE)
                                                       | {"copy", "stop_gradient"})
