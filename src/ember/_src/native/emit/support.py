"""The emission writer's record: what a translation unit needs besides its own functions.

Code that emits C states what the text it returns relies on by calling :func:`need` with the names
of those pieces, at the point where it writes the text:

* **headers**: ``"math.h"``, ``"string.h"``, ``"complex.h"``, ``"omp.h"`` (``<stdint.h>`` and
  ``<float.h>`` are always included);
* **inline math functions** of the C op table (``"em_expf"``, ``"em_c64_exp"``, ... -- the names of
  :data:`.c_ops.PRELUDE_FUNCS`; their dependencies follow);
* **support blocks**: helper C a program includes once (the Python callback's failure flag, the
  interrupt runtime's poll, symbolic-size helpers, the GEMM kernel's entry points, row exps, the
  thread pool, ``ember_main``'s pool context, the BLAS wrappers ``em_gemm_*``). The names and the
  text each stands for are listed in :data:`.codegen.BLOCKS`.

:func:`.codegen.generate` opens :func:`recording` for the whole translation unit (loop bodies
included) and assembles the includes, the prelude functions and the blocks from what was recorded;
it never searches the code it produced. With ``ember.config.native_check_emission`` set (the test
suite sets it), it also resolves the identifiers of the finished source against the headers and
helpers and raises when something used was not recorded, so a missing :func:`need` fails a test
instead of a compile.

A call outside :func:`recording` (an emitter used on its own, e.g. a renderer in a test) records
nothing. The record is a context variable, so threads compiling different programs at once (the
background compiles) each write their own.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["HEADERS", "need", "poll", "recording", "uses"]

# the optional headers, in the order their #include lines are written
HEADERS = ("string.h", "math.h", "complex.h", "omp.h")

_RECORD: ContextVar[dict[str, None] | None] = ContextVar("ember_emit_record", default=None)


def need(*names: str) -> None:
    """Record that the C being emitted uses ``names`` (headers, prelude functions, blocks)."""
    record = _RECORD.get()
    if record is not None:
        for n in names:
            record[n] = None


@contextmanager
def recording(record: dict[str, None]) -> Iterator[dict[str, None]]:
    """Collect the :func:`need` calls made inside the block into ``record`` (an insertion-ordered
    dict used as a set); nested recordings write to the innermost."""
    token = _RECORD.set(record)
    try:
        yield record
    finally:
        _RECORD.reset(token)


def poll() -> str:
    """The C condition that is true once Ctrl-C stopped the call (``runtime/interrupt.py``),
    recording the interrupt block when programs poll; ``0`` when they do not."""
    from ember._src.native.runtime import interrupt
    if interrupt.POLLING:
        need("interrupt")
    return interrupt.poll()


def uses(text: str) -> str:
    """Record the headers and prelude functions the C fragment ``text`` names (a rendered op, a
    call step's statements: resolved per fragment by :func:`.c_headers.headers_in` and
    :func:`.c_ops.prelude_names_in`, cached per text) and return ``text``."""
    if _RECORD.get() is not None:
        need(*_fragment_needs(text))
    return text


@functools.lru_cache(maxsize=4096)
def _fragment_needs(text: str) -> tuple[str, ...]:
    from ember._src.native.emit import c_headers, c_ops
    return (*c_headers.headers_in(text), *c_ops.prelude_names_in(text))
