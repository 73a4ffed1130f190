"""The house rules that keep bertology one house: no import cycles, CLI modules imported only by CLI
modules, and the packaging declares what the code imports."""

from __future__ import annotations

import ast
from pathlib import Path


SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "bertology"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in PACKAGE.rglob("*.py")}


def _imports(path: Path, name: str, modules: dict[str, Path]) -> set[str]:
    """Every bertology module ``path`` imports, anywhere in the file (function-level imports included)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    typing_only = {id(inner) for node in ast.walk(tree) if isinstance(node, ast.If) and _is_type_checking(node.test)
                   for statement in node.body for inner in ast.walk(statement)}
    for node in ast.walk(tree):
        if id(node) in typing_only:  # `if TYPE_CHECKING:` imports never run
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target.startswith("bertology") and target != name:
                found.add(target)
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, name, modules) for name, path in modules.items()}


def _is_cli(name: str) -> bool:
    return name.rsplit(".", 1)[-1] in ("cli",) or name.endswith("_cli")


def test_only_cli_modules_import_cli_modules():
    offenders = sorted(f"{name} imports {target}" for name, targets in _graph().items() if not _is_cli(name)
                       for target in targets if _is_cli(target))
    assert not offenders, "library modules must not import CLI modules:\n" + "\n".join(offenders)


def test_no_module_is_a_cli_module_except_cli_py():
    extra = sorted(name for name in _modules() if name.endswith("_cli"))
    assert not extra, f"CLI code lives in cli.py files only: {extra}"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), ignoring package __init__ re-exports
    of their own submodules (a package importing its children is not a cycle of logic)."""
    def edges(name):
        return {t for t in graph[name] if not (t.startswith(name + ".") )}

    index, low, stack, on_stack, result, counter = {}, {}, [], set(), [], [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in edges(node):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                result.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return result


def _without_init(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Resolve imports of a package (``from bertology.x import f``) to the submodule that defines ``f`` is
    not possible by text alone, so package __init__ files are treated as re-export hubs: an edge into a
    package counts as an edge into every submodule it imports."""
    modules = set(graph)
    packages = {name for name in modules if (PACKAGE.parent / name.replace(".", "/") / "__init__.py").exists()}
    resolved = {}
    for name, targets in graph.items():
        if name in packages:
            continue
        out = set()
        for target in targets:
            if target in packages:
                out |= {t for t in graph[target] if t.startswith(target + ".")} or set()
            else:
                out.add(target)
        resolved[name] = {t for t in out if t in modules and t not in packages and t != name}
    return resolved


def test_no_import_cycles():
    cycles = _cycles(_without_init(_graph()))
    assert not cycles, "import cycles among bertology modules:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_cycles():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_cycles_between_capabilities():
    """Capabilities (``bertology.<capability>``) form layers: finetune may use intervention or the reverse,
    never both. The top-level command module ``bertology.cli`` sits above them all and is left out."""
    def capability(name: str) -> str:
        return ".".join(name.split(".")[:2])

    graph: dict[str, set[str]] = {}
    for name, targets in _graph().items():
        if name == "bertology.cli" or name == "bertology" or _is_cli(name):
            continue
        graph.setdefault(capability(name), set()).update(
            capability(t) for t in targets if capability(t) != capability(name) and t != "bertology")
    for name in list(graph):
        graph[name] = {t for t in graph[name] if t in graph}
    cycles = _cycles(graph)
    assert not cycles, "capabilities import each other:\n" + "\n".join(" <-> ".join(c) for c in cycles)


#: Declared distributions whose import name differs, or that are used through another library.
_IMPORT_NAMES = {"scikit-learn": "sklearn", "pyarrow": None}  # pyarrow: pandas' Parquet engine


def test_every_declared_dependency_is_used():
    import re
    import tomllib

    project = tomllib.loads((SRC.parent / "pyproject.toml").read_text())["project"]
    sources = "\n".join(path.read_text(encoding="utf-8") for path in PACKAGE.rglob("*.py"))
    unused = []
    for requirement in project["dependencies"]:
        dist = re.split(r"[<>=!~ \[;]", requirement, maxsplit=1)[0]
        module = _IMPORT_NAMES.get(dist, dist.replace("-", "_"))
        if module and not re.search(rf"^\s*(import|from)\s+{module}\b", sources, flags=re.M):
            unused.append(dist)
    assert not unused, f"declared but never imported: {unused}"
