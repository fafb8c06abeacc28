"""Program -> Program rewrites before scheduling: the passes, the analyses they share, and the backend-
internal primitives they rewrite into."""
