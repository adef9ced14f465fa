"""The plan of the house, checked on the source: imports go one way, no module imports
itself back, only the backend touches llama.cpp, and modules and functions stay small."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "specli"
# package -> packages it must never import (at module level or inside a function)
FORBIDDEN = {
    "engine": {"drafters", "heads", "runtime", "cli", "bench", "serve", "backend", "history", "registry", "profiles"},
    "drafters": {"heads", "runtime", "cli", "bench", "serve", "backend", "registry", "profiles"},
    # runtime -> heads -> (drafters, engine, backend, history): the learned drafters' unit
    "heads": {"runtime", "cli", "bench", "serve", "registry", "profiles"},
    "history": {"engine", "drafters", "heads", "runtime", "cli", "bench", "serve", "backend"},
    "runtime": {"cli", "bench", "serve"},
    "backend": {"engine", "drafters", "heads", "runtime", "cli", "bench", "serve"},
    "bench": {"cli", "serve"},
    "serve": {"cli", "bench"},
}


def _modules() -> Iterator[tuple[str, Path, ast.Module]]:
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        yield name, path, ast.parse(path.read_text())


def _imports(tree: ast.AST, top_level_only: bool, modules: frozenset[str] = frozenset(),
             type_checking: bool = False) -> Iterator[str]:
    """Modules imported at run time (and with `type_checking`, under TYPE_CHECKING too), by
    name (`from a import b`: a.b where that is one of `modules`, else a); with
    `top_level_only`, those imported when the module is, not in its functions."""
    for node in _walk(tree, top_level_only, type_checking):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                yield sub if sub in modules else node.module


def _walk(node: ast.AST, top_level_only: bool, type_checking: bool = False) -> Iterator[ast.AST]:
    for child in ast.iter_child_nodes(node):
        if top_level_only and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if not type_checking and isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
            continue  # for the type checker only: nothing imported at run time
        yield child
        yield from _walk(child, top_level_only, type_checking)


def test_no_import_circle() -> None:
    """None at run time, nor through imports for the type checker: a reader sees both."""
    modules = {name: tree for name, _, tree in _modules()}
    names = frozenset(modules)
    graph = {name: {m for m in _imports(tree, False, names, type_checking=True) if m in names and m != name}
             for name, tree in modules.items()}
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> None:
        if node in path:
            circle = path[path.index(node):] + [node]
            # a package importing its own submodules is how packages work, not a circle
            if not all(b.startswith(a + ".") for a, b in zip(circle, circle[1:])):
                pytest.fail("import circle: " + " -> ".join(circle))
            return
        if node in done:
            return
        for nxt in graph[node]:
            visit(nxt, [*path, node])
        done.add(node)

    for name in graph:
        visit(name, [])


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_go_one_way(package: str) -> None:
    for name, path, tree in _modules():
        if not name.startswith(f"specli.{package}"):
            continue
        for module in _imports(tree, False):
            parts = module.split(".")
            assert not (parts[0] == "specli" and len(parts) > 1 and parts[1] in FORBIDDEN[package]), (
                f"{path.relative_to(ROOT.parent)} imports {module}")


# the learned drafters' pure-numpy core: weights, the training kernel, BLAS threads and the
# prompts; nothing of specli outside it, so it can be read, tested and reused alone
HEADS_CORE = tuple(f"specli.heads.{m}" for m in (
    "weights", "eagle", "rows", "kernel", "medusa_train", "eagle_train", "blas", "prompts"))


def test_the_heads_core_imports_only_itself() -> None:
    found = {name for name, _, _ in _modules()}
    assert set(HEADS_CORE) <= found, set(HEADS_CORE) - found
    for name, path, tree in _modules():
        if name in HEADS_CORE:
            for module in _imports(tree, False, frozenset(found), type_checking=True):
                assert module.split(".")[0] != "specli" or module in HEADS_CORE, (
                    f"{path.relative_to(ROOT.parent)} imports {module}")


# runtime's subpackages sit below the loaded pair: wiring, slots and rounds use them, never
# the other way (nor the package itself, which hands out wiring's Runtime)
BELOW_THE_PAIR = ("specli.runtime.measure", "specli.runtime.kv")
THE_PAIR = ("specli.runtime", "specli.runtime.wiring", "specli.runtime.slots", "specli.runtime.rounds")


def test_measure_and_kv_never_import_the_loaded_pair() -> None:
    modules = frozenset(name for name, _, _ in _modules())
    for name, path, tree in _modules():
        if name.startswith(BELOW_THE_PAIR):
            for module in _imports(tree, False, modules, type_checking=True):
                assert module not in THE_PAIR, f"{path.relative_to(ROOT.parent)} imports {module}"


PROTOCOLS = "specli.serve.protocols"
PROTOCOL_PACKAGES = ("openai_completions", "anthropic_messages", "openai_responses", "llama_server")
ROUTE_TABLE = "specli.serve.app"
# the HTTP side that drives jobs: a protocol never reaches into it
DRIVERS = ("specli.serve.worker", "specli.serve.app", "specli.serve.generation", "specli.serve.server")


def test_only_the_route_table_imports_a_protocol_package() -> None:
    for name, path, tree in _modules():
        if name.startswith(PROTOCOLS) or name == ROUTE_TABLE:
            continue
        for module in _imports(tree, False, type_checking=True):
            assert not any(module.startswith(f"{PROTOCOLS}.{p}") for p in PROTOCOL_PACKAGES), (
                f"{path.relative_to(ROOT.parent)} imports {module}")


def test_no_protocol_imports_the_worker_or_the_app() -> None:
    for name, path, tree in _modules():
        if name.startswith(PROTOCOLS):
            for module in _imports(tree, False, type_checking=True):
                assert not module.startswith(DRIVERS), f"{path.relative_to(ROOT.parent)} imports {module}"


def test_the_neutral_core_knows_no_protocol() -> None:
    """The worker, slots, rendering, tools, prompt cache, the request and outcome records:
    nothing from serve/protocols/, the contract included."""
    for name, path, tree in _modules():
        if name.startswith("specli.serve") and not name.startswith(PROTOCOLS) and name not in (
                ROUTE_TABLE, "specli.serve.generation", "specli.serve.server"):
            for module in _imports(tree, False, type_checking=True):
                assert not module.startswith(PROTOCOLS), f"{path.relative_to(ROOT.parent)} imports {module}"


def test_only_the_backend_imports_llama_cpp() -> None:
    for name, path, tree in _modules():
        if not name.startswith("specli.backend"):
            assert not any(m.split(".")[0] == "llama_cpp" for m in _imports(tree, False)), path


def test_the_engine_never_prints_nor_looks_up_drafter_hooks() -> None:
    for name, path, tree in _modules():
        if not name.startswith("specli.engine"):
            continue
        for call in ast.walk(tree):
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name):
                assert call.func.id != "print", path
                if call.func.id in ("getattr", "hasattr") and call.args:
                    assert "drafter" not in ast.unparse(call.args[0]), f"{path}: {ast.unparse(call)}"


def test_the_top_level_holds_few_modules() -> None:
    top = [p.name for p in ROOT.glob("*.py")]
    assert len(top) <= 8, top


def test_modules_and_functions_stay_small() -> None:
    for _, path, tree in _modules():
        n_lines = len(path.read_text().splitlines())
        assert n_lines <= 450, f"{path.relative_to(ROOT.parent)} has {n_lines} lines"
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                assert length <= 80, f"{path.relative_to(ROOT.parent)}:{node.lineno} {node.name} has {length} lines"
