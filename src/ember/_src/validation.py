"""Validation at phase boundaries: a registry of validators, findings with severities, modes.

A *validator* checks one kind of object at one phase boundary of compilation and returns a list of
:class:`Finding`. Phases and the object a validator of that phase receives:

* ``"traced"``: the :class:`~ember._src.program.Program` ``jit`` traced;
* ``"optimized"``: the Program after the native backend's passes;
* ``"planned"``: an object with ``.schedule`` and ``.plan`` (a native executable, or a
  :class:`Planned`); its validators are registered by the backend that plans
  (``native/validators.py``), so this module imports nothing above the Program;
* ``"execute"``: an :class:`ExecuteCheck` (the expected input avals and the call's arguments).

Modes (:func:`set_validation`, ``$EMBER_VALIDATE``, the ``jit`` option ``validate=``):

* ``"off"``: nothing runs;
* ``"normal"`` (the default): the cheap validators run; an error raises
  :class:`~ember.errors.ValidationError`, a warning is logged on the ``ember`` logger;
* ``"strict"``: every validator runs (also the expensive ones, such as the arena overlap check,
  and the ``execute`` phase on every call); warnings raise too.

``validate=True``/``False`` mean ``"normal"``/``"off"``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ember._src.program import Var, definition_errors, eqn_effectful, validate
from ember.errors import ValidationError

logger = logging.getLogger("ember")

PHASES = ("traced", "optimized", "planned", "execute")
MODES = ("strict", "normal", "off")
SEVERITIES = ("error", "warning", "info")
ENV_VAR = "EMBER_VALIDATE"


@dataclass(frozen=True)
class Finding:
    """One result of a validator: ``severity`` is ``"error"``, ``"warning"`` or ``"info"``."""

    severity: str
    phase: str
    validator: str
    message: str

    def __str__(self) -> str:
        return f"[{self.severity}] {self.phase}/{self.validator}: {self.message}"


@dataclass(frozen=True)
class _Validator:
    name: str
    phase: str
    fn: Callable[[Any], list[Finding]]
    expensive: bool


_REGISTRY: dict[str, list[_Validator]] = {p: [] for p in PHASES}


def validator(phase: str | Sequence[str], name: str, *, expensive: bool = False) -> Callable:
    """Register ``fn(obj) -> list[Finding]`` for one phase (or several). ``expensive`` validators
    run only in ``"strict"`` mode. Re-registering a name replaces the earlier validator."""
    phases = (phase,) if isinstance(phase, str) else tuple(phase)
    for p in phases:
        if p not in PHASES:
            raise ValueError(f"unknown validation phase {p!r}; phases: {PHASES}")

    def register(fn: Callable[[Any], list[Finding]]) -> Callable[[Any], list[Finding]]:
        for p in phases:
            lst = _REGISTRY[p]
            lst[:] = [v for v in lst if v.name != name]
            lst.append(_Validator(name, p, fn, expensive))
        return fn

    return register


def validators(phase: str) -> list[tuple[str, bool]]:
    """``(name, expensive)`` of the validators registered for ``phase``, in run order."""
    return [(v.name, v.expensive) for v in _REGISTRY[phase]]


_mode_override: str | None = None


def _normalize(mode: Any, what: str) -> str:
    if mode is True:
        return "normal"
    if mode is False:
        return "off"
    m = str(mode).strip().lower()
    if m not in MODES:
        raise ValueError(f"{what}: validation mode must be one of {MODES} (or True/False), got {mode!r}")
    return m


def set_validation(mode: str | bool | None) -> None:
    """Set the process-wide validation mode of native/jit compiles: strict, normal or off.

    ``"strict"``, ``"normal"``, ``"off"`` (``True`` / ``False`` mean normal / off; ``None`` returns
    to ``$EMBER_VALIDATE`` or ``"normal"``).

    It applies to programs compiled afterwards; a ``jit(..., validate=...)`` option overrides it.
    """
    global _mode_override
    _mode_override = None if mode is None else _normalize(mode, "set_validation")


def validation_mode(option: Any = None) -> str:
    """The mode in effect: ``option`` (a jit/backend ``validate=`` value) when not None, else the one
    set with :func:`set_validation`, else ``$EMBER_VALIDATE``, else ``"normal"``."""
    if option is not None:
        return _normalize(option, "validate=")
    if _mode_override is not None:
        return _mode_override
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        return _normalize(env, f"${ENV_VAR}")
    return "normal"


def run_validators(phase: str, obj: Any, mode: str | bool | None = None) -> list[Finding]:
    """Run the validators of ``phase`` on ``obj`` under ``mode`` (None: :func:`validation_mode`).

    Returns the findings. Raises :class:`ValidationError` listing them when one is an error, or in
    ``"strict"`` mode a warning; other warnings are logged on the ``ember`` logger.
    """
    mode = validation_mode(mode)
    if mode == "off":
        return []
    strict = mode == "strict"
    findings: list[Finding] = []
    for v in _REGISTRY[phase]:
        if v.expensive and not strict:
            continue
        try:
            # the finding is reported under the phase and name it ran as
            findings.extend(Finding(f.severity, phase, v.name, f.message) for f in v.fn(obj))
        except ValidationError as err:
            findings.append(Finding("error", phase, v.name, str(err)))
    fatal = [f for f in findings if f.severity == "error" or (strict and f.severity == "warning")]
    if fatal:
        raise ValidationError(f"{len(fatal)} validation finding(s) at phase {phase!r} ({mode}):\n" +
                              "\n".join(f"  {f}" for f in fatal))
    for f in findings:  # not logger.warning: a fallback step is legitimate, not worth stderr noise
        if f.severity == "warning":
            logger.info("ember validation: %s", f)
        elif f.severity == "info":
            logger.debug("ember validation: %s", f)
    return findings


# ---------------------------------------------------------------------------------------------
# Objects of the later phases
# ---------------------------------------------------------------------------------------------


@dataclass
class Planned:
    """What the ``planned`` validators see: a schedule and its memory plan."""

    schedule: Any
    plan: Any


@dataclass
class ExecuteCheck:
    """What the ``execute`` validators see: expected ``(shape, dtype)`` per input, and the args."""

    in_avals: Sequence[tuple[tuple, np.dtype]]
    args: Sequence[Any]


# ---------------------------------------------------------------------------------------------
# Program validators (traced and optimized)
# ---------------------------------------------------------------------------------------------


def _finding(sev: str, phase: str, name: str, msg: str) -> Finding:
    return Finding(sev, phase, name, msg)


@validator(("traced", "optimized"), "ssa")
def _ssa(p: Any) -> list[Finding]:
    """SSA well-formedness and types: :func:`ember._src.program.validate`."""
    try:
        validate(p)
    except ValidationError as err:
        return [_finding("error", "program", "ssa", str(err))]
    return []


@validator(("traced", "optimized"), "producers")
def _producers(p: Any) -> list[Finding]:
    """Every value used has exactly one producer (constant, input or an earlier equation)."""
    return [_finding("error", "program", "producers", m) for m in definition_errors(p)]


@validator(("traced", "optimized"), "avals", expensive=True)
def _avals(p: Any) -> list[Finding]:
    """Each equation's output shapes and dtypes equal what its abstract-eval rule re-derives
    (every mismatch is reported, not only the first)."""
    out: list[Finding] = []
    for i, e in enumerate(p.eqns):
        try:
            expected = e.prim.abstract([a.aval for a in e.inputs], e.params)
        except Exception as err:  # noqa: BLE001 - reported as a finding
            out.append(_finding("error", "program", "avals", f"equation {i} ({e.prim.name}): {err}"))
            continue
        if len(expected) != len(e.outvars):
            out.append(_finding("error", "program", "avals", f"equation {i} ({e.prim.name}): "
                                f"{len(e.outvars)} outputs, rule says {len(expected)}"))
            continue
        for v, a in zip(e.outvars, expected):
            if (tuple(v.aval.shape), np.dtype(v.aval.dtype)) != (tuple(a.shape), np.dtype(a.dtype)):
                out.append(_finding("error", "program", "avals", f"equation {i} ({e.prim.name}): output "
                                    f"typed {v.aval.str_short()} but the rule infers {a.str_short()}"))
    return out


@validator("optimized", "dead_code")
def _dead_code(p: Any) -> list[Finding]:
    """Warns about equations whose outputs nothing uses (dead code dce should have removed)."""
    live = {a.id for a in p.outvars if isinstance(a, Var)}
    out: list[Finding] = []
    for i in range(len(p.eqns) - 1, -1, -1):
        e = p.eqns[i]
        if any(v.id in live for v in e.outvars) or eqn_effectful(e):
            live.update(a.id for a in e.inputs if isinstance(a, Var))
        else:
            out.append(_finding("warning", "optimized", "dead_code",
                                f"equation {i} ({e.prim.name}) is dead after the passes"))
    out.reverse()
    return out


# ---------------------------------------------------------------------------------------------
# Execute validators
# ---------------------------------------------------------------------------------------------


@validator("execute", "input_avals")
def _input_avals(obj: ExecuteCheck) -> list[Finding]:
    """The call's inputs have the number, shapes and dtypes the executable was built for."""
    if len(obj.args) != len(obj.in_avals):
        return [_finding("error", "execute", "input_avals",
                         f"{len(obj.args)} inputs given, the program takes {len(obj.in_avals)}")]
    out: list[Finding] = []
    for i, (a, (shape, dtype)) in enumerate(zip(obj.args, obj.in_avals)):
        s, d = tuple(np.shape(a)), np.asarray(a).dtype if not hasattr(a, "dtype") else np.dtype(a.dtype)
        if s != tuple(shape) or d != np.dtype(dtype):
            out.append(_finding("error", "execute", "input_avals", f"input {i}: expected {np.dtype(dtype)}"
                                f"{list(shape)}, got {d}{list(s)}"))
    return out
