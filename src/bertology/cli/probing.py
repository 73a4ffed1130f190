"""``bertology probe``: layer-wise probing with its baselines; prints Table 2, writes the result tables and plot."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

import bertology.cli.options as options

app = options.CommandApp(help="Layer-wise classification probes with honest baselines.", no_args_is_help=True)


@app.command("probe")
def probe(
    model: str = options.model_option(),
    tasks: str = typer.Option("senteval", "--tasks", "-t", help="Comma-separated: senteval (all ten), ud (upos,xpos,deprel), "
                              "upos, xpos, deprel, ner, structural, any registered task "
                              "(bertology.probing.register_task), or SentEval names (BShift, tree_depth...)."),
    treebank: Optional[Path] = typer.Option(None, help="UD treebank folder with train/dev/test CoNLL-U "
                                            "(default: the packaged UD English EWT)."),
    seeds: int = options.seeds_option(),
    seed: int = options.seed_option(),
    out: Optional[Path] = options.out_option("probe"),
    probe_kind: str = typer.Option("linear", "--probe", help="linear (logistic regression) or mlp."),
    max_sentences: Optional[int] = options.max_sentences_option(),
    max_train: Optional[int] = typer.Option(None, help="Training examples per task (default 20,000 words, 10,000 "
                                            "arcs, every entity span and SentEval sentence; --quick: 4000 / "
                                            "4000 / 2000 / 1000)."),
    max_eval: Optional[int] = typer.Option(None, help="Dev and test examples per task (default: all of them; "
                                           "--quick: 1000 / 1000 / 500 / 300)."),
    quick: bool = typer.Option(False, "--quick", help="Small sizes for a quick look; the tables flag the numbers "
                               "as underpowered."),
    train_fraction: float = typer.Option(1.0, help="Share of the (capped) training examples each seed draws "
                                         "(1 = all; below 1 each seed draws its own random subset)."),
    train_sampling: str = typer.Option("bootstrap", help="How each seed draws its training examples: bootstrap "
                                       "(default; a resample with replacement, so the seed spread and the "
                                       "intervals include the probe's training variation) or all (the same "
                                       "examples for every seed)."),
    mdl: bool = typer.Option(False, "--mdl", help="Also measure each layer's online codelength (MDL, Voita and "
                             "Titov 2020) for the task, its control task and the untrained twin."),
    mdl_timestamps: Optional[str] = typer.Option(None, "--mdl-timestamps", help="With --mdl: where the online "
                                                 "code's blocks end, as shares of the training set, comma-separated, "
                                                 "strictly increasing, each in (0, 1] (default Voita and Titov's "
                                                 "0.001,0.002,...,0.5,1)."),
    layers: Optional[str] = options.layers_option(),
    device: str = options.device_option(),
    cache_dir: Optional[Path] = typer.Option(None, help="Where extracted stores are cached "
                                             "(default $BERTOLOGY_CACHE or ~/.cache/bertology)."),
    untrained: bool = typer.Option(True, help="Also probe the untrained twin (one per seed)."),
    control: bool = typer.Option(True, help="Also train on control tasks (selectivity): Hewitt and Liang's for "
                                 "word, arc and span tasks."),
    control_types: str = typer.Option("auto", help="What a word type is for control tasks and the word-identity "
                                      "baseline: auto (lower-cased if the tokenizer is uncased, else exact), "
                                      "lower or exact."),
    sentence_control: str = typer.Option("none", help="Control task for SentEval sentence tasks: none (default; a "
                                         "bag-of-words control is decodable from mean-pooled vectors), first-word "
                                         "(the control label of the first word's type) or bag-of-words."),
    senteval_split: str = typer.Option("pooled", help="How SentEval tasks built from the treebank are split: "
                                       "pooled (default; all its sentences re-split 50/10/40: test sets large "
                                       "enough for +/-1.5 points on BShift and SOMO; not for a model trained on "
                                       "the treebank) or treebank (its own train/dev/test files)."),
    scalar_mix: bool = typer.Option(True, help="Also fit a scalar mix over all layers."),
    progress: bool = options.progress_option(),
) -> None:
    """Probe every layer of MODEL on TASKS; print the Table 2 layout and write the tables (results, summary,
    table2, table2_dev, best_layer, datasets as Parquet + CSV), meta.json and layer_curves.png/.svg into OUT."""
    from rich.console import Console

    from bertology.errors import SettingError
    from bertology.probing.spec import ProbingSpec

    seed_values = options.seed_list(seeds, seed)
    try:  # every setting checked here, once, before anything heavy loads
        timestamps = {} if mdl_timestamps is None else {"mdl_timestamps": _shares(mdl_timestamps, mdl)}
        spec = ProbingSpec(
            tasks=tasks, treebank=treebank, seeds=tuple(seed_values), layers=layers, probe=probe_kind,
            max_train=max_train, max_eval=max_eval, max_sentences=max_sentences, quick=quick,
            train_fraction=train_fraction, train_sampling=train_sampling, mdl=mdl, untrained=untrained,
            control=control, control_types=control_types, sentence_control=sentence_control, senteval_split=senteval_split, scalar_mix=scalar_mix,
            **timestamps)
    except SettingError as error:
        raise error.as_option({"probe": "--probe"}) from None
    options.check_cache_dir(cache_dir)
    options.check_exists(treebank, "--treebank")
    out = out if out is not None else options.default_out(
        "probe", Path(model).name or model, tasks, treebank.name if treebank is not None else None)
    options.resolve_device(device)
    from bertology.probing.experiment import run_probing
    from bertology.probing.report import best_layer_verdicts, plot_layer_curves, print_table2
    from bertology.probing.summary import MIN_SPLIT

    result = run_probing(model, spec, cache_dir=cache_dir, device=device, progress=progress)
    result.save(out)
    name = result.meta["model"]
    plot_layer_curves(result["table2"], out / "layer_curves.png", model=name)
    console = Console()
    print_table2(result["table2"], result["best_layer"], console, model=name)
    for verdict in best_layer_verdicts(result["best_layer"]).values():
        console.print(verdict.sentence(), markup=False)
    for row in result["datasets"].itertuples():
        notes = "; ".join(row.notes)
        if row.status == "absent":
            console.print(f"[yellow]{row.task}: absent - {notes}[/yellow]")
            continue
        sizes = f"train={row.train} ({row.n_train} used per seed), dev={row.n_dev}, test={row.n_test} {row.unit}"
        console.print(f"[dim]{row.task}: {sizes}{(' - ' + notes) if notes else ''}[/dim]")
        small = [s for s, n in (("train", row.n_train), ("dev", row.n_dev), ("test", row.n_test)) if n < MIN_SPLIT]
        if small:
            console.print(f"[yellow]warning: {row.task} has fewer than {MIN_SPLIT} examples in {', '.join(small)}: "
                          "its numbers are underpowered[/yellow]")
    if control:
        kind = "lower-cased" if result.meta["control_types"] == "lower" else "exact"
        console.print(f"control tasks (Hewitt and Liang) key on {kind} word types (--control-types "
                      f"{control_types}); sentence tasks: "
                      + ("no control" if result.meta["sentence_control"] == "none"
                         else f"the {result.meta['sentence_control']} control"))
    if quick:
        console.print("[yellow]--quick: small sizes; the numbers are underpowered (see the * columns)[/yellow]")
    console.print(f"wrote {out}/: results, summary, table2, table2_dev, best_layer, datasets (.parquet, .csv), "
                  "meta.json, layer_curves.png/.svg")


def _shares(text: str, mdl: bool) -> tuple[float, ...]:
    """``--mdl-timestamps`` as numbers (:class:`~bertology.probing.spec.ProbingSpec` checks them: not empty,
    strictly increasing, each in (0, 1]); only beside ``--mdl``."""
    from bertology.errors import SettingError

    if not mdl:
        raise SettingError("mdl_timestamps", text, "only with --mdl (the blocks of the online code)", shown=text)
    if not text.strip():
        return ()
    try:
        return tuple(float(part) for part in text.split(","))
    except ValueError:
        raise SettingError("mdl_timestamps", text, "expected shares of the training set separated by commas, e.g. "
                           "0.1,0.5,1", shown=text) from None
