"""The plan of the repository outside specli/: benchmarks/ holds only runnable
measurements, each listed in its index and named somewhere a reader would find it; what
tests and benchmarks share lives in harness/, so no test imports a measurement, and the
package imports neither."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS = REPO / "benchmarks"
# where a benchmark counts as referenced (its own file and the index left out)
READERS = ["README.md", "docs", "scripts", "benchmarks", "harness", "tests", "specli", ".ci"]


def _imported(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def _tools() -> list[Path]:
    return sorted(p for p in [*BENCHMARKS.glob("*.py"), *BENCHMARKS.glob("*.sh")] if p.name != "__init__.py")


def _index() -> set[str]:
    doc = ast.get_docstring(ast.parse((BENCHMARKS / "__init__.py").read_text())) or ""
    return set(re.findall(r"^- ([\w.-]+):", doc, re.M))


def test_no_test_imports_a_benchmark() -> None:
    for path in sorted((REPO / "tests").rglob("*.py")):
        for module in _imported(path):
            assert module.split(".")[0] != "benchmarks", f"{path.relative_to(REPO)} imports {module}"


def test_specli_imports_neither_benchmarks_nor_harness() -> None:
    for path in sorted((REPO / "specli").rglob("*.py")):
        for module in _imported(path):
            assert module.split(".")[0] not in ("benchmarks", "harness"), f"{path.relative_to(REPO)} imports {module}"


@pytest.mark.parametrize("path", [p for p in _tools() if p.suffix == ".py"], ids=lambda p: p.stem)
def test_every_benchmark_module_runs_as_a_program(path: Path) -> None:
    tree = ast.parse(path.read_text())
    assert any(isinstance(node, ast.If) and "__name__" in ast.unparse(node.test) for node in tree.body), \
        f"benchmarks/{path.name} has no `if __name__ == \"__main__\"`: a helper belongs in harness/"


def test_the_index_lists_every_benchmark() -> None:
    names = {p.stem if p.suffix == ".py" else p.name for p in _tools()}
    index = _index()
    assert names - index == set(), "missing from benchmarks/__init__.py's index"
    assert index - names == set(), "in benchmarks/__init__.py's index but not in benchmarks/"


def test_every_benchmark_is_referenced() -> None:
    texts = {}
    for reader in READERS:
        root = REPO / reader
        for path in [root] if root.is_file() else sorted(root.rglob("*")):
            if path.is_file() and path.suffix in (".py", ".md", ".sh", "") and "__pycache__" not in path.parts:
                texts[path] = path.read_text(errors="replace")
    unnamed = []
    for tool in _tools():
        name = tool.stem if tool.suffix == ".py" else tool.name
        pattern = re.compile(rf"benchmarks[./]{re.escape(name)}\b")
        if not any(p not in (tool, BENCHMARKS / "__init__.py") and pattern.search(text) for p, text in texts.items()):
            unnamed.append(tool.name)
    assert unnamed == [], "nothing names these (docs, README, scripts or another module)"
