"""Processes over MPI: see :mod:`.mpi`."""
