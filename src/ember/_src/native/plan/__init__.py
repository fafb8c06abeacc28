"""Memory planning: liveness, in-place reuse and arena offsets, named scratch requests, and the
symbolic sizes and per-binding layouts of programs with named dynamic axes."""
