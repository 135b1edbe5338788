"""The code's layout: no import circle between errmap's modules, no private name imported across them,
and every package opens with an overview of its stage."""

from __future__ import annotations

import ast
from pathlib import Path

import errmap.commands

ROOT = Path(errmap.commands.__file__).resolve().parent.parent  # the errmap package


def modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(path: Path, known: dict[str, Path]) -> list[tuple[str, str | None, int]]:
    """(module imported, name taken from it or None, line) of every errmap import, lazy ones included."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, None, node.lineno) for a in node.names if a.name.startswith("errmap")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("errmap") and not node.level:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                out.append((sub, None, node.lineno) if sub in known else (node.module, a.name, node.lineno))
    return out


def test_no_import_circle():
    known = modules()
    graph = {m: {dep for dep, _, _ in imports(p, known) if dep in known and dep != m} for m, p in known.items()}
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for dep in sorted(graph[m]):
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep not in state and (cycle := visit(dep)):
                return cycle
        state[m] = 2
        path.pop()
        return None

    for m in sorted(graph):
        if m not in state:
            assert not (cycle := visit(m)), "import circle: " + " -> ".join(cycle)


def test_no_private_name_imported_across_modules():
    known = modules()
    bad = [f"{p.relative_to(ROOT.parent)}:{line}: {name} from {mod}" for m, p in known.items()
           for mod, name, line in imports(p, known)
           if name and name.startswith("_") and name != "_" and not name.startswith("__") and mod != m]
    assert not bad, "private names imported:\n" + "\n".join(bad)


def test_every_package_opens_with_an_overview():
    for init in ROOT.rglob("__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and len(doc) > 80, f"{init} has no overview of its stage"
