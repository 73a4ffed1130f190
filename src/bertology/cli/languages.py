"""``bertology languages``: a thin typer layer over :func:`bertology.languages.run_languages`; its options make a
:class:`~bertology.languages.spec.LanguagesSpec` (the defaults and every check) before torch loads."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

import bertology.cli.options as options
from bertology.errors import UsageError
from bertology.languages.spec import LanguagesSpec

#: The spec's defaults, which the options show.
DEFAULTS = LanguagesSpec()

def languages_command(
    model: str = options.model_option(),
    treebanks: Optional[List[Path]] = typer.Option(None, "--treebanks", help="CoNLL-U files of several languages, or "
                                         "folders of them (one level of subfolders is read too, as UD's "
                                         "ud_pud/fr/fr_pud-ud-test.conllu.gz); the language is the file name's "
                                         "part before '_' (repeat the option for several)."),
    old_treebanks: Optional[List[Path]] = options.old_option("-t"),
    out: Optional[Path] = options.out_option("languages"),
    seeds: int = options.seeds_option(),
    seed: int = options.seed_option(),
    layers: Optional[str] = options.layers_option(),
    tasks: str = typer.Option(",".join(DEFAULTS.tasks), help="Probes that transfer from English: upos, deprel (comma-separated), "
                              "or none."),
    english: Optional[Path] = typer.Option(None, help="UD folder with train and dev CoNLL-U the transfer probes "
                                           "train on (default: the packaged UD English EWT)."),
    max_sentences: Optional[int] = options.max_sentences_option("Use only the first N sentences of each language."),
    max_train: int = typer.Option(DEFAULTS.max_train, help="Training examples (words for upos, arcs for deprel) per language and "
                                  "for English; 0 = all."),
    max_dev: int = typer.Option(DEFAULTS.max_dev, help="Dev examples per language and for English; 0 = all (test: always all)."),
    train_fraction: float = typer.Option(DEFAULTS.train_fraction, help="Share of the training examples each seed draws."),
    untrained: bool = typer.Option(DEFAULTS.untrained, help="Also measure the untrained twin (seed --seed)."),
    senteval: bool = typer.Option(DEFAULTS.senteval, help="Also build the SentEval tasks from each language's treebank and "
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

    # `-t` was --treebanks here and --task elsewhere: it means --task(s) only, once this spelling goes
    treebanks = options.renamed(treebanks, old_treebanks, "--treebanks", "-t")
    if not treebanks:
        raise UsageError("--treebanks: required; give CoNLL-U files or folders of several languages")
    for path in treebanks:
        options.check_exists(path, "--treebanks")
    options.check_exists(english, "--english")
    options.parse_layers(layers)  # the spelling, naming --layers
    # every setting checked here, once, before anything heavy loads (its SettingError shown naming the option by
    # options.speaking_options); 0 = all for the sizes
    spec = LanguagesSpec(seeds=seed_list(seeds, seed), layers=layers, tasks=tasks, max_sentences=max_sentences,
                         max_train=max_train or None, max_dev=max_dev or None, train_fraction=train_fraction,
                         untrained=untrained, senteval=senteval)
    options.check_cache_dir(cache_dir)
    from bertology.languages.treebanks import read_treebanks

    read_treebanks(treebanks, max_sentences=max_sentences)  # a bad treebank is one line before torch loads
    options.resolve_device(device)  # the name is checked light; "auto" imports torch
    from rich.console import Console

    from bertology.languages.experiment import run_languages
    from bertology.languages.figures import save_figures
    from bertology.languages.tables import console_tables

    result = run_languages(model, treebanks, spec, english=english, cache_dir=cache_dir, device=device,
                           progress=progress)
    out = out or options.default_out("languages", Path(model).name, "-".join(result.meta["languages"]))
    save_figures(result, out, result.meta["model"])
    result.save(out)
    console = Console()
    for table in console_tables(result):
        console.print(table)
    for line in result.meta["absent"]:
        Console(stderr=True).print(f"absent: {line}", highlight=False, soft_wrap=True)
    console.print(f"results in {out} (tables, meta.json, figures)")
