"""Process-wide configuration flags: a name, a default, an environment variable, a value.

Flags are configuration (the one kind of global mutable state ember keeps besides caches). Each
is declared once, next to the code that reads it, with :func:`define_bool`; its value comes from
the environment variable when set (``1/true/on/yes`` or ``0/false/off/no``), else the default.
``ember.config.update(name, value)`` and :func:`override` change it at run time.

A flag that changes what a traced program computes (e.g. the random-bits scheme) is read when the
program is traced: jitted functions traced before a change keep the behaviour they were traced
with until their cache is cleared (``f.clear_cache()``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

_TRUE = ("1", "true", "on", "yes")
_FALSE = ("0", "false", "off", "no")


@dataclass
class Flag:
    """One boolean configuration flag."""

    name: str
    default: bool
    env: str
    help: str
    value: bool
    watchers: list = field(default_factory=list)

    def __bool__(self) -> bool:
        return self.value


FLAGS: dict[str, Flag] = {}


def _parse_env(env: str, default: bool, aliases: tuple[str, ...] = ()) -> bool:
    raw = os.environ.get(env, "").strip().lower()
    for alias in aliases:
        if raw:
            break
        env, raw = alias, os.environ.get(alias, "").strip().lower()
    if not raw:
        return default
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ValueError(f"environment variable {env}={raw!r}: expected one of {_TRUE + _FALSE}")


def define_bool(name: str, default: bool, env: str, help: str,
                env_aliases: tuple[str, ...] = ()) -> Flag:
    """Declare a boolean flag (once per name) and return it; its value is read from ``env`` (or,
    when that is unset, from the first of ``env_aliases`` that is set)."""
    if name in FLAGS:
        raise ValueError(f"flag {name!r} is already defined")
    flag = Flag(name, default, env, help, _parse_env(env, default, env_aliases))
    FLAGS[name] = flag
    return flag


def get(name: str) -> bool:
    """The current value of flag ``name``."""
    return _lookup(name).value


def set_flag(name: str, value: bool) -> None:
    """Set flag ``name`` (a bool) for the rest of the process."""
    if not isinstance(value, (bool, int)) or isinstance(value, int) and value not in (0, 1):
        raise TypeError(f"flag {name!r} takes a bool, got {value!r}")
    _assign(_lookup(name), bool(value))


def _assign(flag: Flag, value: bool) -> None:
    if flag.value != value:
        flag.value = value
        for watcher in list(flag.watchers):
            watcher()


def watch(name: str, callback: Callable[[], None]) -> None:
    """Call ``callback()`` after each change of flag ``name`` (e.g. to drop caches that depend
    on it)."""
    _lookup(name).watchers.append(callback)


@contextlib.contextmanager
def override(name: str, value: bool) -> Iterator[None]:
    """Set flag ``name`` to ``value`` inside a ``with`` block, restoring it afterwards."""
    flag = _lookup(name)
    old = flag.value
    set_flag(name, value)
    try:
        yield
    finally:
        _assign(flag, old)


def _lookup(name: str) -> Flag:
    try:
        return FLAGS[name]
    except KeyError:
        known = ", ".join(sorted(FLAGS)) or "none"
        raise KeyError(f"unknown configuration flag {name!r} (known: {known})") from None
