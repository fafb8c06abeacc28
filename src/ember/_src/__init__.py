"""ember internals: the core, primitives, transformations and backends."""
