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


#: numbers with a unit in the README that are settings, not measurements (each says which)
SETTINGS = {
    "0.1 s",  # how often the load watch reads /proc/stat
    "2 s",  # the tuner's budget a process
    "30%",  # the CPU share above which the profiler warns
}


def _figures(text: str) -> list:
    """Every measured figure of ``text`` outside code blocks: a number or a range with a unit
    (x, us, ms, s, %)."""
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    return re.findall(r"(?<![\w.])\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)?(?:x\b| us\b| ms\b| s\b|%)",
                      prose)


def test_every_figure_the_readme_quotes_is_on_the_results_page():
    """The README quotes benchmarks/RESULTS.md, the current figures with their machine, date
    and command: each figure it gives (a number or a range, as written) is on that page."""
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    figures = [f for f in _figures((ROOT / "README.md").read_text()) if f not in SETTINGS]
    assert len(figures) >= 30, figures
    missing = [f for f in figures
               if not re.search(r"(?<![\w.])" + re.escape(re.match(r"[\d.-]+", f).group(0))
                                + r"(?![\d])", results)]
    assert not missing, missing
