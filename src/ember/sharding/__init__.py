"""``ember.sharding``: JAX's sharding API over MPI processes (``jax.sharding``). A mesh's devices
are the processes of ``mpirun -n N`` (one process without MPI: a mesh of one). See
``docs/sharding.md``."""

from ember._src.distributed.shard_map import shard_map
from ember._src.sharding import (
    AxisType,
    Mesh,
    NamedSharding,
    PartitionSpec,
    Shard,
    Sharding,
    SingleDeviceSharding,
    get_abstract_mesh,
    get_mesh,
    make_mesh,
    reshard,
    set_mesh,
    use_mesh,
)

P = PartitionSpec

__all__ = ["AxisType", "Mesh", "NamedSharding", "P", "PartitionSpec", "Shard", "Sharding",
           "SingleDeviceSharding", "get_abstract_mesh", "get_mesh", "make_mesh", "reshard", "set_mesh",
           "shard_map", "use_mesh"]
