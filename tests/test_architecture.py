"""The house rules that keep bertology one house: no import cycles, CLI modules imported only by CLI
modules, and the packaging declares what the code imports."""

from __future__ import annotations

import ast
import re
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


#: The command-line package: `bertology` itself and one module per command group, above every capability.
CLI_PACKAGE = "bertology.cli"


def _is_cli(name: str) -> bool:
    """A command-line module: in the command-line package, or (misplaced) named ``cli`` or ``*_cli`` elsewhere."""
    return (name == CLI_PACKAGE or name.startswith(CLI_PACKAGE + ".") or name.rsplit(".", 1)[-1] == "cli"
            or name.endswith("_cli"))


def test_only_cli_modules_import_cli_modules():
    offenders = sorted(f"{name} imports {target}" for name, targets in _graph().items() if not _is_cli(name)
                       for target in targets if _is_cli(target))
    assert not offenders, "library modules must not import CLI modules:\n" + "\n".join(offenders)


def test_command_line_modules_live_in_the_cli_package():
    """One package holds the command line (as transformers keeps its commands in ``transformers/commands``), so
    the capabilities' folders show the layers: no capability holds a ``cli.py`` of its own."""
    extra = sorted(name for name in _modules() if _is_cli(name) and not name.startswith(CLI_PACKAGE))
    assert not extra, f"command-line modules outside {CLI_PACKAGE}: {extra}"


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


def _package_cycles(modules: dict[str, set[str]]) -> list[list[str]]:
    """Cycles between packages (``bertology.<package>``), every module counted, command-line modules too."""
    def capability(name: str) -> str:
        return ".".join(name.split(".")[:2])

    graph: dict[str, set[str]] = {}
    for name, targets in modules.items():
        if name == "bertology":
            continue
        graph.setdefault(capability(name), set()).update(
            capability(t) for t in targets if capability(t) != capability(name) and t != "bertology")
    for name in list(graph):
        graph[name] = {t for t in graph[name] if t in graph}
    return _cycles(graph)


def test_no_cycles_between_packages():
    """Packages form layers: finetune may use intervention or the reverse, never both. Counting the command
    line too: it is one package (``bertology.cli``) above every capability, so a command that runs another
    capability's work (a Ray sweep of fine-tuning) adds no arrow back up."""
    cycles = _package_cycles(_graph())
    assert not cycles, "packages import each other:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_package_cycle_finder_finds_a_command_line_inside_a_capability():
    """The layout this replaced: finetune's own cli.py ran a Ray sweep from scale, whose sweeps import finetune."""
    planted = {"bertology.finetune.train": set(), "bertology.finetune.cli": {"bertology.scale.sweeps"},
               "bertology.scale.sweeps": {"bertology.finetune.train"}}
    assert _package_cycles(planted) == [["bertology.finetune", "bertology.scale"]]
    moved = {"bertology.finetune.train": set(), "bertology.cli.finetune": {"bertology.scale.sweeps"},
             "bertology.scale.sweeps": {"bertology.finetune.train"}}
    assert _package_cycles(moved) == []


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


# -- one batcher, one store writer (issue 21) ---------------------------------------------------------------

#: Modules whose own batching is STILL TO MIGRATE onto ``bertology.models.batching`` (issue 21; none left:
#: finetune/batching.py and readouts/qa.py pad with ``pad_batch``). A module listed here while it is already
#: clean fails the test.
_BATCHING_STILL_TO_MIGRATE: set[str] = set()
_BATCHER = "bertology.models.batching"


def _names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | \
        {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}


def _own_batching(tree: ast.AST) -> list[str]:
    """What in a module re-implements the batcher: arithmetic on a token budget (cutting batches by
    ``batch_tokens``), or padding model inputs by hand (``torch.full(..., pad...)``, ``[pad_id] * n``)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Compare, ast.BinOp)):
            operands = [node.left, *node.comparators] if isinstance(node, ast.Compare) else [node.left, node.right]
            if any(isinstance(o, (ast.Name, ast.Attribute)) and "batch_tokens" in _names_in(o) for o in operands):
                found.append(f"line {node.lineno}: token-budget arithmetic")
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult) and any(
                    isinstance(o, ast.List) and any("pad" in name for name in _names_in(o)) for o in operands):
                found.append(f"line {node.lineno}: padding by hand")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "full" \
                and any("pad" in name.lower() for arg in node.args for name in _names_in(arg)):
            found.append(f"line {node.lineno}: padding by hand")
    return found


def test_one_batcher():
    """Every loop that runs the model over many inputs batches with ``models/batching.py``
    (``token_budget_batches``, ``pad_batch``); no module keeps its own token-budget cutting or padding."""
    modules = _modules()
    offenders, migrated = [], []
    for name, path in sorted(modules.items()):
        if name == _BATCHER:
            continue
        own = _own_batching(ast.parse(path.read_text(encoding="utf-8")))
        if own and name not in _BATCHING_STILL_TO_MIGRATE:
            offenders.append(f"{name}: {', '.join(own)}")
        if not own and name in _BATCHING_STILL_TO_MIGRATE:
            migrated.append(name)
    assert not offenders, "batching outside bertology.models.batching:\n" + "\n".join(offenders)
    assert not migrated, f"migrated onto the one batcher; remove from _BATCHING_STILL_TO_MIGRATE: {migrated}"


def test_the_batching_detector_finds_the_old_loops():
    old_extraction = "def f(b, batch_tokens):\n    if b * 3 > batch_tokens:\n        pass\n"
    old_padding = "def g(n, pad_id):\n    return torch.full((n, 4), pad_id)\n"
    old_pll = "def h(ids, pad_id, width):\n    return ids + [pad_id] * (width - len(ids))\n"
    for source in (old_extraction, old_padding, old_pll):
        assert _own_batching(ast.parse(source)), source
    assert not _own_batching(ast.parse("def k(x, batch_tokens):\n    return run(x, batch_tokens=batch_tokens)\n"))


def test_one_store_writer():
    """Stores are written by ``store/writer.py`` only: no other module writes a shard, forgets damaged ones,
    builds an index (``format_version``) or plans shards."""
    allowed = {"bertology.store", "bertology.store.store", "bertology.store.writer", "bertology.store.names"}
    offenders = []
    for name, path in sorted(_modules().items()):
        if name in allowed:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        used = _names_in(tree) | {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                                  for alias in node.names}
        for banned in ("write_shard_atomic", "forget_damaged_shards", "FORMAT_VERSION"):
            if banned in used:
                offenders.append(f"{name}: uses {banned}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Dict) and any(isinstance(k, ast.Constant) and k.value == "format_version"
                                                  for k in node.keys):
                offenders.append(f"{name}: line {node.lineno}: builds a store index")
            if isinstance(node, ast.FunctionDef) and "plan_shards" in node.name:
                offenders.append(f"{name}: line {node.lineno}: defines {node.name}")
    assert not offenders, "store writing outside bertology.store.writer:\n" + "\n".join(offenders)


# -- one model handle (issue 21) ----------------------------------------------------------------------------

#: A transformers model class: the Auto classes, a ``*For*`` class (``BertForMaskedLM``), ``*PreTrainedModel``.
_MODEL_CLASS = re.compile(r"^(AutoModel\w*|[A-Z]\w*For[A-Z]\w*|[A-Z]\w*PreTrainedModel)$")
#: ``X.from_pretrained`` stays allowed for tokenizers and configs (prefer the helpers in bertology.models).
_TOKENIZER_OR_CONFIG = re.compile(r"(Tokenizer\w*|Config)$")
#: Names a whole model goes by where it is called as ``model(**inputs)`` instead of through ``Encoder.forward``.
_MODEL_NAMES = ("model", "network")
#: Modules still calling a model with unpacked inputs: STILL TO MIGRATE by the helper working on
#: readouts/ (issue 21). Remove a module when it goes through the handle; the test then keeps it there.
_MODEL_CALLS_STILL_TO_MIGRATE: set[str] = set()


def _model_class_uses(tree: ast.AST) -> list[str]:
    """Where a module names a transformers model class, builds one from a config (``from_config``) or loads
    model weights (``from_pretrained`` of anything but a tokenizer or a config)."""
    found = []
    for node in ast.walk(tree):
        names = [alias.name.rpartition(".")[2] for alias in node.names] if isinstance(node, (ast.Import, ast.ImportFrom)) \
            else [node.id] if isinstance(node, ast.Name) else [node.attr] if isinstance(node, ast.Attribute) else []
        found += [f"line {node.lineno}: {name}" for name in names if _MODEL_CLASS.match(name)]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            receiver = node.func.value
            receiver_name = receiver.id if isinstance(receiver, ast.Name) else \
                receiver.attr if isinstance(receiver, ast.Attribute) else ""
            if node.func.attr in ("from_config", "_from_config"):
                found.append(f"line {node.lineno}: {receiver_name}.{node.func.attr}")
            if node.func.attr == "from_pretrained" and not _TOKENIZER_OR_CONFIG.search(receiver_name):
                found.append(f"line {node.lineno}: {receiver_name}.from_pretrained")
    return found


def _unpacked_model_calls(tree: ast.AST) -> list[str]:
    return [f"line {node.lineno}: {node.func.id}(**...)" for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _MODEL_NAMES
            and any(keyword.arg is None for keyword in node.keywords)]


def test_no_hugging_face_model_call_outside_models():
    """Only ``bertology.models`` names a transformers model class, builds or loads one; every capability gets
    its model through the one handle (``load_encoder(..., head=...)``, ``build_model``) and runs it with
    ``Encoder.forward``, not ``model(**inputs)``."""
    offenders, migrated = [], []
    for name, path in sorted(_modules().items()):
        if name == "bertology.models" or name.startswith("bertology.models."):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        offenders += [f"{name}: {where}" for where in _model_class_uses(tree)]
        calls = _unpacked_model_calls(tree)
        if calls and name not in _MODEL_CALLS_STILL_TO_MIGRATE:
            offenders += [f"{name}: {where}" for where in calls]
        if not calls and name in _MODEL_CALLS_STILL_TO_MIGRATE:
            migrated.append(name)
    assert not offenders, "Hugging Face models used outside bertology.models:\n" + "\n".join(offenders)
    assert not migrated, f"now through the handle; remove from _MODEL_CALLS_STILL_TO_MIGRATE: {migrated}"


def test_the_model_call_detector_finds_direct_uses():
    for source in ("from transformers import AutoModelForMaskedLM\n",
                   "import transformers\nm = transformers.BertForSequenceClassification(c)\n",
                   "m = AutoModel.from_config(c)\n", "m = cls._from_config(c)\n", "m = cls.from_pretrained(p)\n"):
        assert _model_class_uses(ast.parse(source)), source
    assert _unpacked_model_calls(ast.parse("out = model(**batch)\n"))
    for fine in ("t = AutoTokenizer.from_pretrained(p)\n", "c = AutoConfig.from_pretrained(p)\n",
                 "out = encoder.forward(batch)\n", "y = head(states)\n"):
        assert not _model_class_uses(ast.parse(fine)) and not _unpacked_model_calls(ast.parse(fine)), fine


# -- function-local imports (issue 21) ----------------------------------------------------------------------

#: The function-local imports a library module may keep, ``(module, imported module) -> why``: an optional
#: dependency, or a heavy library in a module the command line loads at start (tests/test_cli_startup.py).
#: Everything else is imported at the top of its module, where the import graph above sees it.
_LOCAL_IMPORTS_ALLOWED = {
    ("bertology.data.paths", "datasets"): "loads pandas and pyarrow, only when a hub copy is read; data.paths "
                                          "loads at CLI start (options checks --data with it)",
    ("bertology.runtime", "torch"): "runtime loads at CLI start (options); resolve_device is where torch first "
                                    "loads, after a command's options are checked",
    ("bertology.runtime", "numpy"): "runtime loads at CLI start (options); numpy loads when seeded() restores "
                                    "its generator or seeded_subset draws",
    ("bertology.probing.tasks", "bertology.probing"): "the task registry is read at CLI start (--tasks); a "
                                                      "builder imports probing.datasets (numpy) when first called",
    ("bertology.scale.cluster", "ray"): "optional dependency (the ray extra), only for --engine ray",
    ("bertology.scale.cluster", "ray.data"): "optional dependency (the ray extra), only for --engine ray",
    ("bertology.scale.cluster", "ray._private.services"): "optional dependency (the ray extra)",
    ("bertology.scale.extraction", "ray"): "optional dependency (the ray extra), only for --engine ray",
}
#: Modules whose function-local imports are STILL TO SWEEP (issue 21: other helpers were editing them). A
#: listed module that no longer has any fails the test, so this only shrinks.
_LOCAL_IMPORTS_NOT_YET_SWEPT: set[str] = set()


def _local_imports(path: Path, name: str) -> list[tuple[int, str]]:
    """``(line, imported module)`` for every import inside a function of ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.Import):
                found |= {(node.lineno, alias.name) for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                found.add((node.lineno, base))
    return sorted(found)


def test_function_local_imports_only_for_optional_dependencies_and_light_modules():
    """A library module imports at its top; a function-local import hides a dependency (and so a cycle) from
    the graph. CLI modules may import inside commands (so that usage errors answer before torch loads); a
    library module only where ``_LOCAL_IMPORTS_ALLOWED`` says why."""
    offenders, used, swept = [], set(), []
    for name, path in sorted(_modules().items()):
        if _is_cli(name) or name == "bertology.cli":
            continue
        found = _local_imports(path, name)
        if name in _LOCAL_IMPORTS_NOT_YET_SWEPT:
            if not found:
                swept.append(name)
            continue
        for line, imported in found:
            if (name, imported) in _LOCAL_IMPORTS_ALLOWED:
                used.add((name, imported))
            else:
                offenders.append(f"{name}: line {line}: imports {imported} inside a function")
    assert not offenders, "import these at the top of the module (or allow them with a reason):\n" + \
        "\n".join(offenders)
    stale = sorted(set(_LOCAL_IMPORTS_ALLOWED) - used)
    assert not stale, f"no longer imported inside a function; remove from _LOCAL_IMPORTS_ALLOWED: {stale}"
    assert not swept, f"swept; remove from _LOCAL_IMPORTS_NOT_YET_SWEPT: {swept}"


def test_the_local_import_finder_finds_them(tmp_path):
    module = tmp_path / "bertology" / "x" / "y.py"
    module.parent.mkdir(parents=True)
    module.write_text("import os\n\ndef f():\n    import torch\n    from .z import g\n    return g\n\n"
                      "class C:\n    def m(self):\n        from bertology.data import paths\n")
    assert _local_imports(module, "bertology.x.y") == [(4, "torch"), (5, "bertology.x.z"), (10, "bertology.data")]


# -- one foundation (issue 34) ------------------------------------------------------------------------------

def _seeding_dances(tree: ast.AST) -> list[str]:
    """Functions that save torch's generator state and seed it themselves: the save, seed, restore dance
    ``runtime.seeded()`` is for."""
    found = []
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        called = {node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                  for node in ast.walk(function) if isinstance(node, ast.Call)}
        if {"get_rng_state", "manual_seed"} <= called:
            found.append(f"line {function.lineno}: {function.name} saves the generator state and seeds it")
    return found


def _global_seeding(tree: ast.AST) -> list[str]:
    """Calls that seed torch's global generator (``torch.manual_seed``, ``torch.cuda.manual_seed_all``...), which
    a library function must not leave seeded for its caller; a ``torch.Generator().manual_seed`` is its own."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("manual_seed", "manual_seed_all", "seed") and \
                isinstance(node.func.value, (ast.Name, ast.Attribute)) and \
                ast.unparse(node.func.value) in ("torch", "torch.random", "torch.cuda"):
            found.append(f"line {node.lineno}: {ast.unparse(node.func)}(...)")
    return found


#: Where the global generator is seeded: ``seeded()`` itself, and the step loop's dropout seeds, inside
#: ``torch.random.fork_rng`` (restored when the loop ends).
_GLOBAL_SEEDING_ALLOWED = {"bertology.runtime", "bertology.training"}


def test_the_global_generator_is_seeded_only_inside_seeded():
    offenders = [f"{name}: {where}" for name, path in sorted(_modules().items()) if name not in _GLOBAL_SEEDING_ALLOWED
                 for where in _global_seeding(ast.parse(path.read_text(encoding="utf-8")))]
    assert not offenders, "seed inside bertology.runtime.seeded() (restored after):\n" + "\n".join(offenders)


def test_the_global_seeding_finder_finds_a_planted_seed():
    assert _global_seeding(ast.parse("def fit(self):\n    torch.manual_seed(self.random_state)\n"))
    assert _global_seeding(ast.parse("torch.cuda.manual_seed_all(0)\n"))
    assert not _global_seeding(ast.parse("g = torch.Generator().manual_seed(0)\nwith seeded(0):\n    pass\n"))


def test_one_seeded_block():
    """Seeding for a block of code and restoring the generators after it is ``runtime.seeded()``'s only."""
    offenders = [f"{name}: {where}" for name, path in sorted(_modules().items()) if name != "bertology.runtime"
                 for where in _seeding_dances(ast.parse(path.read_text(encoding="utf-8")))]
    assert not offenders, "use bertology.runtime.seeded():\n" + "\n".join(offenders)


def test_the_seeding_detector_finds_the_dance():
    planted = ("def init(seed):\n    state = torch.random.get_rng_state()\n    torch.manual_seed(seed)\n"
               "    try:\n        return build()\n    finally:\n        torch.random.set_rng_state(state)\n")
    assert _seeding_dances(ast.parse(planted))
    assert not _seeding_dances(ast.parse("def init(seed):\n    with seeded(seed):\n        return build()\n"))
    # saving the state for a resumable checkpoint is not the dance
    assert not _seeding_dances(ast.parse("def save():\n    return {'rng': torch.get_rng_state()}\n"))


def _command_line_imports(graph: dict[str, set[str]]) -> list[str]:
    """Library modules (not ``cli.py``, not ``bertology.cli``) that import the command line: a ``cli`` module
    or ``bertology.cli.options``, whose checks a library takes from ``bertology.settings`` instead."""
    return sorted(f"{name} imports {target}" for name, targets in graph.items()
                  if not _is_cli(name) and name not in ("bertology.cli", "bertology.cli.options")
                  for target in targets if _is_cli(target) or target == "bertology.cli.options")


def test_library_modules_do_not_import_the_command_line():
    offenders = _command_line_imports(_graph())
    assert not offenders, "library modules import the command line:\n" + "\n".join(offenders)


def test_the_command_line_import_finder_finds_a_planted_import(tmp_path):
    planted = tmp_path / "bertology" / "geometry" / "stores.py"
    planted.parent.mkdir(parents=True)
    planted.write_text("from bertology.cli.options import check_cache_dir\n")
    modules = {**_modules(), "bertology.geometry.stores": planted}
    graph = {"bertology.geometry.stores": _imports(planted, "bertology.geometry.stores", modules),
             "bertology.cli.attention": {"bertology.cli.options"}, "bertology.x.run": {"bertology.x.cli"}}
    assert _command_line_imports(graph) == ["bertology.geometry.stores imports bertology.cli.options",
                                            "bertology.x.run imports bertology.x.cli"]


def _cache_roots(source: str) -> list[str]:
    """Where a module finds the cache folder itself: defines a ``cache_root`` or reads ``$BERTOLOGY_CACHE``."""
    tree = ast.parse(source)
    found = [f"line {node.lineno}: defines {node.name}" for node in ast.walk(tree)
             if isinstance(node, ast.FunctionDef) and node.name.lstrip("_") == "cache_root"]
    found += [f"line {node.lineno}: reads $BERTOLOGY_CACHE" for node in ast.walk(tree)
              if isinstance(node, ast.Constant) and node.value == "BERTOLOGY_CACHE"]
    return found


def test_one_cache_root():
    """The cache folder is ``bertology.settings.cache_root``'s answer everywhere."""
    offenders = [f"{name}: {where}" for name, path in sorted(_modules().items()) if name != "bertology.settings"
                 for where in _cache_roots(path.read_text(encoding="utf-8"))]
    assert not offenders, "use bertology.settings.cache_root:\n" + "\n".join(offenders)


def test_the_cache_root_finder_finds_a_second_root():
    planted = ("import os\n\ndef cache_root(cache_dir=None):\n"
               "    return cache_dir or os.environ.get('BERTOLOGY_CACHE', '~/.cache/bertology')\n")
    assert len(_cache_roots(planted)) == 2
    assert not _cache_roots("from bertology.settings import cache_root\n\nstore = cache_root() / 'x'\n")


def _handle_copies(tree: ast.AST) -> list[str]:
    """Functions that repeat ``as_encoder``: "a handle as given, else load it", as an ``isinstance(x, Encoder)``
    test beside a ``load_encoder(...)`` call or as ``encoder or load_encoder(...)``; or define their own
    ``as_encoder``."""
    found = []
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if function.name.lstrip("_") == "as_encoder":
            found.append(f"line {function.lineno}: defines {function.name}")
            continue
        loads = [node for node in ast.walk(function) if isinstance(node, ast.Call)
                 and isinstance(node.func, (ast.Name, ast.Attribute)) and "load_encoder" in _names_in(node.func)]
        tests_handle = any(isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                           and node.func.id == "isinstance" and len(node.args) == 2
                           and "Encoder" in _names_in(node.args[1]) for node in ast.walk(function))
        or_load = any(isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or)
                      and any(value in loads for value in node.values) for node in ast.walk(function))
        if loads and (tests_handle or or_load):
            found.append(f"line {function.lineno}: {function.name} takes a handle as given, else loads one")
    return found


#: Modules still repeating "a handle as given, else load it": STILL TO MIGRATE onto ``as_encoder`` (report/ was
#: left to the helper working on the report in issue 31). A listed module that is clean fails the test.
_HANDLE_COPIES_STILL_TO_MIGRATE: set[str] = set()


def test_one_way_to_a_model_handle():
    """Whatever a caller passes as a model becomes an Encoder through ``models.encoders.as_encoder`` only: no
    capability repeats "an Encoder as given, else load it"."""
    offenders, migrated = [], []
    for name, path in sorted(_modules().items()):
        if name.startswith("bertology.models"):
            continue
        found = _handle_copies(ast.parse(path.read_text(encoding="utf-8")))
        if found and name not in _HANDLE_COPIES_STILL_TO_MIGRATE:
            offenders += [f"{name}: {where}" for where in found]
        if not found and name in _HANDLE_COPIES_STILL_TO_MIGRATE:
            migrated.append(name)
    assert not offenders, "use bertology.models.as_encoder instead of a copy:\n" + "\n".join(offenders)
    assert not migrated, f"now through as_encoder; remove from _HANDLE_COPIES_STILL_TO_MIGRATE: {migrated}"


def test_the_handle_copy_finder_finds_the_old_copies():
    finetune = "def _load_encoder(model):\n    if isinstance(model, Encoder):\n        return model\n" \
               "    return load_encoder(model)\n"
    report = "def _resolve(model, encoder, device):\n    return encoder or load_encoder(model, device=device)\n"
    probing = ("def run(model, device):\n    if isinstance(model, Encoder):\n        encoder = model\n    else:\n"
               "        encoder = models.load_encoder(model, device=device)\n")
    for source in (finetune, report, probing, "def as_encoder(x):\n    return x\n"):
        assert _handle_copies(ast.parse(source)), source
    for fine in ("def run(model):\n    return as_encoder(model)\n",
                 "def reload(folder):\n    return load_encoder(folder, device='cpu')\n"):
        assert not _handle_copies(ast.parse(fine)), fine


def _model_moves(tree: ast.AST) -> list[str]:
    """Calls that move a handle's model themselves: ``x.model.to(...)`` (``.cpu()``, ``.cuda()``), also after
    another call on it (``x.model.eval().to(...)``), where ``Encoder.to`` is the one way."""
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("to", "cpu", "cuda")):
            continue
        receiver = node.func.value
        while isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Attribute):
            receiver = receiver.func.value  # x.model.eval().to(...): look through the calls on it
        if isinstance(receiver, ast.Attribute) and receiver.attr == "model":
            found.append(f"line {node.lineno}: .model.{node.func.attr}(...)")
    return found


#: Modules still moving ``encoder.model`` themselves: STILL TO MIGRATE onto ``Encoder.to``. A listed module that
#: is clean fails the test. (None left.)
_MODEL_MOVES_STILL_TO_MIGRATE: set[str] = set()


def test_models_move_through_the_handle():
    offenders, migrated = [], []
    for name, path in sorted(_modules().items()):
        if name.startswith("bertology.models"):
            continue
        found = _model_moves(ast.parse(path.read_text(encoding="utf-8")))
        if found and name not in _MODEL_MOVES_STILL_TO_MIGRATE:
            offenders += [f"{name}: {where}" for where in found]
        if not found and name in _MODEL_MOVES_STILL_TO_MIGRATE:
            migrated.append(name)
    assert not offenders, "move models with Encoder.to(device):\n" + "\n".join(offenders)
    assert not migrated, f"now through Encoder.to; remove from _MODEL_MOVES_STILL_TO_MIGRATE: {migrated}"


def test_the_model_move_finder_finds_planted_moves():
    for source in ("encoder.model.to(device)\n", "twin.model.to(d).eval()\n", "enc.model.eval().to(target)\n",
                   "self.encoder.model.cpu()\n"):
        assert _model_moves(ast.parse(source)), source
    for fine in ("encoder.to(device)\n", "model.to(device)\n", "enc.to(target).model.eval()\n",
                 "batch['x'].to(device)\n"):
        assert not _model_moves(ast.parse(fine)), fine


#: The config keys of a model's depth and heads: ``bertology.models.layout`` reads them (per family).
_CONFIG_KEYS = {"num_hidden_layers", "n_layers", "num_layers", "num_attention_heads", "n_heads"}
#: Paths of a layer stack inside an encoder: a family's ``layers`` entry says them.
#: ("layers" alone is too common a word to tell; ``layers.*`` is the path form.)
_STACK_PATHS = re.compile(r"^((encoder\.layers?|transformer\.layer)(\.\*)?|layers\.\*)$")


def _layer_stack_finders(tree: ast.AST) -> list[str]:
    """What in a module finds a model's layer stack or depth itself: a loop over ``named_modules()`` that picks
    ``nn.ModuleList``s, a layer-stack path (``"encoder.layer"``), or a config's depth or head count read by
    name (``getattr(config, "n_layers")``, ``config.num_hidden_layers``)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.comprehension)):
            over = node.iter
            if isinstance(over, ast.Call) and isinstance(over.func, ast.Attribute) and \
                    over.func.attr == "named_modules":
                body = node.body if isinstance(node, ast.For) else []
                scope = [*body, *(node.ifs if isinstance(node, ast.comprehension) else [])]
                if any("ModuleList" in _names_in(part) for part in scope):
                    found.append(f"line {over.lineno}: looks for a ModuleList among named_modules()")
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _STACK_PATHS.match(node.value):
            found.append(f"line {node.lineno}: layer-stack path {node.value!r}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in ("getattr", "hasattr", "setattr") and len(node.args) >= 2 and \
                isinstance(node.args[1], ast.Constant) and node.args[1].value in _CONFIG_KEYS:
            found.append(f"line {node.lineno}: reads config key {node.args[1].value!r}")
        if isinstance(node, ast.Attribute) and node.attr in _CONFIG_KEYS and isinstance(node.ctx, ast.Load) and \
                isinstance(node.value, (ast.Name, ast.Attribute)) and "config" in _names_in(node.value):
            found.append(f"line {node.lineno}: reads config.{node.attr}")
    return found


def test_one_layer_stack_finder():
    """The layer stack, dropping layers and the depth and head count of a config are ``bertology.models.layout``'s
    (per family, in ``families.py``); no capability finds them its own way."""
    offenders = [f"{name}: {where}" for name, path in sorted(_modules().items())
                 if not name.startswith("bertology.models")
                 for where in _layer_stack_finders(ast.parse(path.read_text(encoding="utf-8")))]
    assert not offenders, "use bertology.models.layout:\n" + "\n".join(offenders)


def test_the_layer_stack_finder_detector_finds_the_old_finders():
    compression = ("def layer_list(model):\n    count = getattr(model.config, 'num_hidden_layers', None)\n"
                   "    for _, module in model.named_modules():\n"
                   "        if isinstance(module, nn.ModuleList) and len(module) == count:\n            return module\n")
    variants = "_LAYER_PATHS = ('encoder.layer', 'encoder.layers', 'transformer.layer', 'layers')\n"
    hooks = ("def layout(model):\n    for name, layers in model.named_modules():\n"
             "        if not isinstance(layers, nn.ModuleList):\n            continue\n")
    depth = "def depth(model):\n    return model.config.num_hidden_layers\n"
    for source in (compression, variants, hooks, depth):
        assert _layer_stack_finders(ast.parse(source)), source
    for fine in ("blocks = layer_stack(model).layers\n", "n = encoder.num_layers\n",
                 "config = BertConfig(num_hidden_layers=2)\n", "for name, m in model.named_modules():\n    pass\n"):
        assert not _layer_stack_finders(ast.parse(fine)), fine


def _tokenizer_padding(tree: ast.AST) -> list[str]:
    """Calls that ask a tokenizer to pad (``padding=True``, ``"longest"``, ``"max_length"``): batches of texts
    are encoded by ``bertology.models.texts`` (``encode_texts``, ``text_batches``) or padded by ``pad_batch``.
    ``padding=False`` and a convolution's ``padding=1`` are not padding a batch."""
    return [f"line {node.lineno}: padding={keyword.value.value!r}" for node in ast.walk(tree)
            if isinstance(node, ast.Call) for keyword in node.keywords
            if keyword.arg == "padding" and isinstance(keyword.value, ast.Constant)
            and (keyword.value.value is True or isinstance(keyword.value.value, str))]


def test_texts_are_padded_in_models_only():
    offenders = [f"{name}: {where}" for name, path in sorted(_modules().items())
                 if not name.startswith("bertology.models")
                 for where in _tokenizer_padding(ast.parse(path.read_text(encoding="utf-8")))]
    assert not offenders, "encode texts with bertology.models.texts:\n" + "\n".join(offenders)


def test_the_padding_finder_finds_a_planted_tokenizer_call():
    planted = ("def calibration(tokenizer, texts):\n    return [tokenizer(texts[i:i + 16], padding=True, "
               "return_tensors='pt') for i in range(0, len(texts), 16)]\n")
    assert _tokenizer_padding(ast.parse(planted))
    assert _tokenizer_padding(ast.parse("batch = tok(x, padding='max_length', max_length=128)\n"))
    for fine in ("conv = nn.Conv2d(1, 8, 3, padding=1)\n", "enc = tok(q, c, padding=False, stride=64)\n",
                 "batch = encode_texts(tok, texts, words=True)\n"):
        assert not _tokenizer_padding(ast.parse(fine)), fine


def _figure_saves(tree: ast.AST) -> list[str]:
    """Where a module writes a figure itself: ``save_figure(...)`` or ``figure.savefig(...)``, instead of
    ``plots.finish_figure`` (lay out, save with its SVG and PDF siblings, close)."""
    return [f"line {node.lineno}: {ast.unparse(node.func)}(...)" for node in ast.walk(tree)
            if isinstance(node, ast.Call) and (
                (isinstance(node.func, ast.Name) and node.func.id == "save_figure")
                or (isinstance(node.func, ast.Attribute) and node.func.attr in ("savefig", "save_figure")))]


#: Modules that write figures without ``finish_figure``, and why: the writers themselves, and the report's
#: figures, turned into PNG/SVG/PDF bytes for the page (a buffer, not a file).
_FIGURE_SAVES_ALLOWED = {"bertology.plots": "finish_figure itself", "bertology.files": "save_figure itself",
                         "bertology.report.document": "figure_bytes: a figure's bytes for the HTML page"}


def test_figures_are_saved_by_finish_figure():
    offenders = [f"{name}: {where}" for name, path in sorted(_modules().items()) if name not in _FIGURE_SAVES_ALLOWED
                 for where in _figure_saves(ast.parse(path.read_text(encoding="utf-8")))]
    assert not offenders, "write figures with bertology.plots.finish_figure:\n" + "\n".join(offenders)


def test_the_figure_save_finder_finds_a_planted_save():
    compare = ("def plot(fig, out_dir):\n    fig.tight_layout()\n    path = save_figure(fig, out_dir / 'cka.png')\n"
               "    plt.close(fig)\n    return path\n")
    for source in (compare, "fig.savefig('x.png', dpi=150)\n", "files.save_figure(fig, path)\n"):
        assert _figure_saves(ast.parse(source)), source
    for fine in ("return finish_figure(fig, out_dir / 'cka.png')\n", "finish_layer_figure(fig, axes, path)\n",
                 "plt.close(fig)\n"):
        assert not _figure_saves(ast.parse(fine)), fine


#: The floors of docs/ARCHITECTURE.md ("Layers of the package"), bottom up. Top-level modules (errors, files,
#: numbering, runtime, settings, results, plots, training...) are the foundation, floor 0; ``options.py`` and
#: every command-line module are the top floor.
_FLOORS = (("data", "models"), ("extraction", "store"),
           ("tasks", "probing", "attention", "intervention", "finetune", "compare", "knowledge", "geometry",
            "readouts", "languages", "claims"),
           ("compression", "scale", "report"))
_TOP_FLOOR = len(_FLOORS) + 1


def _floor(name: str) -> int:
    if _is_cli(name) or name in ("bertology.cli", "bertology.cli.options"):
        return _TOP_FLOOR
    parts = name.split(".")
    if len(parts) > 1:
        for number, group in enumerate(_FLOORS, start=1):
            if parts[1] in group:
                return number
    return 0


def _upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return [f"{name} (floor {_floor(name)}) imports {target} (floor {_floor(target)})"
            for name, targets in sorted(graph.items()) for target in sorted(targets) if _floor(target) > _floor(name)]


def test_modules_import_only_their_floor_or_below():
    """The documented layer order: foundation -> data, models -> extraction, store -> the capabilities ->
    compression, scale, report -> the command line; a module imports only from its own floor or below."""
    upward = _upward_imports(_graph())
    assert not upward, "imports that go up a floor (docs/ARCHITECTURE.md, Layers of the package):\n" + "\n".join(upward)


def test_the_floor_check_finds_a_planted_upward_import():
    planted = {"bertology.models.encoders": {"bertology.probing.probes"}, "bertology.report.run": {"bertology.models"},
               "bertology.files": {"bertology.cli.options"}}
    found = _upward_imports(planted)
    assert len(found) == 2 and "bertology.models.encoders" in found[1] and "bertology.files" in found[0], found


# -- settings travel in a spec (issue 34) --------------------------------------------------------------------

#: The most parameters a library function takes (positional and keyword-only, ``self``/``cls`` and ``**kwargs``
#: not counted); more, and its settings belong in a frozen spec (``probing/spec.py``'s ``ProbingSpec``) or a small
#: frozen dataclass of what travels together. A spec's own ``__init__`` (its fields) is exempt, and so is the
#: command line, whose commands take one parameter per option.
MAX_PARAMETERS = 12


def _long_signatures(path: Path, limit: int = MAX_PARAMETERS) -> list[str]:
    """The functions of ``path`` (``__init__`` aside) taking more than ``limit`` parameters."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name != "__init__":
            arguments = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            count = len([a for a in arguments if a.arg not in ("self", "cls")])
            if count > limit:
                found.append(f"line {node.lineno}: {node.name} takes {count} parameters")
    return found


def test_no_library_function_takes_more_than_twelve_parameters():
    offenders = [f"{name}: {where}" for name, path in sorted(_modules().items()) if not _is_cli(name)
                 and name != CLI_PACKAGE for where in _long_signatures(path)]
    assert not offenders, (f"more than {MAX_PARAMETERS} parameters; put the settings in a frozen spec (its fields), "
                           "or group what travels together in a small frozen dataclass:\n" + "\n".join(offenders))


def test_the_signature_counter_finds_a_planted_long_function(tmp_path):
    planted = tmp_path / "bertology" / "x" / "run.py"
    planted.parent.mkdir(parents=True)
    planted.write_text(
        "def run(model, data, *, a=1, b=2, c=3, d=4, e=5, f=6, g=7, h=8, i=9, j=10, k=11, **settings):\n    pass\n\n"
        "def fits(model, data, *, a=1, b=2, c=3, d=4, e=5, f=6, g=7, h=8, i=9, j=10, **settings):\n    pass\n\n"
        "class Spec:\n    def __init__(self, a, b, c, d, e, f, g, h, i, j, k, l, m):\n        pass\n\n"
        "    def method(self, a, b, c, d, e, f, g, h, i, j, k, l, m):\n        pass\n")
    assert _long_signatures(planted) == ["line 1: run takes 13 parameters", "line 11: method takes 13 parameters"]


#: A module longer than this holds more than one seam unless its docstring says why not (a paragraph starting
#: ``Length:``): split it where a natural seam exists (``probing/solver.py`` out of ``probes.py``).
MAX_LINES = 600


def _long_modules(paths: dict[str, Path], limit: int = MAX_LINES) -> list[str]:
    """The modules of ``paths`` over ``limit`` lines whose docstring gives no ``Length:`` reason."""
    found = []
    for name, path in sorted(paths.items()):
        text = path.read_text(encoding="utf-8")
        lines = text.count("\n")
        if lines > limit and "\nLength: " not in (ast.get_docstring(ast.parse(text)) or "").join("\n\n"):
            found.append(f"{name}: {lines} lines")
    return found


def test_no_module_is_over_600_lines_without_a_reason_at_its_top():
    offenders = _long_modules(_modules())
    assert not offenders, (f"over {MAX_LINES} lines: split it at a natural seam, or say at its top why not "
                           "(a docstring paragraph starting 'Length:'):\n" + "\n".join(offenders))


def test_the_length_check_finds_a_long_module_without_a_reason(tmp_path):
    body = "x = 1\n" * (MAX_LINES + 1)
    plain, reasoned, short = (tmp_path / f"{name}.py" for name in ("plain", "reasoned", "short"))
    plain.write_text('"""A module."""\n' + body)
    reasoned.write_text('"""A module.\n\nLength: a catalogue, one entry per claim.\n"""\n' + body)
    short.write_text('"""A module."""\n' + "x = 1\n" * 10)
    found = _long_modules({"plain": plain, "reasoned": reasoned, "short": short})
    assert found == [f"plain: {MAX_LINES + 2} lines"]


# -- the library speaks in settings, the command line in options ---------------------------------------------
#: A command-line flag in a string: ``--max-words``, not ``x--y`` nor ``---``.
_FLAG = re.compile(r"(?<![\w-])--[a-z]")
#: Library messages that must still hold a flag, each with why: (module, a fragment of the string) -> reason.
_FLAGS_IN_MESSAGES_ALLOWED = {
    ("bertology.models.sources", "pip install --no-deps "): "pip's own flag, in the command the message prints",
    ("bertology.scale.cluster", "`ray start --head` starts one"): "Ray's own command, quoted",
    ("bertology.scale.cluster", "with `ray start "): "Ray's own command, quoted (the string goes on '--head`')",
}


def _is_message_call(node: ast.Call) -> bool:
    """``warnings.warn(...)``, ``warn(...)``, ``SomeError(...)``, ``SomeWarning(...)``: a message is made."""
    name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
    return name == "warn" or name.endswith(("Error", "Warning"))


def _flags_in_messages(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, string)`` for each string literal (f-string parts included) holding a ``--flag`` inside a
    ``raise`` or inside the arguments of an error, a warning or ``warn``."""
    found: dict[tuple[int, int], str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            parts = [node.exc]
        elif isinstance(node, ast.Call) and _is_message_call(node):
            parts = [*node.args, *(keyword.value for keyword in node.keywords)]
        else:
            continue
        for part in parts:
            for inner in ast.walk(part):
                if isinstance(inner, ast.Constant) and isinstance(inner.value, str) and _FLAG.search(inner.value):
                    found[(inner.lineno, inner.col_offset)] = inner.value
    return [(line, text) for (line, _), text in sorted(found.items())]


def test_library_messages_name_settings_not_command_line_flags():
    """A library error names the setting (``SettingError(setting, value, expected)``, a hint's ``name=``); the
    CLI names the option (``bertology.cli.options.speaking_options``). Modules under bertology.cli are the CLI."""
    offenders, used = [], set()
    for name, path in sorted(_modules().items()):
        if _is_cli(name):
            continue
        for line, text in _flags_in_messages(ast.parse(path.read_text(encoding="utf-8"))):
            allowed = [key for key in _FLAGS_IN_MESSAGES_ALLOWED if key[0] == name and key[1] in text]
            used.update(allowed)
            if not allowed:
                offenders.append(f"{path.relative_to(SRC)}:{line}: {text!r}")
    assert not offenders, ("a library message names a command-line flag: raise SettingError(setting, value, "
                           "expected) or write the keyword as `name=`:\n" + "\n".join(offenders))
    stale = sorted(set(_FLAGS_IN_MESSAGES_ALLOWED) - used)
    assert not stale, f"no longer in a message; remove from _FLAGS_IN_MESSAGES_ALLOWED: {stale}"


def test_the_flag_finder_finds_planted_flags():
    planted = ast.parse(
        "import warnings\n"
        "def check(words, out):\n"
        "    if words > 512:\n"
        "        raise UsageError(f'--max-words {words}: too long')\n"
        "    if out.is_file():\n"
        "        raise OutputError(f'{out}: a file; '\n"
        "                          'choose another --out')\n"
        "    warnings.warn('slow; pass --device cuda', BertologyWarning)\n"
        "    error = DataError('use --data')\n"
        "    print('--not-a-message')\n"
        "    raise DataError(f'{out}: fine, no flag -- here, nor x--y')\n")
    assert [line for line, _ in _flags_in_messages(planted)] == [4, 6, 8, 9]  # 6: the message of lines 6-7
