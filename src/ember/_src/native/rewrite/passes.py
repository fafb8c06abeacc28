"""Program -> Program rewrites run before scheduling. Each pass is a named function, independently
testable and switchable (``run_passes(program, names)``; the backend's ``passes=`` option).
The target-independent ones (``inline_calls``, ``simplify``, ``cse``, ``dce``, ``fold_constants``)
live in :mod:`ember._src.rewrites`, shared with the GPU backends, and are registered here.

* ``inline_calls``: ``checkpoint``, ``custom_jvp_call`` and ``custom_vjp_call`` are plain calls of a
  sub-program in forward evaluation; their equations (and captured constants) are spliced into the
  parent with fresh variables, recursively, so they fuse with their surroundings.
* ``split_threefry``: ``threefry2x32`` becomes its two halves, fusible elementwise ops (see
  :mod:`.threefry`), so random bits are generated inside the kernels that consume them.
* ``simplify``: algebraic identities (``x*1``, ``x+0``, ``x-0``, ``x/1``, ``neg(neg x)``, converts
  to the same dtype, ``copy``/``stop_gradient``), elementwise ops on splats (scalars broadcast) are
  evaluated, and trivial movement is removed or merged (identity reshape/transpose/broadcast/slice/
  pad/rev, reshape-of-reshape, transpose-of-transpose, broadcast-of-broadcast, squeeze and size-1
  transposes become reshapes, movement of a splat is a splat). ``x + 0 -> x`` follows XLA and
  differs from IEEE only for ``x = -0.0`` (the result keeps the sign of zero).
* ``cse``: equal equations (primitive, inputs, params) computed once.
* ``dce``: equations and captured constants whose results are unused are dropped.
* ``fuse_attention`` (registered by :mod:`.attention_passes`): ``softmax(Q K^T s [+ b] [masked]) V``
  written out becomes one ``attention`` step (the native tiled online-softmax kernel).
* ``absorb_causal_mask`` (registered by :mod:`.attention_passes`): an ``attention`` step's mask
  factors that are functions of the index alone (a causal mask however it was built) become its
  ``causal`` flag; the ``L x S`` mask is not materialized.
* ``hoist_loop_transposes`` (:mod:`.loop_passes`): ``W @ h`` in a loop body with ``W``
  loop-invariant and small becomes ``h @ W.T``, ``W.T`` computed once before the loop.
* ``dce_loop_outputs`` (:mod:`.loop_passes`): also drops a ``scan``'s unused stacked
  outputs and a ``cond``'s unused outputs, with the body computations feeding only them.
The passes on matrix products (:mod:`.gemm_passes`):

* ``unbatch_broadcast_dot``: a batched ``dot_general`` of an operand broadcast along exactly the
  batch axes (a weight shared by every batch, as ``torch.bmm`` of an expanded weight) becomes one
  product with the batch axes as free rows (one large GEMM, the weight read once).
* ``absorb_transposes``: ``dot_general(transpose(x), y)`` reads ``x`` directly (the permutation
  moves into the dimension numbers) when the free dims keep their order.
* ``lower_matmul``: ``dot_general`` -> ``native_gemm`` over ``[B,] M, K`` views of the operands
  (reshapes, which the planner turns into aliases), with transpose flags chosen so that operands
  are read in place; an explicit transpose (a copy kernel) is inserted only when no flag fits.
* ``absorb_scale``: ``s * gemm``, ``gemm / s``, ``-gemm`` and ``gemm(s * a, b)`` for a literal
  scalar ``s`` fold into ``alpha`` (and ``beta``).
* ``absorb_bias``: ``gemm + c`` with ``c`` a full-shape value, a scalar, or a vector broadcast along
  the output's last (N) dim becomes ``gemm(..., c, beta=1)`` -- unless the sum flows (also through
  slices: a recurrent step's gates) into further elementwise work (e.g. an activation),
  whose fused kernel adds the bias for free.
* ``absorb_output_transpose``: ``transpose(gemm(x, y))`` swapping the matrix dims of a product used
  only there becomes ``gemm(y, x)`` with flipped flags (a dense layer's weight gradient).
* ``gemm_views``: a float ``native_gemm`` operand that is a transpose (through reshapes) of another
  value, or a result that is only transposed (through reshapes), is read / written in place through
  strides (the gemm's ``views``): attention's head splits and merges cost no copy kernels.
* ``refine_transposes`` (:mod:`.movement_passes`): a transpose of a reshape that merges and splits
  axes runs over the shapes' common refinement (linear indexing in its copy kernel).
* ``channels_last`` (:mod:`.layout_passes`): NCHW convolutions take and give NHWC values, and
  the elementwise ops, pads, slices and reductions after them carry NHWC on; values go back to
  NCHW only where another consumer needs them (the max pool and residual adds of a ResNet run
  channels-last, the convolutions stage no copies).
* ``fold_batch_norm`` (:mod:`.inference_passes`): per-channel constant ``add``/``sub``/``mul``/``div``
  after a convolution with a constant kernel (an eval-mode batch norm, a conv bias) become the
  kernel scaled per output feature and one per-channel shift.
* ``absorb_residual`` (:mod:`.inference_passes`): ``gemm [+ bias] + r`` with a full-shape ``r`` (a
  residual add) becomes ``gemm(.., r, beta=1) [+ bias]``, also when ReLU follows (the epilogue). In
  a loop body (``absorb_residual_in_loop_body``, :data:`BODY_VARIANTS`) an ``r`` that is the body's
  input stays an add: the product would start from a copy of it made serially at every step.
* ``conv_gemm`` (:mod:`.layout_passes`): a 1x1 NHWC convolution, or one with small output images
  (ResNet's 7x7 stage), becomes a ``dot_general`` of its patches (im2col by strided slices) by the
  kernel as a matrix, on ember's GEMM kernel.
* ``fold_constants``: equations whose inputs are all captured constants, literals or splats are
  evaluated with the reference implementations; the results become constants (never larger than
  their inputs: broadcasts and iotas are not materialized).

Absorption runs before constant folding, so a captured weight is never materialized transposed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ember._src.native import opinfo
from ember._src.native.base import prim_refs as pr
from ember._src.native.opinfo import OpCategory
from ember._src.native.rewrite import threefry
from ember._src.program import Eqn, Program
from ember._src.rewrites import identities as shared_identities
from ember._src.rewrites import inline as shared_inline
from ember._src.rewrites.builder import Builder, lit, splat_value  # noqa: F401  (read as passes.<name>)
from ember._src.rewrites.dedup import cse, dce
from ember._src.rewrites.fold import NO_FOLD, fold_constants  # noqa: F401
from ember._src.rewrites.inline import inline_calls

PASSES: dict[str, Callable[[Program], Program]] = {}
DEFAULT_PASSES = ("inline_calls", "split_threefry", "simplify", "cse", "bf16_weights", "fold_batch_norm",
                  "channels_last",
                  "conv_gemm",
                  "fuse_attention", "absorb_causal_mask", "hoist_loop_transposes", "unbatch_broadcast_dot",
                  "absorb_transposes", "lower_matmul", "absorb_scale", "absorb_bias", "absorb_residual",
                  "absorb_scale",
                  "absorb_output_transpose", "fold_constants", "constant_loop_operands", "gemm_views",
                  "refine_transposes", "simplify", "cse", "dce_loop_outputs", "dce")


def register(fn: Callable[[Program], Program]) -> Callable[[Program], Program]:
    PASSES[fn.__name__] = fn
    return fn


# passes that loop bodies run in another form (:func:`run_passes` with ``loop_body``)
BODY_VARIANTS = {"absorb_residual": "absorb_residual_in_loop_body"}


def run_passes(p: Program, names: Sequence[str] | None = None, loop_body: bool = False) -> Program:
    """Apply the named passes in order (``DEFAULT_PASSES`` when ``names`` is None); ``loop_body``:
    ``p`` is a loop's body, which runs :data:`BODY_VARIANTS` in place of those passes."""
    for n in DEFAULT_PASSES if names is None else names:
        n = BODY_VARIANTS.get(n, n) if loop_body else n
        if n not in PASSES:
            raise ValueError(f"unknown pass {n!r}; available: {sorted(PASSES)}")
        p = PASSES[n](p)
    return p


def reemit(p: Program, drop: set[int], at: dict[int, Callable[[Builder, Eqn], None]]) -> Program:
    """``p`` re-emitted without the equations whose ``id`` is in ``drop``, each equation ``e`` with
    ``id(e)`` in ``at`` replaced by what ``at[id(e)](builder, e)`` emits (the rest as they were)."""
    b = Builder(p)
    for e in p.eqns:
        if id(e) in drop:
            continue
        fn = at.get(id(e))
        if fn is None:
            b.emit(e.prim, [b.read(a) for a in e.inputs], e.params, e.outvars)
        else:
            fn(b, e)
    return b.finish()


# ---------------------------------------------------------------------------------------------
# The target-independent passes (:mod:`ember._src.rewrites`, shared with the GPU backends)
# ---------------------------------------------------------------------------------------------

for _name, _param in shared_inline.INLINED.items():
    opinfo.register(_name, OpCategory.INLINED, "the sub-program's equations fuse with the caller "
                    "(passes.inline_calls)", inline_param=_param)

register(inline_calls)
register(cse)
register(dce)
register(fold_constants)


@register
def simplify(p: Program) -> Program:
    """:func:`ember._src.rewrites.identities.simplify` with the op-info registry's op kinds."""
    return shared_identities.simplify(p, opinfo)


@register
def split_threefry(p: Program) -> Program:
    """``threefry2x32`` -> ``native_threefry_lo`` + ``native_threefry_hi`` (unused halves go in dce)."""
    if not any(e.prim is pr.THREEFRY2X32 for e in p.eqns):
        return p
    b = Builder(p)
    for e in p.eqns:
        ins = [b.read(a) for a in e.inputs]
        if e.prim is pr.THREEFRY2X32:
            b.emit(threefry.threefry_lo_p, ins, {}, [e.outvars[0]])
            b.emit(threefry.threefry_hi_p, ins, {}, [e.outvars[1]])
        else:
            b.emit(e.prim, ins, e.params, e.outvars)
    return b.finish()


# The passes of other modules, registered by importing them here (one explicit list; they import
# ``register`` from this module, so the list comes after it).
from ember._src.native.rewrite import (  # noqa: E402,F401
    attention_passes,
    bf16_weights,
    gemm_passes,
    inference_passes,
    layout_passes,
    loop_passes,
    movement_passes,
)
from ember._src.native.rewrite.gemm_passes import (  # noqa: E402,F401  (read as passes.<name>)
    absorb_bias,
    absorb_output_transpose,
    absorb_scale,
    absorb_transposes,
    gemm_views,
    lower_matmul,
)
