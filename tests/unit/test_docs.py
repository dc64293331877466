"""The docs hold: docstring examples run (doctest), every test that docs/SEMANTICS.md and the
README cite exists, and nothing in the project points outside the repository."""
import doctest
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import dml_numba.ops

ROOT = Path(__file__).resolve().parents[2]
MODULES = ["dml_numba", "dml_numba.tensor", "dml_numba.functional"] + [
    f"dml_numba.ops.{m.name}" for m in pkgutil.iter_modules(dml_numba.ops.__path__)
    if not m.name.startswith("_") and m.name != "activation"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0


def _test_names() -> set:
    names = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        names |= set(re.findall(r"^def (test_\w+)", path.read_text(), re.M))
    return names


@pytest.mark.parametrize("doc", ["docs/SEMANTICS.md", "README.md"])
def test_every_cited_test_exists(doc):
    cited = set(re.findall(r"`(test_\w+)`", (ROOT / doc).read_text()))
    assert cited, doc
    assert cited <= _test_names(), sorted(cited - _test_names())


def test_nothing_points_outside_the_repository():
    files = [p for p in ROOT.rglob("*") if p.is_file() and p.suffix in (".py", ".md", ".toml")
             and not {".git", "build", "mutants"} & set(p.relative_to(ROOT).parts)]
    outside = "/".join(("..", "shared"))  # spelled apart, so this file does not name it
    offenders = [str(p.relative_to(ROOT)) for p in files if outside in p.read_text(errors="ignore")]
    assert not offenders
