"""The suite runs with 64-bit dtypes enabled (``jax_enable_x64``): its tests compare with NumPy
float64 references. ``tests/x32/`` runs ember's default mode (64-bit inputs become 32-bit) against
JAX's default mode. The environment variables also reach the subprocesses tests start.

The compile cache of a test run is a directory of its own (``EMBER_CACHE_DIR``), created by the
process that starts the run and inherited by its pytest-xdist workers and by every subprocess a
test starts: what a test sees in the cache (a library found on disk, a compile counted) does not
depend on what other runs, other checkouts or earlier crashes left in the user's shared cache
(``~/.cache/ember``), nor on them writing there at the same time. The directory is removed when the
run ends. Hypothesis runs without its per-example deadline (a wall-clock limit that a loaded
machine exceeds, not a property of ember) and derandomized: each property test draws the same
examples in every run, so its outcome does not change from one run to the next."""

import os
import shutil
import tempfile

import hypothesis

_RUN_CACHE = "EMBER_TEST_RUN_CACHE"  # set by the process that created the run's cache directory
_created_cache = None
if not os.environ.get(_RUN_CACHE):  # the controller (or the only process): xdist workers inherit it
    _created_cache = tempfile.mkdtemp(prefix="ember-test-cache-")
    os.environ["EMBER_CACHE_DIR"] = os.environ[_RUN_CACHE] = _created_cache

os.environ["EMBER_ENABLE_X64"] = "1"
# every generated translation unit is checked for headers, prelude functions and support blocks
# used without being recorded by their emitters (native/emit/support.py)
os.environ["EMBER_CHECK_EMISSION"] = "1"

hypothesis.settings.register_profile("ember", deadline=None, derandomize=True)
hypothesis.settings.load_profile("ember")

import ember  # noqa: E402

ember.config.update("jax_enable_x64", True)


def pytest_unconfigure(config) -> None:
    """The process that created the run's compile cache removes it, once its own background builds
    (which write there) have ended; its xdist workers and the tests' subprocesses have exited."""
    if _created_cache is not None:
        from ember._src.native.runtime import background

        background._finish_builds()
        shutil.rmtree(_created_cache, ignore_errors=True)
