"""Run under ``mpirun -n N`` with ``SESSION_DIR DATA.npy OUT.npy``: batch inference across
processes. Each process loads the saved InferenceSession (no torch needed), runs its contiguous
shard of the data set (``ember.distributed.shard``: sizes differ when N does not divide the rows),
and process 0 gathers the outputs in order (``ember.distributed.gather``) and saves them. Prints
``OK <rank> <rows>``."""

from __future__ import annotations

import sys

import numpy as np

import ember
from ember import distributed as dist

if __name__ == "__main__":
    dist.initialize()
    session = ember.InferenceSession.load(sys.argv[1])
    mine = np.asarray(dist.shard(np.load(sys.argv[2])))
    out = session.run({"x": mine})["output"]
    everything = dist.gather(out, root=0)
    if dist.process_index() == 0:
        np.save(sys.argv[3], np.asarray(everything))
    print(f"OK {dist.process_index()} {len(mine)}", flush=True)
