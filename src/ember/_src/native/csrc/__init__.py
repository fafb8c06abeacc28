"""Hand-written C of the native backend, as package resources: one ``.c``/``.h`` file per piece
(the call dispatcher, the thread pool, the FFT helpers), each readable and compilable on its own.
Python assembles a translation unit from them by prepending ``#define`` lines, never by replacing
text; the compile cache's key covers every byte that goes into a library."""

from __future__ import annotations

import functools
import hashlib
import re
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


_SECTION = re.compile(r"^/\*@ (\w+)(?: after ([\w ]+))? \*/$", re.M)


@functools.cache
def sections(name: str) -> dict[str, tuple[tuple[str, ...], str]]:
    """The sections of resource ``name``: each starts at a marker line ``/*@ fn [after dep ...] */``
    and runs to the next marker; ``{fn: (deps, text)}`` in file order (the text after the marker
    line). A file of such sections is a library of functions a program includes one by one."""
    text = load(name)
    marks = list(_SECTION.finditer(text))
    out: dict[str, tuple[tuple[str, ...], str]] = {}
    for m, nxt in zip(marks, [*marks[1:], None]):
        body = text[m.end() + 1:nxt.start() if nxt is not None else len(text)]
        out[m.group(1)] = (tuple((m.group(2) or "").split()), body)
    return out
