"""``bertology tasks build|list``: build SentEval probing tasks from a treebank, and list task files."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

import bertology.cli.options as options
from bertology.errors import UsageError
from bertology.cli.options import check_exists, default_out, out_option, progress_option, seed_list, seed_option
from bertology.tasks.catalog import SPLIT_CHOICES, TASKS, resolve_task_name

app = options.CommandApp(help="SentEval probing tasks (Conneau et al., 2018): build from a treebank, list.",
                  no_args_is_help=True)


def _split_names(values: Optional[list[str]]) -> Optional[list[str]]:
    if not values:
        return None
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


@app.command("build")
def build_command(
    treebank: Optional[list[Path]] = typer.Option(
        None, "--treebank", help="UD treebank directory or CoNLL-U file(s); repeat for several files "
                                 "(default: the packaged UD English EWT)."),
    old_treebank: Optional[list[Path]] = options.old_option("-t"),
    out: Optional[Path] = out_option("tasks"),
    tasks: Optional[list[str]] = typer.Option(None, "--tasks",
                                              help="Tasks to build (names or Table 2 names, comma-separated or "
                                                   "repeated); default all ten."),
    seed: int = seed_option(),
    split: str = typer.Option("treebank", help="treebank (its own train/dev/test files; one file or files "
                              "without all three splits are split 80/10/10) or pooled (every sentence re-split "
                              "50/10/40 for larger test sets)."),
    progress: bool = progress_option(),
) -> None:
    """Build the probing tasks from a CoNLL-U treebank into OUT (SentEval's file format)."""
    # `-t` was --treebank here and --task elsewhere: it means --task(s) only, once this spelling goes
    treebank = options.renamed(treebank, old_treebank, "--treebank", "-t")
    seed_list(1, seed)  # a non-negative integer, or one line naming --seed
    if split not in SPLIT_CHOICES:
        raise UsageError(f"--split {split!r}: expected {' or '.join(SPLIT_CHOICES)}")
    for name in _split_names(tasks) or ():
        resolve_task_name(name)  # an unknown name is one line before anything loads
    for path in treebank or ():
        check_exists(path, "--treebank")
    if not treebank:
        from bertology.data import packaged_treebank

        treebank = [packaged_treebank()]
    out = out if out is not None else default_out("tasks", treebank[0].name.split(".")[0])
    from bertology.tasks.build import build_tasks

    console = Console()
    report = build_tasks(treebank if len(treebank) > 1 else treebank[0], out, tasks=_split_names(tasks),
                         seed=seed, progress=progress, split=split)
    table = Table(title=f"probing tasks in {out} ({report.split_source})")
    for column in ("task", "column", "train", "dev", "test"):
        table.add_column(column, justify="right" if column in ("train", "dev", "test") else "left", no_wrap=True)
    for row in report.totals().itertuples(index=False):
        table.add_row(row.task, TASKS[row.task].column, str(row.train), str(row.dev), str(row.test))
    console.print(table)
    for task, reason in report.skipped.items():
        console.print(f"[yellow]skipped {task} ({TASKS[task].column}):[/yellow] {reason}")
    console.print(f"manifest: {report.manifest_path}")


@app.command("list")
def list_command(
    directory: Optional[Path] = typer.Argument(None, help="Folder of task files; omit to list the ten tasks."),
) -> None:
    """List task files in DIRECTORY (sizes per split, labels), or describe the ten tasks."""
    console = Console()
    if directory is None:
        table = Table(title="SentEval probing tasks")
        for column in ("task", "column", "category", "file", "definition"):
            table.add_column(column, no_wrap=column != "definition")
        for info in TASKS.values():
            table.add_row(info.name, info.column, info.category, info.file_name, info.description)
        console.print(table)
        return
    check_exists(directory, "DIRECTORY")  # before pandas loads
    from bertology.tasks.load import list_tasks

    frame = list_tasks(directory)
    if frame.empty:
        console.print(f"no SentEval task files in {directory}")
        return
    table = Table(title=f"probing tasks in {directory}")
    for column in ("task", "column", "file", "train", "dev", "test", "labels"):
        table.add_column(column, justify="right" if column in ("train", "dev", "test") else "left",
                         no_wrap=column != "labels")
    for row in frame.itertuples(index=False):
        labels = row.labels if len(row.labels) <= 60 else row.labels[:57] + "..."
        table.add_row(row.task, row.column, row.file, str(row.train), str(row.dev), str(row.test),
                      f"{row.n_labels}: {labels}")
    console.print(table)
