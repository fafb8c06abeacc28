"""The examples of docs/jax_compat.md run."""

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "jax_compat.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


@pytest.mark.parametrize("i", range(len(BLOCKS)))
def test_example_runs(i, capsys):
    exec(compile(BLOCKS[i], f"{DOC.name}[{i}]", "exec"), {})  # noqa: S102 - the docs' own examples
