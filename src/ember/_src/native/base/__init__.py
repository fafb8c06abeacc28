"""Facts every stage of the native backend shares, below all of them: symbolic sizes
(:mod:`.symdims`), the size rules of matrix products (:mod:`.gemm_sizes`) and the arena's alignment
(:mod:`.layout`). These modules import no stage; ``tests/test_layering.py`` (``NATIVE_STAGES``) puts
this package, with ``opinfo`` and ``abi``, below the stages, which import only earlier ones."""
