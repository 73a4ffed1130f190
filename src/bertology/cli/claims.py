"""`bertology claims`: the Primer as a checklist, for one model or several side by side (a thin typer layer over
:func:`bertology.report.checklist.run_claims`; nothing heavy is imported until the command runs)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

import bertology.cli.options as options
from bertology.errors import UsageError
from bertology.report.names import check_sections


def claims_command(
    model: str = options.model_option(),
    more: Optional[list[str]] = typer.Argument(None, help="More models after --compare A (--compare A B C ...).",
                                               show_default=False),
    compare: Optional[str] = typer.Option(None, "--compare", help="Several models side by side, one verdict column "
                                          "each: --compare A B ... ('untrained' is A's untrained twin; a fine-tuned "
                                          "checkpoint or any local model folder works too)."),
    out: Path = typer.Option(Path("reports"), "--out", "-o", help="Reports (and their cached results) go to "
                             "OUT/<model>/; the checklist beside them (OUT/claims-A-vs-B/ when comparing)."),
    fresh: bool = typer.Option(False, "--fresh", help="Recompute everything instead of reusing finished parts."),
    seeds: int = options.seeds_option(help="How many probe seeds (from --seed), as bertology report."),
    seed: int = options.seed_option(),
    max_sentences: Optional[int] = options.max_sentences_option(),
    sections: Optional[str] = typer.Option(None, "--sections", "--section", help="Comma-separated report sections "
                                           "to run (default: all); the claims of the others cannot tell."),
    device: str = options.device_option(),
    progress: bool = options.progress_option(),
    languages: Optional[list[Path]] = typer.Option(
        None, "--languages", help="CoNLL-U treebanks of several languages (files or folders), for the multilingual "
                                  "claims."),
) -> None:
    """Judge each BERTology claim of the seed documents on a model: holds / does not hold / cannot tell, with
    the number, its baseline, its 95% interval and the paper's number (docs/claims.md).

    Runs the model's report (reusing its finished parts under OUT/<model>/results) and writes claims.csv and
    claims.html; the report (OUT/<model>/index.html) opens with the same checklist."""
    started = time.perf_counter()
    options.check_positive(max_sentences, "--max-sentences")
    seed_values = options.seed_list(seeds, seed)
    options.resolve_device(device)
    chosen = check_sections(sections.split(",")) if sections is not None else None
    for path in languages or ():
        options.check_exists(path, "--languages")
    models = ([compare] if compare else [model]) + list(more or [])
    if models[0] == "untrained":
        raise UsageError("--compare untrained: name the model first (--compare MODEL untrained)")
    from rich.console import Console
    from rich.table import Table

    from bertology.report.checklist import run_claims

    outcome = run_claims(models, out, fresh=fresh, seeds=seed_values, max_sentences=max_sentences, device=device,
                         progress=progress, languages=languages, sections=chosen)
    table = Table(title="The Primer, checked")
    frame = outcome.table
    if "verdict" in frame.columns:
        from bertology.claims.evaluate import display_frame

        shown = display_frame(frame)
        shown["claim"] = frame["claim"]
        for column in ("claim", "verdict", "number", "baseline", "interval", "paper's number"):
            table.add_column(column, overflow="fold")
        for _, row in shown.iterrows():
            table.add_row(*(str(row[c]) for c in ("claim", "verdict", "number", "baseline", "interval",
                                                  "paper's number")))
    else:
        labels = [c for c in frame.columns if c not in ("claim", "statement", "document", "paper", "paper_number")
                  and not c.endswith((" number", " why"))]
        table.add_column("claim", overflow="fold")
        for label in labels:
            table.add_column(label, overflow="fold")
        for _, row in frame.iterrows():
            table.add_row(row["claim"], *(f"{row[m]} ({row[m + ' number']})" for m in labels))
    console = Console()
    console.print(table)
    console.print(f"claims written to {outcome.csv} and {outcome.html} ({time.perf_counter() - started:.0f} s)",
                  soft_wrap=True, highlight=False)
    failed = {m: f for m, f in outcome.failed.items() if f}
    for label, sections in failed.items():
        for section_id, why in sections.items():
            Console(stderr=True).print(f"failed section {section_id} ({label}): {why}", highlight=False, markup=False)
    if failed:
        raise typer.Exit(1)
