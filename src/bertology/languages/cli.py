"""``bertology languages``: a thin typer layer over :func:`bertology.languages.run_languages`."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from bertology import options
from bertology.errors import UsageError

#: The transfer tasks the command accepts (bertology.languages.TRANSFER_TASKS, kept light here).
TASK_CHOICES = ("upos", "deprel")


def check_tasks(tasks: str) -> list[str]:
    """``--tasks``: a comma-separated subset of upos, deprel, or ``none``."""
    chosen = [t.strip().lower() for t in tasks.split(",") if t.strip()]
    if chosen == ["none"]:
        return []
    unknown = [t for t in chosen if t not in TASK_CHOICES]
    if unknown or not chosen:
        raise UsageError(f"--tasks {tasks}: unknown task {', '.join(unknown) or '(none given)'}; expected any of "
                         f"{', '.join(TASK_CHOICES)} (comma-separated) or none")
    return chosen


def languages_command(
    model: str = options.model_option(),
    treebanks: List[Path] = typer.Option(..., "--treebanks", "-t", help="CoNLL-U files of several languages, or "
                                         "folders of them (one level of subfolders is read too, as UD's "
                                         "ud_pud/fr/fr_pud-ud-test.conllu.gz); the language is the file name's "
                                         "part before '_' (repeat the option for several)."),
    out: Optional[Path] = options.out_option("languages"),
    seeds: int = options.seeds_option(),
    seed: int = options.seed_option(),
    layers: Optional[str] = options.layers_option(),
    tasks: str = typer.Option("upos", help="Probes that transfer from English: upos, deprel (comma-separated), "
                              "or none."),
    english: Optional[Path] = typer.Option(None, help="UD folder with train and dev CoNLL-U the transfer probes "
                                           "train on (default: the packaged UD English EWT)."),
    max_sentences: Optional[int] = options.max_sentences_option("Use only the first N sentences of each language."),
    max_train: int = typer.Option(5000, help="Training examples (words for upos, arcs for deprel) per language and "
                                  "for English; 0 = all."),
    max_dev: int = typer.Option(2000, help="Dev examples per language and for English; 0 = all (test: always all)."),
    train_fraction: float = typer.Option(0.8, help="Share of the training examples each seed draws."),
    untrained: bool = typer.Option(True, help="Also measure the untrained twin (seed --seed)."),
    senteval: bool = typer.Option(True, help="Also build the SentEval tasks from each language's treebank and "
                                  "list which its annotation supports."),
    cache_dir: Optional[Path] = typer.Option(None, "--cache-dir", help="Where stores are cached (default "
                                             "$BERTOLOGY_CACHE or ~/.cache/bertology)."),
    device: str = options.device_option(),
    progress: bool = options.progress_option(),
) -> None:
    """Language identity, language centroids, parallel sentence retrieval (raw and centred) and zero-shot
    transfer of English probes, per layer, model vs untrained twin; the tokenizer per language. Writes the
    tables, meta.json and the figures into OUT (docs/languages.md)."""
    from bertology.runtime import seed_list

    chosen_seeds = seed_list(seeds, seed)
    chosen_tasks = check_tasks(tasks)
    for path in treebanks:
        options.check_exists(path, "--treebanks")
    options.check_exists(english, "--english")
    options.check_positive(max_sentences, "--max-sentences")
    options.check_count(max_train, "--max-train")
    options.check_count(max_dev, "--max-dev")
    options.check_fraction(train_fraction, "--train-fraction")
    options.parse_layers(layers)
    options.check_cache_dir(cache_dir)
    from bertology.languages.treebanks import read_treebanks

    read_treebanks(treebanks, max_sentences=max_sentences)  # a bad treebank is one line before torch loads
    options.resolve_device(device)  # the name is checked light; "auto" imports torch
    from rich.console import Console

    from bertology.languages.experiment import run_languages
    from bertology.languages.figures import save_figures
    from bertology.languages.tables import console_tables

    result = run_languages(model, treebanks, seeds=chosen_seeds, layers=layers, tasks=chosen_tasks, english=english,
                           max_sentences=max_sentences, max_train=max_train or None, max_dev=max_dev or None,
                           train_fraction=train_fraction, untrained=untrained, senteval=senteval,
                           cache_dir=cache_dir, device=device, progress=progress)
    out = out or options.default_out("languages", Path(model).name, "-".join(result.meta["languages"]))
    save_figures(result, out, result.meta["model"])
    result.save(out)
    console = Console()
    for table in console_tables(result):
        console.print(table)
    for line in result.meta["absent"]:
        Console(stderr=True).print(f"absent: {line}", highlight=False, soft_wrap=True)
    console.print(f"results in {out} (tables, meta.json, figures)")
