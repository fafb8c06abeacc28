"""The python examples of docs/torch.md run."""

import pathlib
import re

import pytest

pytest.importorskip("torch", reason="docs/torch.md's examples need torch")
pytest.importorskip("transformers", reason="docs/torch.md's examples need transformers")

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "torch.md"


def test_torch_md_examples_run(capsys):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) >= 4
    ns: dict = {}
    for b in blocks:
        exec(compile(b, str(DOC), "exec"), ns)  # noqa: S102 - the documentation's own examples
    assert "aten.special_bessel_j0.default" in capsys.readouterr().out
