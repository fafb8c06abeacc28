"""NumPy-level contractions: ``matmul``, ``dot``, ``vdot``, ``inner``, ``outer``, ``tensordot`` and
``einsum``, all expressed with the one contraction primitive ``dot_general``.

Operands are promoted to a common dtype (JAX lattice, weak Python scalars) but never broadcast
against each other: batch dimensions of ``matmul`` are matched the way NumPy broadcasts them, by
making a dimension that only one side has (or that is 1 on the other side) a free dimension of
that side, so nothing is materialized. ``einsum`` takes diagonals for repeated indices, sums
indices that occur in a single operand, then contracts the operands pairwise from left to right.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from typing import Any

import numpy as np

from ember._src import core
from ember._src import dtypes as dt
from ember._src import shapes as sh
from ember._src.array import Array
from ember._src.core import get_aval as _aval
from ember._src.numpy import ufuncs
from ember._src.prims import dot as dotp
from ember._src.prims import elementwise as ew
from ember._src.prims import movement as mv
from ember._src.prims import reductions as red
from ember.errors import ShapeError

ArrayLike = Any

# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def promote_dtypes(name: str, *args: ArrayLike) -> list[Any]:
    """Promote ``args`` to their common dtype (JAX lattice with weak types) without broadcasting."""
    ops = [a if isinstance(a, (core.Tracer, Array)) else ufuncs.asarray(a) for a in args]
    dtype, weak = dt.promote(*(dt.dtype_and_weak(o) for o in ops))
    out = []
    for o in ops:
        a = _aval(o)
        if a.dtype != dtype or a.weak_type != weak:
            o = ew.convert_element_type(o, dtype, weak_type=weak)
        out.append(o)
    return out


def _is_one(d: Any) -> bool:
    return isinstance(d, int) and d == 1


def _pet(preferred_element_type: Any) -> Any:
    return None if preferred_element_type is None else dt.canonicalize(preferred_element_type)


def _scalar_product(a: Any, b: Any, preferred_element_type: Any) -> Any:
    """``dot``/``inner`` when an operand is 0-d: the elementwise product (as the requested type)."""
    out = ufuncs.multiply(a, b)
    pet = _pet(preferred_element_type)
    return out if pet is None else ew.convert_element_type(out, pet)


def _dot_general(x: Any, y: Any, contract: tuple, batch: tuple, pet: Any, precision: Any = None) -> Any:
    return dotp.dot_general(x, y, (contract, batch), precision=precision, preferred_element_type=pet)


# ---------------------------------------------------------------------------------------------
# matmul / dot / vdot / inner / outer / tensordot
# ---------------------------------------------------------------------------------------------


def matmul(a: ArrayLike, b: ArrayLike, *, precision: Any = None, preferred_element_type: Any = None) -> Any:
    """Matrix product with NumPy semantics: batch dims broadcast, 1-D operands are promoted to
    matrices (a prepended / appended 1) and that dim is removed from the result."""
    dotp.canonicalize_precision(precision)
    a, b = promote_dtypes("matmul", a, b)
    aa, ba = _aval(a), _aval(b)
    for i, (name, av) in enumerate((("a", aa), ("b", ba))):
        if av.ndim == 0:
            raise ShapeError(f"matmul: operand {i} ({name}) is 0-d; matmul needs operands of rank >= 1 "
                             "(use multiply for scalars)")
    a_vec, b_vec = aa.ndim == 1, ba.ndim == 1
    ka, kb = aa.ndim - 1, (0 if b_vec else ba.ndim - 2)
    if aa.shape[ka] != ba.shape[kb]:
        raise ShapeError(
            f"matmul: contracting dimension mismatch: a {sh.shape_str(aa.shape)} has "
            f"{sh.dim_str(aa.shape[ka])} on its last axis (dim {ka}) but b {sh.shape_str(ba.shape)} has "
            f"{sh.dim_str(ba.shape[kb])} on axis {kb - ba.ndim} (dim {kb})")
    a_batch = () if a_vec else aa.shape[:-2]
    b_batch = () if b_vec else ba.shape[:-2]
    nb = max(len(a_batch), len(b_batch))
    a_off, b_off = nb - len(a_batch), nb - len(b_batch)
    kinds: list[tuple[str, int, int]] = []  # per output batch position: ("batch"|"a"|"b", operand dim)
    a_sq: list[int] = []
    b_sq: list[int] = []
    for i in range(nb):
        ia, ib = i - a_off, i - b_off
        da = a_batch[ia] if ia >= 0 else None
        db = b_batch[ib] if ib >= 0 else None
        if da is not None and db is not None and da == db:
            kinds.append(("batch", ia, ib))
        elif db is None:
            kinds.append(("a", ia, -1))
        elif da is None:
            kinds.append(("b", -1, ib))
        elif _is_one(da):
            a_sq.append(ia)
            kinds.append(("b", -1, ib))
        elif _is_one(db):
            b_sq.append(ib)
            kinds.append(("a", ia, -1))
        else:
            raise ShapeError(
                f"matmul: batch dimensions do not broadcast: a {sh.shape_str(aa.shape)} has "
                f"{sh.dim_str(da)} at dim {ia} but b {sh.shape_str(ba.shape)} has {sh.dim_str(db)} at dim "
                f"{ib} (batch axis {i - nb} of the result)")

    def remap(d: int, squeezed: list[int]) -> int:
        return d - sum(1 for s in squeezed if s < d)

    if a_sq:
        a = mv.squeeze(a, a_sq)
    if b_sq:
        b = mv.squeeze(b, b_sq)
    batch = [(remap(ia, a_sq), remap(ib, b_sq)) for k, ia, ib in kinds if k == "batch"]
    contract = ((remap(ka, a_sq),), (remap(kb, b_sq),))
    batch_dims = (tuple(x for x, _ in batch), tuple(y for _, y in batch))
    out = _dot_general(a, b, contract, batch_dims, _pet(preferred_element_type), precision)
    # result layout: batch dims, a's free dims (free batch dims, then M), b's (free batch dims, then N)
    n_batch = len(batch)
    n_afree = sum(1 for k, _, _ in kinds if k == "a")
    has_m = 0 if a_vec else 1
    n_bfree = sum(1 for k, _, _ in kinds if k == "b")
    counters = {"batch": 0, "a": n_batch, "b": n_batch + n_afree + has_m}
    perm = []
    for k, _, _ in kinds:
        perm.append(counters[k])
        counters[k] += 1
    if has_m:
        perm.append(n_batch + n_afree)
    if not b_vec:
        perm.append(n_batch + n_afree + has_m + n_bfree)
    return mv.transpose(out, perm)


def dot(a: ArrayLike, b: ArrayLike, *, precision: Any = None, preferred_element_type: Any = None) -> Any:
    """Dot product as ``numpy.dot``: scalars multiply, 1-D is an inner product, otherwise the last
    axis of ``a`` is contracted with the second-to-last axis of ``b`` (its only axis if 1-D)."""
    dotp.canonicalize_precision(precision)
    a, b = promote_dtypes("dot", a, b)
    aa, ba = _aval(a), _aval(b)
    if aa.ndim == 0 or ba.ndim == 0:
        return _scalar_product(a, b, preferred_element_type)
    ka, kb = aa.ndim - 1, max(ba.ndim - 2, 0)
    if aa.shape[ka] != ba.shape[kb]:
        raise ShapeError(f"dot: shapes {sh.shape_str(aa.shape)} and {sh.shape_str(ba.shape)} are not "
                         f"aligned: {sh.dim_str(aa.shape[ka])} (dim {ka} of a) != "
                         f"{sh.dim_str(ba.shape[kb])} (dim {kb} of b)")
    return _dot_general(a, b, ((ka,), (kb,)), ((), ()), _pet(preferred_element_type), precision)


def vdot(a: ArrayLike, b: ArrayLike, *, precision: Any = None, preferred_element_type: Any = None) -> Any:
    """Dot product of the flattened arrays, conjugating ``a`` if it is complex."""
    dotp.canonicalize_precision(precision)
    a, b = promote_dtypes("vdot", a, b)
    aa, ba = _aval(a), _aval(b)
    na, nb = sh.size(aa.shape), sh.size(ba.shape)
    if na != nb:
        raise ShapeError(f"vdot: a {sh.shape_str(aa.shape)} has {sh.dim_str(na)} elements but b "
                         f"{sh.shape_str(ba.shape)} has {sh.dim_str(nb)}")
    a, b = mv.reshape(a, (na,)), mv.reshape(b, (nb,))
    if dt.is_complex(aa.dtype):
        a = ew.conj(a)
    return _dot_general(a, b, ((0,), (0,)), ((), ()), _pet(preferred_element_type), precision)


def inner(a: ArrayLike, b: ArrayLike, *, precision: Any = None, preferred_element_type: Any = None) -> Any:
    """Inner product over the last axes of ``a`` and ``b`` (scalars multiply)."""
    dotp.canonicalize_precision(precision)
    a, b = promote_dtypes("inner", a, b)
    aa, ba = _aval(a), _aval(b)
    if aa.ndim == 0 or ba.ndim == 0:
        return _scalar_product(a, b, preferred_element_type)
    if aa.shape[-1] != ba.shape[-1]:
        raise ShapeError(f"inner: last dimensions differ: a {sh.shape_str(aa.shape)} has "
                         f"{sh.dim_str(aa.shape[-1])}, b {sh.shape_str(ba.shape)} has "
                         f"{sh.dim_str(ba.shape[-1])}")
    return _dot_general(a, b, ((aa.ndim - 1,), (ba.ndim - 1,)), ((), ()), _pet(preferred_element_type),
                        precision)


def outer(a: ArrayLike, b: ArrayLike, out: Any = None) -> Any:
    """Outer product of the flattened ``a`` and ``b``: ``result[i, j] = a[i] * b[j]``."""
    if out is not None:
        raise NotImplementedError("outer: the `out` argument is not supported")
    a, b = promote_dtypes("outer", a, b)
    na, nb = sh.size(_aval(a).shape), sh.size(_aval(b).shape)
    return ufuncs.multiply(mv.reshape(a, (na, 1)), mv.reshape(b, (1, nb)))


def _axes_list(ax: Any, nd: int, what: str) -> tuple[int, ...]:
    if isinstance(ax, (int, np.integer)):
        ax = (ax,)
    return tuple(sh.normalize_axis(int(i), nd, what) for i in ax)


def tensordot(a: ArrayLike, b: ArrayLike, axes: Any = 2, *, precision: Any = None,
              preferred_element_type: Any = None) -> Any:
    """Contract ``axes`` of ``a`` with ``axes`` of ``b``: an int ``n`` (last ``n`` of ``a`` with the
    first ``n`` of ``b``) or a pair of axis sequences. The result has ``a``'s free axes, then ``b``'s."""
    dotp.canonicalize_precision(precision)
    a, b = promote_dtypes("tensordot", a, b)
    aa, ba = _aval(a), _aval(b)
    if isinstance(axes, (int, np.integer)):
        n = int(axes)
        if n < 0:
            raise ValueError(f"tensordot: axes must be non-negative, got {n}")
        if n > aa.ndim or n > ba.ndim:
            raise ShapeError(f"tensordot: axes={n} exceeds the rank of a {sh.shape_str(aa.shape)} or b "
                             f"{sh.shape_str(ba.shape)}")
        xa, xb = tuple(range(aa.ndim - n, aa.ndim)), tuple(range(n))
    else:
        try:
            ax_a, ax_b = axes
        except (TypeError, ValueError):
            raise TypeError("tensordot: axes must be an int or a pair of axis sequences, "
                            f"got {axes!r}") from None
        xa = _axes_list(ax_a, aa.ndim, "tensordot: axis of a")
        xb = _axes_list(ax_b, ba.ndim, "tensordot: axis of b")
        if len(xa) != len(xb):
            raise ShapeError(f"tensordot: {len(xa)} axes of a but {len(xb)} axes of b")
    for i, j in zip(xa, xb):
        if aa.shape[i] != ba.shape[j]:
            raise ShapeError(f"tensordot: shape mismatch: axis {i} of a {sh.shape_str(aa.shape)} has "
                             f"{sh.dim_str(aa.shape[i])} but axis {j} of b {sh.shape_str(ba.shape)} has "
                             f"{sh.dim_str(ba.shape[j])}")
    return _dot_general(a, b, (xa, xb), ((), ()), _pet(preferred_element_type), precision)


# ---------------------------------------------------------------------------------------------
# einsum
# ---------------------------------------------------------------------------------------------

Label = Any  # a letter (str) or ("...", k): the k-th broadcast dim of the ellipsis


def _sublists_to_spec(first: Any, rest: Sequence[Any]) -> tuple[str, list[Any]]:
    """The interleaved form ``einsum(x, [0, 1], y, [1, 2], [0, 2])`` as a subscripts string."""
    args = [first, *rest]
    ops, subs = args[0::2], args[1::2]
    out = None
    if len(ops) > len(subs):
        out, ops = ops[-1], ops[:-1]

    def conv(sub: Sequence[Any]) -> str:
        s = ""
        for s_ in sub:
            if s_ is Ellipsis:
                s += "..."
            elif isinstance(s_, (int, np.integer)) and 0 <= s_ < 52:
                s += string.ascii_letters[s_]
            else:
                raise ValueError(f"einsum: sublist entries must be ints in [0, 52) or Ellipsis, got {s_!r}")
        return s

    spec = ",".join(conv(s) for s in subs)
    if out is not None:
        spec += "->" + conv(out)
    return spec, list(ops)


def _parse_term(term: str, ndim: int, i: int, n_ell: int | None) -> list[Label]:
    if term.count("...") > 1 or "." in term.replace("...", ""):
        raise ValueError(f"einsum: invalid subscripts {term!r} for operand {i}")
    for c in term.replace("...", ""):
        if c not in string.ascii_letters:
            raise ValueError(f"einsum: invalid subscript {c!r} for operand {i} (letters only)")
    if "..." not in term:
        if len(term) != ndim:
            raise ShapeError(f"einsum: operand {i} has rank {ndim} but its subscripts {term!r} name "
                             f"{len(term)} axes")
        return list(term)
    head, tail = term.split("...")
    k = ndim - len(head) - len(tail)
    if k < 0:
        raise ShapeError(f"einsum: operand {i} has rank {ndim}, fewer than the {len(head) + len(tail)} axes "
                         f"its subscripts {term!r} name")
    assert n_ell is not None
    return [*head, *(("...", n_ell - k + j) for j in range(k)), *tail]


def _diagonals(x: Any, labels: list[Label], i: int) -> tuple[Any, list[Label]]:
    """Take the diagonal over every label repeated within one operand."""
    labels = list(labels)
    while True:
        seen: dict[Label, int] = {}
        pair = None
        for pos, lab in enumerate(labels):
            if lab in seen:
                pair = (seen[lab], pos)
                break
            seen[lab] = pos
        if pair is None:
            return x, labels
        p, q = pair
        shape = _aval(x).shape
        if shape[p] != shape[q]:
            raise ShapeError(f"einsum: repeated index {labels[p]!r} of operand {i} has sizes "
                             f"{sh.dim_str(shape[p])} and {sh.dim_str(shape[q])}")
        on_diag = ew.eq(mv.broadcasted_iota(dt.int32, shape, p), mv.broadcasted_iota(dt.int32, shape, q))
        x = red.reduce_sum(ew.select(on_diag, x, mv.full_like(x, 0)), (q,))
        del labels[q]


def _positions(labels: list[Label], chosen: list[Label]) -> tuple[int, ...]:
    return tuple(labels.index(lab) for lab in chosen)


def _label_name(lab: Label) -> str:
    return f"'{lab}'" if isinstance(lab, str) else f"ellipsis dim {lab[1]}"


def einsum(subscripts: Any, *operands: ArrayLike, out: Any = None, optimize: Any = None,
           precision: Any = None, preferred_element_type: Any = None) -> Any:
    """Einstein summation, as ``numpy.einsum`` (explicit ``->`` or implicit output, ``...``,
    repeated indices for diagonals and traces, and the interleaved sublist form). ``precision``
    (as ``dot``'s: None, a name, a ``lax.Precision``, or a pair) rides on every ``dot_general``
    it contracts with."""
    dotp.canonicalize_precision(precision)
    if out is not None:
        raise NotImplementedError("einsum: the `out` argument is not supported")
    if not isinstance(subscripts, str):
        subscripts, operands = _sublists_to_spec(subscripts, operands)
    if not operands:
        raise ValueError("einsum: no operands given")
    spec = subscripts.replace(" ", "")
    explicit = "->" in spec
    lhs, out_spec = spec.split("->", 1) if explicit else (spec, None)
    if out_spec is not None and "->" in out_spec:
        raise ValueError(f"einsum: subscripts {subscripts!r} contain more than one '->'")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise ValueError(f"einsum: subscripts {subscripts!r} name {len(terms)} operands but "
                         f"{len(operands)} were given")
    ops = promote_dtypes("einsum", *operands)
    pet = _pet(preferred_element_type)

    ndims = [_aval(o).ndim for o in ops]
    n_ell = max((nd - len(t.replace("...", "")) for t, nd in zip(terms, ndims) if "..." in t), default=0)
    n_ell = max(n_ell, 0)
    labels = [_parse_term(t, nd, i, n_ell) for i, (t, nd) in enumerate(zip(terms, ndims))]

    # output labels
    ell_labels = [("...", j) for j in range(n_ell)]
    if explicit:
        if "..." in out_spec:
            head, tail = out_spec.split("...", 1)
            if "..." in tail:
                raise ValueError(f"einsum: output subscripts {out_spec!r} contain more than one ellipsis")
        else:
            head, tail = out_spec, ""
        for c in head + tail:
            if c not in string.ascii_letters:
                raise ValueError(f"einsum: invalid output subscript {c!r}")
        out_labels = [*head, *(ell_labels if "..." in out_spec else []), *tail]
        if len(set(out_labels)) != len(out_labels):
            raise ValueError(f"einsum: output subscripts {out_spec!r} repeat an index")
        known = {lab for labs in labels for lab in labs}
        for lab in out_labels:
            if lab not in known:
                raise ValueError(f"einsum: output index {_label_name(lab)} does not occur in the inputs")
    else:
        letters = lhs.replace("...", "").replace(",", "")
        out_labels = [*ell_labels, *sorted(c for c in set(letters) if letters.count(c) == 1)]

    # sizes: equal, or 1 (broadcast)
    sizes: dict[Label, Any] = {}
    where: dict[Label, tuple[int, int, Any]] = {}
    for i, (o, labs) in enumerate(zip(ops, labels)):
        for ax, (lab, d) in enumerate(zip(labs, _aval(o).shape)):
            if lab not in sizes or (_is_one(sizes[lab]) and not _is_one(d)):
                sizes[lab], where[lab] = d, (i, ax, d)
            elif not _is_one(d) and d != sizes[lab]:
                j, axj, dj = where[lab]
                raise ShapeError(f"einsum: index {_label_name(lab)} has {sh.dim_str(dj)} in operand {j} "
                                 f"(axis {axj}) but {sh.dim_str(d)} in operand {i} (axis {ax})")

    # per operand: diagonals, drop broadcast size-1 dims, sum indices used nowhere else
    prepared = []
    for i, (o, labs) in enumerate(zip(ops, labels)):
        o, labs = _diagonals(o, labs, i)
        shape = _aval(o).shape
        drop = [p for p, lab in enumerate(labs) if _is_one(shape[p]) and not _is_one(sizes[lab])]
        if drop:
            o = mv.reshape(o, tuple(d for p, d in enumerate(shape) if p not in drop))
            labs = [lab for p, lab in enumerate(labs) if p not in drop]
        prepared.append((o, labs))
    for i, (o, labs) in enumerate(prepared):
        others = {lab for j, (_, ls) in enumerate(prepared) if j != i for lab in ls} | set(out_labels)
        lone = [p for p, lab in enumerate(labs) if lab not in others]
        if lone:
            o = red.reduce_sum(o, tuple(lone))
            labs = [lab for p, lab in enumerate(labs) if p not in lone]
        prepared[i] = (o, labs)

    # contract pairwise, left to right
    cur, cur_labs = prepared[0]
    for k in range(1, len(prepared)):
        nxt, nxt_labs = prepared[k]
        later = {lab for _, ls in prepared[k + 1:] for lab in ls} | set(out_labels)
        orphan = [p for p, lab in enumerate(cur_labs) if lab not in nxt_labs and lab not in later]
        if orphan:
            cur = red.reduce_sum(cur, tuple(orphan))
            cur_labs = [lab for p, lab in enumerate(cur_labs) if p not in orphan]
        if _aval(nxt).dtype != _aval(cur).dtype:  # after a preferred_element_type step
            nxt = ew.convert_element_type(nxt, _aval(cur).dtype)
        common = [lab for lab in cur_labs if lab in nxt_labs]
        batch = [lab for lab in common if lab in later]
        contract = [lab for lab in common if lab not in later]
        cur = _dot_general(cur, nxt, (_positions(cur_labs, contract), _positions(nxt_labs, contract)),
                           (_positions(cur_labs, batch), _positions(nxt_labs, batch)), pet, precision)
        cur_labs = [*batch, *(lab for lab in cur_labs if lab not in common),
                    *(lab for lab in nxt_labs if lab not in common)]

    extra = [p for p, lab in enumerate(cur_labs) if lab not in out_labels]
    if extra:
        cur = red.reduce_sum(cur, tuple(extra))
        cur_labs = [lab for p, lab in enumerate(cur_labs) if p not in extra]
    cur = mv.transpose(cur, tuple(cur_labs.index(lab) for lab in out_labels))
    if pet is not None and _aval(cur).dtype != pet:
        cur = ew.convert_element_type(cur, pet)
    return cur


__all__ = ["dot", "einsum", "inner", "matmul", "outer", "tensordot", "vdot"]
