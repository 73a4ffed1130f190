"""benchmarks/ stays laid out by purpose (issue 34, point 5; BENCHMARKS.md, "Layout").

* ``perf/``: the benchmarks proper, what ``make bench`` runs. Each is ``bench_*.py`` and declares, as a module-level
  ``BASELINE`` string, what it times ours against in the same process.
* ``experiments/<page>/``: the runs behind docs/<page>.md (the page must exist); ``formatters/``: tables re-rendered
  from stored raw output; ``acceptance/``: the README commands' own timings. None of them is named ``bench_*`` or
  declares a ``BASELINE``: a script that does is a perf benchmark and belongs in perf/.
* One importable package: every folder of scripts has an ``__init__.py``; no script patches ``sys.path`` or imports
  a sibling by its bare name (``from stored import ...``), which only works with such a patch or when run as a file.

The checker reads a tree (``layout_problems(root)``), so the same function is shown to catch planted mistakes.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _sys_path_patches(tree: ast.AST) -> list[int]:
    """Lines that change ``sys.path`` (a method call on it, or an assignment to it) or call ``site.addsitedir``."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = ast.unparse(node.func.value)
            if owner == "sys.path" or (owner == "site" and node.func.attr == "addsitedir"):
                lines.append(node.lineno)
        elif isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(ast.unparse(target).startswith("sys.path") for target in targets):
                lines.append(node.lineno)
    return sorted(lines)


def _declares_baseline(tree: ast.Module) -> bool:
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else getattr(
            node, "target", None)
        if isinstance(target, ast.Name) and target.id == "BASELINE" and node.value is not None:
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return False
            return isinstance(value, str) and bool(value.strip())
    return False


def layout_problems(root: Path) -> list[str]:
    """Every way the benchmarks/ folder under ``root`` breaks the layout above ([] when it keeps it)."""
    benchmarks = root / "benchmarks"
    scripts = sorted(path for path in benchmarks.rglob("*.py") if "results" not in path.relative_to(benchmarks).parts)
    stems = {path.stem for path in scripts if path.name != "__init__.py"}
    problems = []
    for folder in sorted({path.parent for path in scripts}):
        if not (folder / "__init__.py").is_file():
            problems.append(f"{folder.relative_to(root)}/: no __init__.py (benchmarks is one importable package)")
    experiments = benchmarks / "experiments"
    if experiments.is_dir():
        for page in sorted(path for path in experiments.iterdir() if path.is_dir() and path.name != "__pycache__"):
            if not (root / "docs" / f"{page.name}.md").is_file():
                problems.append(f"{page.relative_to(root)}/: no docs/{page.name}.md (experiments/<page>/ holds the "
                                "runs behind that docs page)")
    for path in scripts:
        name = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=name)
        for line in _sys_path_patches(tree):
            problems.append(f"{name}:{line}: patches sys.path (import from the benchmarks package instead)")
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                bare = [alias.name for alias in node.names if alias.name.split(".")[0] in stems]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                bare = [node.module] if node.module.split(".")[0] in stems else []
            else:
                continue
            for module in bare:
                problems.append(f"{name}:{node.lineno}: imports {module} by its bare name "
                                "(from benchmarks.<folder>.<module> import ...)")
        if path.name == "__init__.py":
            continue
        in_perf = path.parent == benchmarks / "perf"
        is_bench, baseline = path.name.startswith("bench_"), _declares_baseline(tree)
        if in_perf and not is_bench:
            problems.append(f"{name}: in perf/ but not named bench_*.py (perf/ holds only the benchmarks proper)")
        if in_perf and not baseline:
            problems.append(f"{name}: a perf benchmark without a BASELINE (what it times ours against)")
        if not in_perf and (is_bench or baseline):
            what = "named bench_*" if is_bench else "declares a BASELINE"
            problems.append(f"{name}: {what} outside perf/ (a baseline-vs-ours benchmark goes in perf/; an "
                            "experiment, formatter or acceptance run is not named bench_*)")
    return problems


def test_the_benchmarks_folder_keeps_its_layout():
    assert layout_problems(ROOT) == []


def test_make_bench_runs_exactly_the_perf_benchmarks():
    from benchmarks import run_all

    assert sorted(run_all.benchmarks().values()) == sorted((ROOT / "benchmarks" / "perf").glob("bench_*.py"))
    assert "-m benchmarks.run_all" in (ROOT / "Makefile").read_text(encoding="utf-8")


def _plant(root: Path, files: dict[str, str]) -> Path:
    (root / "docs").mkdir(parents=True, exist_ok=True)
    (root / "docs" / "probing.md").write_text("# Probing\n")
    good = {
        "benchmarks/__init__.py": "",
        "benchmarks/stored.py": "def save_run(name):\n    return name\n",
        "benchmarks/perf/__init__.py": "",
        "benchmarks/perf/bench_extract.py": 'from benchmarks.stored import save_run\n\nBASELINE = "the naive loop"\n',
        "benchmarks/experiments/__init__.py": "",
        "benchmarks/experiments/probing/__init__.py": "",
        "benchmarks/experiments/probing/control_types.py": "from benchmarks.stored import save_run\n",
        "benchmarks/results/old_helper.py": "import sys\nsys.path.insert(0, '.')\n",  # results/ is data, not read
    }
    for relative, text in {**good, **files}.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if text is None:
            path.unlink(missing_ok=True)
        else:
            path.write_text(text)
    return root


def test_the_checker_passes_a_planted_good_tree(tmp_path):
    assert layout_problems(_plant(tmp_path, {})) == []


def test_the_checker_catches_a_sys_path_patch(tmp_path):
    patched = ("import sys\nfrom pathlib import Path\n\nsys.path.insert(0, str(Path(__file__).parent))\n"
               "sys.path.append('..')\nsys.path += ['x']\n")
    problems = layout_problems(_plant(tmp_path, {"benchmarks/experiments/probing/control_types.py": patched}))
    assert [problem.split(": ", 1)[0] for problem in problems] == [
        f"benchmarks/experiments/probing/control_types.py:{line}" for line in (4, 5, 6)]
    assert all("patches sys.path" in problem for problem in problems)


def test_the_checker_catches_a_bare_sibling_import(tmp_path):
    problems = layout_problems(_plant(tmp_path, {
        "benchmarks/experiments/probing/control_types.py": "from stored import save_run\nimport bench_extract\n"}))
    assert problems == [
        "benchmarks/experiments/probing/control_types.py:1: imports stored by its bare name "
        "(from benchmarks.<folder>.<module> import ...)",
        "benchmarks/experiments/probing/control_types.py:2: imports bench_extract by its bare name "
        "(from benchmarks.<folder>.<module> import ...)"]


def test_the_checker_catches_a_benchmark_outside_perf_and_an_experiment_inside_it(tmp_path):
    problems = layout_problems(_plant(tmp_path, {
        "benchmarks/experiments/probing/bench_probe_stop.py": "x = 1\n",
        "benchmarks/experiments/probing/probe_speed.py": 'BASELINE = "scikit-learn"\n',
        "benchmarks/perf/bench_tasks_counts.py": "x = 1\n",
        "benchmarks/perf/table2.py": "x = 1\n",
        "benchmarks/bench_flat.py": 'BASELINE = "naive"\n'}))
    assert sorted(problems) == sorted([
        "benchmarks/bench_flat.py: named bench_* outside perf/ (a baseline-vs-ours benchmark goes in perf/; an "
        "experiment, formatter or acceptance run is not named bench_*)",
        "benchmarks/experiments/probing/bench_probe_stop.py: named bench_* outside perf/ (a baseline-vs-ours "
        "benchmark goes in perf/; an experiment, formatter or acceptance run is not named bench_*)",
        "benchmarks/experiments/probing/probe_speed.py: declares a BASELINE outside perf/ (a baseline-vs-ours "
        "benchmark goes in perf/; an experiment, formatter or acceptance run is not named bench_*)",
        "benchmarks/perf/bench_tasks_counts.py: a perf benchmark without a BASELINE (what it times ours against)",
        "benchmarks/perf/table2.py: in perf/ but not named bench_*.py (perf/ holds only the benchmarks proper)",
        "benchmarks/perf/table2.py: a perf benchmark without a BASELINE (what it times ours against)"])


def test_the_checker_catches_a_missing_init_and_a_page_that_does_not_exist(tmp_path):
    problems = layout_problems(_plant(tmp_path, {
        "benchmarks/experiments/probing/__init__.py": None,
        "benchmarks/experiments/nopage/__init__.py": "",
        "benchmarks/experiments/nopage/run.py": "x = 1\n"}))
    assert problems == [
        "benchmarks/experiments/probing/: no __init__.py (benchmarks is one importable package)",
        "benchmarks/experiments/nopage/: no docs/nopage.md (experiments/<page>/ holds the runs behind that docs page)"]


def test_an_empty_baseline_is_no_baseline(tmp_path):
    problems = layout_problems(_plant(tmp_path, {"benchmarks/perf/bench_extract.py": 'BASELINE = "  "\n'}))
    assert problems == ["benchmarks/perf/bench_extract.py: a perf benchmark without a BASELINE (what it times ours "
                        "against)"]


def test_a_stored_run_records_the_module_it_ran_as(monkeypatch):
    """``python -m benchmarks.perf.bench_extract --name X`` is stored as that command, not as the file's path."""
    import sys
    import types
    from importlib.machinery import ModuleSpec

    from benchmarks.stored import command_line

    script = ROOT / "benchmarks" / "perf" / "bench_extract.py"
    main = types.ModuleType("__main__")
    main.__file__, main.__spec__ = str(script), ModuleSpec("benchmarks.perf.bench_extract", None)
    monkeypatch.setitem(sys.modules, "__main__", main)
    assert command_line([str(script), "--name", "X"]) == ["python", "-m", "benchmarks.perf.bench_extract", "--name", "X"]
    assert command_line(["bench.py"]) == ["python", "bench.py"]  # an argv of another script: as given
    main.__spec__ = None  # run as a file: as given
    assert command_line(["benchmarks/perf/bench_extract.py"]) == ["python", "benchmarks/perf/bench_extract.py"]
