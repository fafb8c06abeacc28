"""Helpers shared by test modules of several directories."""

import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

SRC_DIR = Path(__file__).resolve().parents[1] / "src"


def run_in_threads(target: Callable, args: Iterable) -> None:
    """Call ``target(a)`` for each ``a`` of ``args``, each in its own thread, all started before
    any is joined; returns when all have finished."""
    threads = [threading.Thread(target=target, args=(a,)) for a in args]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def child_env(cache_dir: Path) -> dict:
    """The environment of a child Python process that imports this checkout's ember and uses
    ``cache_dir`` as its compile cache."""
    env = dict(os.environ, EMBER_CACHE_DIR=str(cache_dir))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC_DIR), env.get("PYTHONPATH")]))
    return env
