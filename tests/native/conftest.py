"""Native backend tests share one compile cache (compiles are the slow part), kept apart from the
rest of the run's and dropped after the package: later packages use the run's cache directory
(tests/conftest.py)."""

from __future__ import annotations

import os

import pytest

from ember._src.native.runtime import toolchain


@pytest.fixture(scope="package", autouse=True)
def _session_cache(tmp_path_factory: pytest.TempPathFactory):
    old = os.environ.get("EMBER_CACHE_DIR")
    os.environ["EMBER_CACHE_DIR"] = str(tmp_path_factory.mktemp("ember-native-cache"))
    yield
    if old is None:
        os.environ.pop("EMBER_CACHE_DIR", None)
    else:
        os.environ["EMBER_CACHE_DIR"] = old


requires_cc = pytest.mark.skipif(toolchain.find_compiler() is None, reason="no C compiler available")
