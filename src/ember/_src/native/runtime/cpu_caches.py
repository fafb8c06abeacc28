"""The CPU's cache sizes, read once from Linux's sysfs (cost rules of the convolution kernels use
them). Elsewhere, or where sysfs does not say, the caller's default."""

from __future__ import annotations

import functools

_SYSFS = "/sys/devices/system/cpu/cpu0/cache"


def _parse(text: str) -> int | None:
    """``"2048K"`` / ``"1M"`` / ``"512"`` -> bytes (None when it is not a size)."""
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    digits = text[:-1] if scale != 1 else text
    return int(digits) * scale if digits.isdigit() else None


@functools.cache
def level_bytes(level: int) -> int | None:
    """Bytes of the first core's data or unified cache of ``level`` (None when unknown)."""
    for i in range(8):
        try:
            with open(f"{_SYSFS}/index{i}/level") as f:
                if int(f.read()) != level:
                    continue
            with open(f"{_SYSFS}/index{i}/type") as f:
                if f.read().strip() == "Instruction":
                    continue
            with open(f"{_SYSFS}/index{i}/size") as f:
                return _parse(f.read())
        except (OSError, ValueError):
            return None
    return None


def l2_bytes(default: int = 1 << 20) -> int:
    """The L2 cache of one core in bytes (``default`` when unknown)."""
    return level_bytes(2) or default
