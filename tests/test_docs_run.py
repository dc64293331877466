"""Every Python block in the documentation runs: README.md, CONTRIBUTING.md and docs/*.md. The
blocks of one file run in order in one fresh process (as a reader pastes them), in an empty
folder, so a block that breaks, or leans on a name no earlier block defines, fails here.

Shell blocks (```bash) are commands for a terminal: CI runs the README's two commands itself."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted(["README.md", "CONTRIBUTING.md"] + [str(p.relative_to(ROOT))
                                                   for p in (ROOT / "docs").glob("*.md")])
BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)


def python_blocks(doc: str) -> list[str]:
    return BLOCK.findall((ROOT / doc).read_text())


def test_the_readme_has_python_blocks():
    assert len(python_blocks("README.md")) >= 2


@pytest.mark.parametrize("doc", [d for d in DOCS if python_blocks(d)])
def test_documented_python_blocks_run(doc, tmp_path):
    code = "\n".join(f"# --- block {i + 1} of {doc}\n{b}" for i, b in enumerate(python_blocks(doc)))
    out = subprocess.run([sys.executable, "-W", "error::UserWarning", "-c", code],
                         capture_output=True, text=True, cwd=tmp_path, timeout=600,
                         env=dict(os.environ, PYTHONWARNINGS="error::UserWarning"))
    assert out.returncode == 0, f"{doc}:\n{out.stderr[-3000:]}"
