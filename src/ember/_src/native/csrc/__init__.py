"""Hand-written C of the native backend, as package resources: one ``.c``/``.h`` file per piece
(the call dispatcher, the thread pool, the FFT helpers), each readable and compilable on its own.
Python assembles a translation unit from them by prepending ``#define`` lines, never by replacing
text; the compile cache's key covers every byte that goes into a library."""

from __future__ import annotations

import functools
import hashlib
from importlib import resources


@functools.cache
def load(name: str) -> str:
    """The text of the C resource ``name`` (e.g. ``"dispatch.c"``)."""
    return resources.files(__package__).joinpath(name).read_text()


def names() -> list[str]:
    """Every C resource of this package."""
    return sorted(p.name for p in resources.files(__package__).iterdir() if p.name.endswith((".c", ".h")))


def with_symbol(name: str, prefix: str, define: str) -> tuple[str, str]:
    """(resource ``name`` with ``#define <define> <symbol>`` in front, ``symbol``): a per-machine
    library's exported name is ``prefix`` plus a hash of its source, so two versions of the library
    never resolve each other's symbols."""
    text = load(name)
    symbol = prefix + hashlib.sha256(text.encode()).hexdigest()[:12]
    return f"#define {define} {symbol}\n" + text, symbol
