"""C-level call dispatch: the warm path of a jitted call without Python bytecode in between.

A warm ``ember.jit(f)(x)`` call on the native backend used to spend ~5 us in Python (matching
the signature, filling the ctypes buffer table, taking recycled outputs, the ctypes call, wrapping
results) around a native program that may run in well under a microsecond. This module builds a
small CPython extension (``ember_dispatch``, C source in :mod:`.dispatch_src`) with the system
compiler -- cached on disk like every generated program -- whose ``Dispatcher`` does all of that in
C for signatures a :class:`~ember._src.jit.JitFunction` has already compiled.

The extension is built once per machine/Python/NumPy (cache key: source, flags, include
directories, compiler identity) in a background thread the first time a jitted function has a
warm signature, so no call waits for it; until it is loaded, calls take the Python fast path.
``EMBER_DISPATCH=0`` switches the C path off; without Python or NumPy C headers it stays off (logged
once at debug level). Anything the C path cannot serve exactly -- another shape, a non-contiguous
array, a busy executable, an active trace -- returns :data:`MISS` and the Python path runs, so
behaviour and error messages are the same with and without it.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import logging
import os
import sys
import sysconfig
from types import ModuleType
from typing import Any

import numpy as np

from ember._src import array, jit
from ember._src.native.runtime import compiler, library_check
from ember._src.native.runtime.background import BackgroundLibrary
from ember._src.native.runtime.dispatch_src import SOURCE

logger = logging.getLogger("ember")

MODULE_NAME = "ember_dispatch"


MISS = jit.MISS  # returned by a Dispatcher call it could not serve (the frontend's sentinel)


def enabled() -> bool:
    """Whether the C dispatcher may be used (``EMBER_DISPATCH`` not 0/off/false/no)."""
    return os.environ.get("EMBER_DISPATCH", "1").strip().lower() not in ("0", "off", "false", "no")


def include_dirs() -> list[str]:
    """Python's and NumPy's C header directories (raises OSError when either is missing)."""
    py = sysconfig.get_paths().get("include") or ""
    npy = np.get_include()
    for d, header in ((py, "Python.h"), (npy, os.path.join("numpy", "arrayobject.h"))):
        if not os.path.exists(os.path.join(d, header)):
            raise OSError(f"{header} not found in {d!r}")
    return [py, npy]


def source() -> str:
    """The extension's C source, stamped with the Python ABI and NumPy version it is built for."""
    abi = f"{sys.implementation.cache_tag} {sysconfig.get_config_var('EXT_SUFFIX')} numpy {np.__version__}"
    return f'#define EMBER_DISPATCH_ABI "{abi}"\n' + SOURCE


def build() -> ModuleType:
    """Compile (or load from the disk cache) and import the extension module.

    Built through :func:`compiler.build_library`, which leaves the compile counters alone: the
    build runs in the background and must not count towards a jitted function's ``cache_info``."""
    flags = tuple(f"-I{d}" for d in include_dirs())
    path = compiler.build_library(source(), name_hint="dispatch", extra_flags=flags)
    with library_check.opened_library(path) as name:  # checked and loaded from one open descriptor
        loader = importlib.machinery.ExtensionFileLoader(MODULE_NAME, name)
        spec = importlib.util.spec_from_file_location(MODULE_NAME, name, loader=loader)
        if spec is None:  # pragma: no cover - only for a broken importlib
            raise ImportError(f"cannot load {path}")
        mod = importlib.util.module_from_spec(spec)
        loader.exec_module(mod)
    mod.__file__ = mod.__spec__.origin = path  # the file's name, not the descriptor's
    array.install_native(mod.install_array)  # results built and freed in C from now on
    logger.debug("C call dispatcher loaded (%s)", mod.abi)
    return mod


_library: BackgroundLibrary[ModuleType] = BackgroundLibrary(
    "ember-dispatch-build", build,
    on_failure=lambda reason: logger.debug("C call dispatcher unavailable, calls stay on the Python path: %s",
                                           reason))


def module(wait: bool = False) -> ModuleType | None:
    """The loaded extension, or None while it is being built (the first request starts a
    background build) or when it is unavailable. ``wait=True`` blocks until the build ends."""
    if not enabled():
        return None
    return _library.get(wait)


def unavailable_reason() -> str | None:
    """Why the C path is off (None when it is loaded or still building)."""
    if not enabled():
        return "EMBER_DISPATCH is off"
    return _library.failure


def new_dispatcher() -> Any:
    """A Dispatcher for one jitted function (the extension must be loaded)."""
    from ember._src import core

    mod = _library.get()
    assert mod is not None
    return mod.Dispatcher(core._state, MISS)
