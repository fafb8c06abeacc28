"""Model functions replaced for the length of a ``torch.export`` call.

Some model code is right in eager mode but loses a dynamic axis when torch's export traces it: a
Python loop over the sequence fixes its length (``ssm.py``), and ``int()`` of a size or a branch on
one fixes the size or bakes in one branch (``tf_padding.py``). Each such function is replaced, in
the module that defines it, by one with the same arguments and results whose sizes stay symbolic,
and restored afterwards. Only modules the model's code already imported are touched.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

# (module name, function name or "Class.method", factory: original function -> replacement)
Patch = tuple[str, str, Callable[[Any], Any]]


@contextlib.contextmanager
def patched_functions(patches: Iterable[Patch]) -> Iterator[int]:
    """Within the block, each function of ``patches`` whose module is imported is replaced by
    ``factory(original)``; yields how many were replaced, and restores them on exit."""
    done = []
    for name, path, make in patches:
        owner: Any = sys.modules.get(name)
        *outer, attr = path.split(".")  # "Class.method" patches a method of a class of the module
        for part in outer:
            owner = getattr(owner, part, None)
        original = getattr(owner, attr, None) if owner is not None else None
        if original is not None:
            setattr(owner, attr, make(original))
            done.append((owner, attr, original))
    try:
        yield len(done)
    finally:
        for owner, attr, original in reversed(done):
            setattr(owner, attr, original)
