"""The compile cache's files: :mod:`ember._src.cache_files` under its older name.

The module moved to the base layer so the GPU backends' kernel cache shares it with the native
backend; this name is the same module object (``sys.modules`` holds the one module under both
names), so attributes set on either, in code or by a test's monkeypatch, are seen by both.
"""

from __future__ import annotations

import sys

from ember._src import cache_files as _shared

sys.modules[__name__] = _shared
