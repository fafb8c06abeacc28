"""The suite runs with 64-bit dtypes enabled (``jax_enable_x64``): its tests compare with NumPy
float64 references. ``tests/x32/`` runs ember's default mode (64-bit inputs become 32-bit) against
JAX's default mode. The environment variable also reaches the subprocesses tests start."""

import os

os.environ["EMBER_ENABLE_X64"] = "1"
# every generated translation unit is checked for headers, prelude functions and support blocks
# used without being recorded by their emitters (native/emit/support.py)
os.environ["EMBER_CHECK_EMISSION"] = "1"

import ember  # noqa: E402

ember.config.update("jax_enable_x64", True)
