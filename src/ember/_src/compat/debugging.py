"""``ember.debug.print`` and ``ember.debug.callback``: host callbacks for their effect, as ``jax.debug``.

Both bind the effectful ``debug_callback`` primitive (:mod:`ember._src.prims.debug_callback`), so
they run when the program runs (every call of a ``jit`` function, every iteration of a compiled
loop), in program order, never removed because nothing uses their (absent) result. The arguments
are split like JAX's: array-like leaves (ember arrays, tracers, NumPy arrays, Python numbers) are
traced values handed over as eager ember Arrays (as JAX hands over ``jax.Array`` s); any other leaf
(a string, ``None``, an object) is static and passed through unchanged.
"""

from __future__ import annotations

import inspect
import pdb
import string
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from ember._src.core import Tracer, get_aval
from ember._src.prims.debug_callback import debug_callback_bind
from ember._src.tree import flatten, unflatten


def _split(args: tuple, kwargs: dict) -> tuple[Any, list, dict[int, Any]]:
    """The flattened ``(args, kwargs)``: tree, the traced (array-like) leaves, the static ones by position."""
    leaves, tree = flatten((args, kwargs))
    dyn, static = [], {}
    for i, leaf in enumerate(leaves):
        try:
            get_aval(leaf)
        except TypeError:
            static[i] = leaf
        else:
            dyn.append(leaf)
    return tree, dyn, static


def _merge(tree: Any, dyn: tuple, static: dict[int, Any]) -> tuple[tuple, dict]:
    it = iter(dyn)
    leaves = [static[i] if i in static else next(it) for i in range(len(static) + len(dyn))]
    return unflatten(tree, leaves)


def _stage(fn: Callable[..., Any], args: tuple, kwargs: dict, ordered: bool, name: str) -> None:
    tree, dyn, static = _split(args, kwargs)

    def flat_callback(*arrays: np.ndarray) -> None:
        a, kw = _merge(tree, arrays, static)
        fn(*a, **kw)

    flat_callback.__name__ = name
    debug_callback_bind(flat_callback, *dyn, ordered=ordered)


def debug_callback(callback: Callable[..., Any] | None = None, *args: Any, ordered: bool = False,
                   partitioned: bool = False, **kwargs: Any) -> Callable[..., None] | None:
    """Call ``callback(*args, **kwargs)`` on the host for its effect, from eager or traced code.

    As ``jax.debug.callback``: the call happens when the program runs (inside ``jit``, compiled
    loops, ``cond`` branches), once per batch element under ``vmap``, with the primal values under
    ``jvp``/``grad`` (in the forward pass). Array arguments arrive as ember Arrays (copies the
    callback may keep, as JAX passes ``jax.Array`` s); other leaves of ``args``/``kwargs`` are
    passed unchanged. The result of ``callback`` is ignored; this returns ``None``. Calls run in
    program order, so ``ordered`` is accepted for compatibility and changes nothing;
    ``partitioned`` likewise (one process, no shards). Called with no ``callback``
    (``debug.callback(ordered=True)``), it returns a function taking ``(callback, *args,
    **kwargs)``: JAX's two-call form.
    """
    def stage(fn: Callable[..., Any], *a: Any, **kw: Any) -> None:
        if not callable(fn):
            raise TypeError(f"debug.callback: callback must be callable, got an object of type "
                            f"{type(fn).__name__}")
        _stage(fn, a, kw, ordered, getattr(fn, "__name__", "callback"))

    return _now_or_later("debug.callback", stage, callback, args, kwargs)


class _FormatCheck(string.Formatter):
    """Parses ``fmt`` against the arguments without formatting them (tracers have no values yet)."""

    def format_field(self, value: Any, format_spec: str) -> str:
        return ""

    def check_unused_args(self, used_args: Any, args: Any, kwargs: Any) -> None:
        unused = [a for i, a in enumerate(args) if i not in used_args]
        unused_kw = [k for k in kwargs if k not in used_args]
        if unused:
            raise ValueError(f"debug.print: unused positional arguments: {unused}")
        if unused_kw:
            raise ValueError(f"debug.print: unused keyword arguments: {unused_kw} (an f-string such as "
                             f"f\"{{x}}\" formats too early: pass \"{{x}}\" and x=x instead)")


def _has_fields(fmt: str) -> bool:
    return any(field is not None for _, field, _, _ in string.Formatter().parse(fmt))


def _printer(fmt: str, placeholders: bool, printoptions: dict) -> Callable[..., None]:
    def write(*args: Any, **kwargs: Any) -> None:
        if placeholders:
            with np.printoptions(**printoptions):
                msg = fmt.format(*args, **kwargs)
        else:
            msg = " ".join((fmt, *(str(a) for a in args)))
        sys.stdout.write(msg + "\n")  # looked up per call: redirections (pytest's capsys) apply
    return write


def debug_print(fmt: str | None = None, *args: Any, ordered: bool = False, partitioned: bool = False,
                skip_format_check: bool = False, **kwargs: Any) -> Callable[..., None] | None:
    """Print ``fmt.format(*args, **kwargs)`` to ``sys.stdout`` with the values the program computes.

    As ``jax.debug.print``: works in eager code and under ``jit``, ``vmap`` (one line per batch
    element), ``grad``/``jvp`` (primal values, printed in the forward pass) and in the bodies of
    ``scan``/``fori_loop``/``while_loop``/``cond`` (one line per iteration taken). Arrays are
    formatted as NumPy formats them, under the NumPy print options in effect when
    ``debug.print`` was called. Formatting is delayed, so pass ``"{x}", x=x``, not an f-string:
    an argument the format string does not use raises ``ValueError`` (``skip_format_check=True``
    skips that check; arguments of a ``fmt`` without fields are then printed after it, separated
    by spaces). ``ordered``/``partitioned`` as in :func:`debug_callback`. Called with no ``fmt``
    (``debug.print(ordered=True)``) it returns a function taking ``(fmt, *args, **kwargs)``.
    """
    def stage(f: str, *a: Any, **kw: Any) -> None:
        if not isinstance(f, str):
            raise TypeError(f"debug.print: fmt must be a str, got {type(f).__name__}")
        if not skip_format_check:
            _FormatCheck().format(f, *a, **kw)
        placeholders = _has_fields(f)
        if kw and not placeholders:
            raise ValueError(f"debug.print: keyword arguments {sorted(kw)} given but fmt {f!r} has no fields")
        _stage(_printer(f, placeholders, dict(np.get_printoptions())), a, kw, ordered, f"print {f!r}")

    return _now_or_later("debug.print", stage, fmt, args, kwargs)


def _interactive() -> bool:
    try:
        return bool(sys.stdin is not None and sys.stdin.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _stop(where: str, env: dict[str, Any], frame_globals: dict[str, Any]) -> None:
    """At run time: a ``pdb`` prompt over the caller's variables (traced ones with their values), or,
    without a terminal on stdin, one line on stderr and on with the program."""
    if not _interactive():
        sys.stderr.write(f"ember.debug.breakpoint at {where}: stdin is not a terminal, not stopping\n")
        return
    sys.stdout.write(f"ember.debug.breakpoint at {where}; variables: {', '.join(sorted(env))}. "
                     "'p name' prints one, 'c' continues.\n")
    pdb.Pdb(stdin=sys.stdin, stdout=sys.stdout).run("pass", frame_globals, env)


def debug_breakpoint(*, backend: str | None = None, filter_frames: bool = True, num_frames: int | None = None,
                     ordered: bool = False, token: Any = None, **kwargs: Any) -> Any:
    """Stop at this point when the program runs and inspect the caller's variables, as
    ``jax.debug.breakpoint``.

    Works eagerly and inside ``jit``, loops, ``cond`` and ``vmap`` (one stop per batch element): the
    caller's traced local variables are passed to the host with their computed values and a
    ``pdb`` prompt opens over all its locals (``p x``, then ``c`` to continue). When stdin is not a
    terminal (a batch job, a test run), nothing waits for input: one line naming the location goes
    to stderr and the program continues. ``backend``, ``filter_frames``, ``num_frames`` and
    ``ordered`` are accepted for compatibility (calls always run in program order); ``token`` is
    returned unchanged.
    """
    if backend not in (None, "cli"):
        raise ValueError(f"debug.breakpoint: backend {backend!r} is not available (ember has 'cli')")
    frame = inspect.currentframe()
    caller = frame.f_back if frame is not None else None
    if caller is None:
        names, traced, static, frame_globals, where = [], [], {}, {}, "<unknown>"
    else:
        local = dict(caller.f_locals)
        names = [k for k, v in local.items() if isinstance(v, Tracer)]
        traced = [local[k] for k in names]
        static = {k: v for k, v in local.items() if k not in names}
        frame_globals, where = caller.f_globals, f"{caller.f_code.co_filename}:{caller.f_lineno}"
    del frame, caller

    def stop(*values: Any) -> None:
        _stop(where, {**static, **dict(zip(names, values))}, frame_globals)

    stop.__name__ = "breakpoint"
    _stage(stop, tuple(traced), {}, ordered, "breakpoint")
    return token


def _now_or_later(what: str, stage: Callable[..., None], first: Any, args: tuple, kwargs: dict) -> Any:
    """Stage the call now when its first argument was given; otherwise JAX's two-call form
    (``debug.print(ordered=True)(fmt, x)``) returns ``stage`` for the second call."""
    if first is not None:
        stage(first, *args, **kwargs)
        return None
    if args or kwargs:
        raise TypeError(f"{what}: unexpected arguments in the two-call form: {args=} {kwargs=}")
    return stage


__all__ = ["debug_callback", "debug_print"]
