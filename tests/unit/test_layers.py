"""The layering as CONTRIBUTING.md's table states it: every module of the package falls under
one row, and imports nothing of the package beyond its own package, the floor and what its row
names. The table is read here, so the document and the code cannot drift apart."""
import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "dml_numba"
FLOOR = {"_errors", "_env", "_dims", "_dtypes", "_version", "tensor"}


def _rows() -> list:
    """``(patterns, allowed)`` of each row of the layout table: the module column's backticked
    paths (a bare name continues the folder of the path before it), the last column's
    backticked names (None: "anything")."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    table = text.split("## Layout (layers point down)", 1)[1].split("\n### ", 1)[0]
    rows = []
    for line in table.splitlines():
        if not line.startswith("| `dml_numba/"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        last = cells[-1]
        allowed = None if last == "anything" else set(re.findall(r"`(\w+)`", last))
        rows.append((_patterns(cells[0]), allowed))
    return rows


def _patterns(cell: str) -> list:
    """A table's module cell: its backticked paths, a bare name continuing the folder of the
    path before it."""
    folder, patterns = "", []
    for token in re.findall(r"`([^`]+)`", cell):
        if token.startswith("dml_numba/"):
            folder = token.rsplit("/", 1)[0] + "/" if not token.endswith("/") else (
                token.rsplit("/", 2)[0] + "/")
            patterns.append(token)
        else:
            patterns.append(folder + token)
    return patterns


def _specificity(pattern: str, module: Path):
    """How specifically ``pattern`` names ``module`` (a path under the repository), or None:
    a file 3, an operator's module or package 2, a folder 1 (deeper folders more)."""
    rel = module.relative_to(ROOT).as_posix()
    if pattern.endswith(".py"):
        return (3, 0) if rel == pattern else None
    if "<op>" in pattern:
        folder = pattern.split("<op>")[0]
        rest = rel[len(folder):] if rel.startswith(folder) else None
        if rest is None or rest.startswith("_"):
            return None
        name = rest.split("/")[0]
        if rest == name and not name.endswith(".py"):
            return None
        return (2, 0)
    if pattern.endswith("/") and rel.startswith(pattern):
        return (1, pattern.count("/"))
    return None


def _own_package(module: Path) -> str:
    """The top-level name under dml_numba a module belongs to (``cpu``, ``_cache``...)."""
    return module.relative_to(PACKAGE).parts[0].removesuffix(".py")


def _imports(module: Path) -> set:
    """The top-level names under dml_numba a module imports, at any depth of its code."""
    rel = module.relative_to(ROOT).with_suffix("").parts
    package = list(rel[:-1])  # a package's __init__ resolves from the package itself
    return _imports_of(module.read_text(), package)


def _imports_of(source: str, package: list) -> set:
    """The top-level names under dml_numba that ``source``, a module of ``package`` (its
    dotted parts), imports."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[:len(package) - node.level + 1]
            if node.module:
                names.append(base + node.module.split("."))
            else:
                names += [base + [a.name] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dml_numba"):
            names.append(node.module.split("."))
        elif isinstance(node, ast.Import):
            names += [a.name.split(".") for a in node.names if a.name.startswith("dml_numba")]
        found |= {n[1] for n in names if len(n) > 1}
    return found


MODULES = sorted(PACKAGE.rglob("*.py"))
ROWS = _rows()


def test_the_table_is_read():
    assert len(ROWS) >= 20
    assert all(patterns for patterns, _ in ROWS)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.relative_to(ROOT).as_posix())
def test_every_module_keeps_to_its_row(module):
    matches = [(s, patterns, allowed) for patterns, allowed in ROWS for p in patterns
               if (s := _specificity(p, module)) is not None]
    assert matches, "no row of CONTRIBUTING.md's layout table names this module"
    best = max(s for s, _, _ in matches)
    rows = {tuple(patterns): allowed for s, patterns, allowed in matches if s == best}
    assert len(rows) == 1, f"two rows name it as specifically: {list(rows)}"
    allowed = next(iter(rows.values()))
    if allowed is None:
        return
    own = _own_package(module)
    beyond = _imports(module) - FLOOR - {own} - allowed
    if own in FLOOR:  # the floor imports only itself
        beyond = _imports(module) - FLOOR
    assert not beyond, (f"imports {sorted(beyond)}, which its row does not name "
                        f"({sorted(allowed) or 'nothing'})")


def test_an_import_outside_the_row_is_found():
    """The check itself: the graph reaching into a backend is found, as a relative import (at
    any depth of the code), an absolute one and a module of a package imported by name."""
    graph = ["dml_numba", "graph"]
    assert _imports_of("from ..cpu import _emit\n", graph) == {"cpu"}
    assert _imports_of("def f():\n    import dml_numba.cuda._emit\n", graph) == {"cuda"}
    assert _imports_of("from .. import _blas, ops\n", graph) == {"_blas", "ops"}
    assert _imports_of("from . import rules\n", graph) == {"graph"}
    assert "cpu" not in _imports(PACKAGE / "graph" / "plan.py")


def _test_rows() -> list:
    """``(patterns, test files)`` of each row of tests/README.md's table."""
    text = (ROOT / "tests" / "README.md").read_text()
    rows = []
    for line in text.splitlines():
        if not line.startswith("| `dml_numba/"):
            continue
        module_cell, tests_cell = [c.strip() for c in line.strip().strip("|").split(" | ")]
        rows.append((_patterns(module_cell), re.findall(r"`(tests/[^`]+)`", tests_cell)))
    return rows


OPERATORS = sorted(p.stem for p in (PACKAGE / "ops").iterdir()
                   if not p.name.startswith("_") and (p.suffix == ".py" or p.is_dir()))


def _expand(path: str) -> list:
    return [path.replace("<op>", op) for op in OPERATORS] if "<op>" in path else [path]


def test_every_module_has_tests_named_and_every_test_file_is_named():
    """tests/README.md: every module of the package falls under a row, every test file a row
    names exists (``<op>``: each operator's), and every test file of the suite is named by a
    row, so a reader finds a module's tests from its path."""
    rows = _test_rows()
    assert len(rows) >= 20
    unnamed = [m.relative_to(ROOT).as_posix() for m in MODULES
               if not any(_specificity(p, m) is not None for ps, _ in rows for p in ps)]
    assert not unnamed, unnamed
    named = {path for _, tests in rows for t in tests for path in _expand(t)}
    assert not {p for p in named if not (ROOT / p).is_file()}
    files = {p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").rglob("test_*.py")}
    assert not files - named, sorted(files - named)
