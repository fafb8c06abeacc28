"""C source of the call dispatcher extension module (built by :mod:`.dispatch`).

Kept apart from the Python that builds and uses it so the C reads as one piece. The module
``ember_dispatch`` defines three types:

* ``Entry``: one compiled native executable bound to one exact argument signature. Calling it
  checks the arguments (type, weak type, shape, dtype, C-contiguity), stores their data addresses
  and recycled output buffers in the executable's buffer table, takes the executable's lock
  (non-blocking: a busy executable is a miss), calls ``ember_main`` directly (releasing the GIL for
  programs that are not tiny: ``NativeExecutable._releases_gil``) and wraps the outputs in ember
  Arrays. Any mismatch returns the miss sentinel and the caller takes the Python path, which raises
  the proper errors.
* ``Dispatcher``: the entries of one jitted function, tried in order, plus the check that no
  dynamic trace is active.
* ``CallSlot``: a class's ``__call__`` in C (``jit`` makes it ``JitFunction.__call__`` once this
  module loads): it runs the ``Dispatcher`` an instance holds on the positional arguments and, on a
  miss, keywords or no dispatcher, the class's Python ``__call__``; a warm jitted call then runs no
  Python bytecode (the Python ``__call__``'s frame took ~0.4 us of a 1.2 us call).
"""

from ember._src.native.csrc import load

SOURCE = load("dispatch.c")
