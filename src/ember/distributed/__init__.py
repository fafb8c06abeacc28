"""``ember.distributed``: data-parallel training and batch inference across processes over MPI.

Launch with ``mpirun -n N python script.py`` (``pip install 'ember[distributed]'`` gives mpi4py and
an MPI runtime). See ``docs/distributed.md``.
"""

from ember._src.distributed.mpi import (
    DistributedError,
    all_gather,
    all_reduce,
    barrier,
    broadcast,
    check_identical,
    data_parallel,
    gather,
    initialize,
    process_count,
    process_index,
    shard,
)
from ember._src.distributed.spmd import spmd

__all__ = ["DistributedError", "all_gather", "all_reduce", "barrier", "broadcast", "check_identical",
           "data_parallel", "gather", "initialize", "process_count", "process_index", "shard", "spmd"]
