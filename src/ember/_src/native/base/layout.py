"""Memory-layout facts shared by the stages that size buffers (the loop stage's carry slots) and the
planner that places them."""

from __future__ import annotations

ALIGN = 64  # every arena buffer's alignment (the planner's); a scratch request may ask for a divisor of it
