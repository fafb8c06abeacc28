"""The native backend's options: one frozen :class:`NativeOptions`, parsed and checked once.

``ember.jit(f, backend="native", **options)`` hands its keyword options to the backend factory;
:meth:`NativeOptions.parse` turns them into this dataclass when an executable is built (static
or symbolic), and every stage of the pipeline (:mod:`.pipeline`) reads its fields. An unknown
option name raises ``TypeError`` naming it (and listing the known ones), a value of the wrong
type ``TypeError`` naming the option, an out-of-range value ``ValueError``.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ember._src.native.rewrite.passes import PASSES
from ember._src.native.runtime.threadpool import DEFAULT_PARALLEL_THRESHOLD, usable_cpus
from ember._src.validation import validation_mode


@dataclass(frozen=True)
class NativeOptions:
    """Every option the native backend reads (hashable: it keys the symbolic build cache)."""

    passes: tuple[str, ...] | None = None
    """Names of the optimization passes to run, in order (:data:`.passes.DEFAULT_PASSES` when None;
    an empty tuple runs none, for ablation)."""

    fuse: bool = True
    """Fuse consumers into producers' kernels (False: one kernel per equation)."""

    gemm_epilogue: bool = True
    """A bias add / ReLU after a float32 product goes into the GEMM kernel's store
    (:mod:`.gemm_epilogue`), and after a float32 convolution with its features last into the
    convolution's tiles (:mod:`.conv_epilogue`); sizes may be symbolic (a product's rows, a
    convolution's batch, height and width)."""

    max_kernel_inputs: int = 16
    """Most distinct input buffers one fused kernel may read (at least 1)."""

    num_threads: int | None = None
    """Threads of parallel loops; None (or 0 when given) uses every CPU / the OpenMP default."""

    parallel_threshold: int = DEFAULT_PARALLEL_THRESHOLD
    """Cost-weighted element count above which a loop or call runs in parallel (at least 0)."""

    inplace: bool = True
    """Let an elementwise kernel, a product's accumulator or an updating call write into a dying
    same-size input's buffer."""

    simd: bool = True
    """Emit ``#pragma omp simd`` on inner loops."""

    validate: str | None = None
    """Validation mode ``"strict" | "normal" | "off"`` (True/False are accepted as normal/off);
    None: the process-wide mode (:func:`ember._src.validation.validation_mode`) at build time."""

    prepack: bool = True
    """Pack a constant ``B`` (weights), or an argument ``B`` passed again, once for the GEMM kernel."""

    grads_from: int | None = None
    """Index of the program input that holds the cotangent seed of a gradient program (``vsla.jit``
    of a ``vsla.grad`` function): every arena intermediate computed from it (the backward pass's
    cotangents and their accumulators) is planned in the ``GRADS`` class, a region of the arena of
    its own (:mod:`.plan.planner`). None: no GRADS class."""

    @classmethod
    def parse(cls, options: Mapping[str, Any] | NativeOptions | None = None) -> NativeOptions:
        """The options of a ``jit(..., **options)`` / ``native_backend(program, **options)`` call,
        checked: unknown names and wrong types raise ``TypeError``, bad values ``ValueError``."""
        if isinstance(options, NativeOptions):
            return options
        options = dict(options or {})
        try:  # the same options again (a symbolic program's every binding): parsed already
            memo_key = tuple((k, type(v), v) for k, v in options.items())  # True and 1 are not one key
            hit = _MEMO.get(memo_key)
        except TypeError:  # an unhashable value (a list of passes)
            memo_key, hit = None, None
        if hit is not None:
            return hit
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise TypeError(f"native backend: unknown option{'s' if len(unknown) > 1 else ''} "
                            f"{', '.join(map(repr, unknown))}; known options: {', '.join(sorted(known))}")
        values: dict[str, Any] = {}
        for name, value in options.items():
            values[name] = _PARSERS[name](name, value)
        parsed = cls(**values)
        if memo_key is not None:
            if len(_MEMO) >= 256:
                _MEMO.clear()
            _MEMO[memo_key] = parsed
        return parsed

    def validation_mode(self) -> str:
        """The validation mode builds with these options run under (``validate`` or the default)."""
        return validation_mode(self.validate)

    def threads(self, openmp: bool) -> int:
        """Threads the planner sizes per-thread scratch for: ``num_threads`` (or the CPU count)
        with OpenMP, 1 without."""
        if not openmp:
            return 1
        return self.num_threads or usable_cpus()

    def items(self) -> Iterator[tuple[str, Any]]:
        """``(name, value)`` of every option, by name (the program cache's key text)."""
        for name in sorted(f.name for f in dataclasses.fields(self)):
            yield name, getattr(self, name)


def _flag(name: str, value: Any) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"native backend option {name}= must be a bool, got {type(value).__name__} {value!r}")


def _integer(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"native backend option {name}= must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"native backend option {name}= must be at least {minimum}, got {value}")
    return int(value)


def _passes(name: str, value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or \
            not all(isinstance(p, str) for p in value):
        raise TypeError(f"native backend option {name}= must be a list or tuple of pass names, got {value!r}")
    unknown = [p for p in value if p not in PASSES]
    if unknown:
        raise ValueError(f"native backend option {name}=: unknown pass{'es' if len(unknown) > 1 else ''} "
                         f"{', '.join(map(repr, unknown))}; available: {sorted(PASSES)}")
    return tuple(value)


def _threads(name: str, value: Any) -> int | None:
    return None if value is None else (_integer(name, value, 0) or None)


def _validate(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, (bool, np.bool_, str)):
        raise TypeError(f"native backend option {name}= must be 'strict', 'normal', 'off' or a bool, "
                        f"got {type(value).__name__} {value!r}")
    return validation_mode(bool(value) if isinstance(value, np.bool_) else value)


_MEMO: dict[tuple, NativeOptions] = {}  # option items -> their parse (bounded)
_PARSERS = {
    "passes": _passes,
    "fuse": _flag,
    "gemm_epilogue": _flag,
    "max_kernel_inputs": lambda n, v: _integer(n, v, 1),
    "num_threads": _threads,
    "parallel_threshold": lambda n, v: _integer(n, v, 0),
    "inplace": _flag,
    "simd": _flag,
    "validate": _validate,
    "prepack": _flag,
    "grads_from": lambda n, v: None if v is None else _integer(n, v, 0),
}
