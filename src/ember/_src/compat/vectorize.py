"""``jnp.vectorize``: a function of scalars (or of core dimensions) mapped with nested ``vmap``."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Collection
from typing import Any

import ember.numpy as jnp
from ember._src.batching import vmap

_DIMS = r"\w+(?:,\w+)*"
_ARG = rf"\((?:{_DIMS})?\)"
_SIG = re.compile(rf"^{_ARG}(?:,{_ARG})*->{_ARG}(?:,{_ARG})*$")


def _parse(signature: str) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
    sig = signature.replace(" ", "")
    if not _SIG.match(sig):
        raise ValueError(f"vectorize: not a valid gufunc signature: {signature!r}")
    ins, outs = sig.split("->")

    def args(s: str) -> list[tuple[str, ...]]:
        return [tuple(d for d in a.split(",") if d) for a in re.findall(r"\(([^)]*)\)", s)]
    return args(ins), args(outs)


def vectorize(pyfunc: Callable[..., Any], *, excluded: Collection[int | str] = frozenset(),
              signature: str | None = None) -> Callable[..., Any]:
    """Vectorize ``pyfunc`` over leading (broadcast) axes, as ``jax.numpy.vectorize``.

    ``signature`` (e.g. ``"(n),(n)->()"``) names core dimensions that ``pyfunc`` sees whole;
    ``excluded`` positions/names are passed through unchanged.
    """
    in_sig, out_sig = _parse(signature) if signature is not None else (None, None)

    @functools.wraps(pyfunc)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        fixed_kw = {k: v for k, v in kwargs.items() if k in excluded}
        names = [k for k in kwargs if k not in excluded]
        vec_pos = [i for i in range(len(args)) if i not in excluded]
        vec_args = [jnp.asarray(args[i]) for i in vec_pos] + [jnp.asarray(kwargs[k]) for k in names]

        def call(*vals: Any) -> Any:
            full = list(args)
            for i, v in zip(vec_pos, vals):
                full[i] = v
            kw = dict(fixed_kw, **dict(zip(names, vals[len(vec_pos):])))
            return pyfunc(*full, **kw)

        cores = in_sig if in_sig is not None else [()] * len(vec_args)
        if len(cores) != len(vec_args):
            raise TypeError(f"vectorize: signature {signature!r} has {len(cores)} inputs, got "
                            f"{len(vec_args)} vectorized arguments")
        sizes: dict[str, int] = {}
        loops = []
        for i, (a, core_dims) in enumerate(zip(vec_args, cores)):
            nc = len(core_dims)
            if a.ndim < nc:
                raise ValueError(f"vectorize: argument {i} has {a.ndim} dimensions, fewer than its core "
                                 f"dimensions {core_dims}")
            for d, n in zip(core_dims, a.shape[a.ndim - nc:]):
                if sizes.setdefault(d, n) != n:
                    raise ValueError(f"vectorize: inconsistent size for core dimension {d!r}: "
                                     f"{sizes[d]} vs {n}")
            loops.append(tuple(a.shape[:a.ndim - nc]))
        loop_shape = jnp.broadcast_shapes(*loops) if loops else ()
        vec_args = [jnp.broadcast_to(a, tuple(loop_shape) + tuple(a.shape[len(lp):]))
                    for a, lp in zip(vec_args, loops)]
        f = call
        for _ in loop_shape:
            f = vmap(f)
        return f(*vec_args)

    return wrapped


__all__ = ["vectorize"]
