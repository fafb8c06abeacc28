"""The README's commands, .ci/run and docs/FEATURES.md stay in sync with the code."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```bash\n(.+?)\n```", text)


def test_ci_runs_the_readme_test_command():
    cmds = _readme_commands()
    test_cmd = next(c for c in cmds if "pytest" in c)
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_cmd.strip() in ci


def test_readme_demo_command_is_the_module_entry_point():
    demo = next(c for c in _readme_commands() if "demo" in c)
    assert "python -m ember demo" in demo


def test_features_md_is_current():
    from ember._src.features import render
    assert (ROOT / "docs" / "FEATURES.md").read_text() == render(), \
        "docs/FEATURES.md is stale: run `python -m ember._src.features > docs/FEATURES.md`"


def test_demo_runs_and_succeeds():
    out = subprocess.run([sys.executable, "-m", "ember", "demo", "--steps", "120"], capture_output=True,
                         text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "train accuracy" in out.stdout and "OK" in out.stdout
