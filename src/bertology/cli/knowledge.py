"""``bertology knowledge ...``: a thin typer layer over :mod:`bertology.knowledge`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

import bertology.cli.options as options

app = options.CommandApp(help="What the model knows: static similarity, numeracy, the MLM probe, LAMA, minimal pairs.",
                  no_args_is_help=True)
console = Console()

DATA_HELP = "Corpus (.conllu[.gz], .txt, SentEval .txt/.tsv); default the packaged UD English EWT dev."


@app.callback()
def knowledge() -> None:
    """What the model knows (the Convexity report, Petroni et al., BLiMP)."""


def _data_name(data: Optional[Path], default: str = "ewt-dev") -> str:
    return data.name.split(".")[0] if data else default


def _save(result, out, key: str, name: str, draw) -> None:
    """The figure (``draw(path)``) and the result's tables together or not at all: a full disk or a kill part-way
    leaves an earlier result in ``out`` as it was."""
    from bertology.files import staged_dir

    with staged_dir(out) as staged:
        result.figures[key] = draw(staged / name)
        result.save(staged)
    result.figures[key] = Path(out) / name


@app.command("static")
def static_command(
    model: str = options.model_option(),
    data: Optional[Path] = options.data_option(help=DATA_HELP),
    out: Optional[Path] = options.out_option("knowledge/static"),
    seeds: int = options.seeds_option(),
    seed: int = options.seed_option(),
    layers: Optional[str] = options.layers_option(),
    device: str = options.device_option(),
    max_sentences: Optional[int] = options.max_sentences_option(help="Use only the first N sentences."),
    min_count: int = typer.Option(5, "--min-count", help="Occurrences a token type needs."),
    untrained: bool = typer.Option(True, "--untrained/--no-untrained", help="Also measure the untrained "
                                   "twin (one per seed)."),
    cache_dir: Optional[Path] = typer.Option(None, "--cache-dir", help="Where stores are cached."),
    progress: bool = options.progress_option(),
) -> None:
    """Cosine of each layer's token vectors with (a) the token's input embedding and (b) its type's average
    over contexts (Bommasani et al. 2020), raw and adjusted by random pairs; model vs untrained twin."""
    from bertology.results import MISSING, number
    from bertology.runtime import seed_list

    options.check_positive(min_count, "--min-count")
    options.check_cache_dir(cache_dir)
    chosen_seeds = seed_list(seeds, seed)
    out = out or options.default_out("knowledge/static", Path(model).name, _data_name(data))
    from bertology.knowledge.static import plot_static, static_similarity

    result = static_similarity(model, data, seeds=chosen_seeds, layers=layers, untrained=untrained,
                               min_count=min_count, max_sentences=max_sentences, device=device,
                               cache_dir=cache_dir, progress=progress)
    _save(result, out, "static", "static_similarity.png", lambda path: plot_static(
        result["summary"], path, title=f"{result.meta['model']['name']}: similarity to static embeddings"))
    summary = result["summary"]
    view = Table(title=f"similarity to static embeddings, {result.meta['model']['name']} (adjusted = minus "
                 f"random pairs; mean over {len(chosen_seeds)} seed(s))")
    view.add_column("layer", justify="right")
    columns = [(r, e) for r in ("input_embedding", "type_average") for e in ("trained", "untrained")]
    for reference, encoder in columns:
        view.add_column(f"{'(a) input emb.' if reference == 'input_embedding' else '(b) type avg.'} "
                        f"{'model' if encoder == 'trained' else 'twin'}", justify="right")
    for layer in sorted(summary["layer"].unique()):
        cells = [str(int(layer))]
        for reference, encoder in columns:
            part = summary[(summary["layer"] == layer) & (summary["reference"] == reference)
                           & (summary["weights"] == encoder)]
            cells.append(number(part["adjusted"].iloc[0]) if len(part) else MISSING)
        view.add_row(*cells)
    console.print(view)
    for reference, shape in result.meta["u_shape"].items():
        verdict = "U shape" if shape.get("u_shape") else "no U shape"
        console.print(f"{reference}: {verdict} (minimum at layer {shape.get('minimum_layer')})")
    console.print(f"results in {out} (layers, summary; static_similarity.png)")


@app.command("numeracy")
def numeracy_command(
    model: str = options.model_option(),
    out: Optional[Path] = options.out_option("knowledge/numeracy"),
    top: int = typer.Option(999, "--top", help="Decode the integers 0..TOP (Wallace et al.'s [0, 999] by default)."),
    folds: int = typer.Option(5, "--folds", help="Cross-validation folds: every number is predicted by a probe "
                              "trained on the others."),
    seed: int = options.seed_option(),
    untrained: bool = typer.Option(True, "--untrained/--no-untrained", help="Also probe the untrained twin."),
    device: str = options.device_option(),
    cache_dir: Optional[Path] = typer.Option(None, "--cache-dir", help="Where stores are cached."),
    progress: bool = options.progress_option(),
) -> None:
    """Wallace et al. (2019)'s decoding probe: can each layer's vector of a number (written in digits) give its
    value back, beside the untrained twin and the training mean, and are numbers WordPiece splits decoded worse
    than whole ones (the split gap, within each hundred)?"""
    from bertology.knowledge.numeracy import NumeracySpec

    options.check_cache_dir(cache_dir)
    spec = NumeracySpec(top=top, folds=folds, seed=seed, untrained=untrained)  # a SettingError names its option
    out = out or options.default_out("knowledge/numeracy", Path(model).name, f"0-{top}")
    from bertology.files import staged_dir
    from bertology.knowledge.numeracy import numeracy, numeracy_table
    from bertology.results import number

    result = numeracy(model, spec, device=device, cache_dir=cache_dir, progress=progress)
    with staged_dir(out) as staged:
        result.save(staged)
    shown = numeracy_table(result["layers"])
    view = Table(title=f"numeracy, {result.meta['model']['name']}: decoding 0-{top} ({result.meta['test']} test "
                 "numbers; RMSE, lower is better)")
    for column in shown.columns:
        view.add_column(column, justify="right")
    for row in shown.itertuples(index=False):
        view.add_row(*[cell if isinstance(cell, str) else number(cell, 1) for cell in row])
    console.print(view)
    console.print(f"results in {out} (layers, numbers)")


@app.command("mlm-probe")
def mlm_probe_command(
    model: str = options.model_option(),
    data: Optional[Path] = options.data_option(help="Training text (any corpus format); default the packaged "
                                               "UD English EWT train. Without --eval-data, every fifth sentence "
                                               "of --data is held out."),
    eval_data: Optional[Path] = typer.Option(None, "--eval-data", help="Held-out text (default: the packaged "
                                             "EWT dev when --data is not given)."),
    out: Optional[Path] = options.out_option("knowledge/mlm-probe"),
    seeds: Optional[int] = options.seeds_option(default=None, help="How many seeds (default 3; 1 with --quick)."),
    seed: int = options.seed_option(),
    layers: Optional[str] = options.layers_option(),
    device: str = options.device_option(),
    max_sentences: Optional[int] = options.max_sentences_option(help="Use only the first N sentences of --data (before "
                                                                     "every fifth is held out, without --eval-data)."),
    max_test: Optional[int] = typer.Option(None, "--max-test", help="Use only the first N sentences of --eval-data, "
                                           "the held-out text the heads are tested on."),
    old_max_test: Optional[int] = options.old_option("--max-eval-sentences"),
    dropout: float = typer.Option(0.9, "--dropout", help="Dropout rate on the frozen model's word-embedding "
                                  "lookup (the report's 'highly dropouted embeddings'); 0 = clean input."),
    corrupt: str = typer.Option("target", "--corrupt", help="target: drop out only the predicted token's "
                                "embedding (a copy of the sentence per token, the context clean, as [MASK] "
                                "would); all: every token's embedding, the context included."),
    epochs: Optional[int] = typer.Option(None, "--epochs", help="Passes over the training text (default 2; 1 "
                                         "with --quick)."),
    batch_size: int = typer.Option(128, "--batch-size", help="Tokens per step."),
    lr: float = typer.Option(2e-3, "--lr", help="AdamW learning rate (linear decay to 0)."),
    decoder: str = typer.Option("tied", "--decoder", help="tied: the model's frozen input embeddings + a "
                                "trained bias (BERT's head); untied: a trained dim x vocab decoder per layer."),
    bf16: bool = typer.Option(False, "--bf16", help="bfloat16 autocast (for GPUs; on CPU it is slower)."),
    untrained: bool = typer.Option(True, "--untrained/--no-untrained", help="Also probe the untrained twin."),
    quick: bool = typer.Option(False, "--quick", help="A few minutes on a CPU: 400 training and 100 held-out "
                               "sentences, 1 epoch, 1 seed (explicit options win)."),
    cache_dir: Optional[Path] = typer.Option(None, "--cache-dir", help="Where stores are cached."),
    progress: bool = options.progress_option(),
) -> None:
    """The Convexity report's MLM probe: a BERT MLM head trained on every layer (all layers in one pass)
    on input with heavily dropped-out word embeddings; top-1/top-10 accuracy and perplexity on held-out
    text, model vs untrained twin, over seeds."""
    from bertology.errors import SettingError
    from bertology.knowledge.mlm_settings import DEFAULTS, QUICK
    from bertology.knowledge.spec import MLMProbeSpec
    from bertology.runtime import seed_list

    preset = QUICK if quick else {}
    seeds = seeds if seeds is not None else preset.get("seeds", DEFAULTS["seeds"])
    epochs = epochs if epochs is not None else preset.get("epochs", DEFAULTS["epochs"])
    max_test = options.renamed(max_test, old_max_test, "--max-test", "--max-eval-sentences")  # the glossary's split
    if quick:
        max_sentences = max_sentences if max_sentences is not None else preset["max_sentences"]
        max_test = max_test if max_test is not None else preset["max_test"]
    options.check_positive(max_test, "--max-test")
    options.check_cache_dir(cache_dir)
    chosen_seeds = seed_list(seeds, seed)
    try:
        spec = MLMProbeSpec(seeds=chosen_seeds, layers=layers, untrained=untrained, dropout=dropout, corrupt=corrupt,
                            epochs=epochs, batch_size=batch_size, lr=lr, decoder=decoder, max_sentences=max_sentences,
                            max_test=max_test, autocast=bf16)
    except SettingError as error:
        raise error.as_option({"autocast": "--bf16"}) from None
    from bertology.knowledge.mlm_probe import mlm_probe, plot_mlm_probe
    from bertology.results import MISSING, number, percent

    out = out or options.default_out("knowledge/mlm-probe", Path(model).name, _data_name(data, "ewt"))
    result = mlm_probe(model, data, eval_data, spec, device=device, cache_dir=cache_dir, progress=progress)
    _save(result, out, "mlm_probe", "mlm_probe.png", lambda path: plot_mlm_probe(
        result["summary"], result["baselines"], path,
        title=f"{result.meta['model']['name']}: MLM probe per layer (input dropout {dropout:g}, {corrupt})"))
    summary = result["summary"]
    view = Table(title=f"MLM probe, {result.meta['model']['name']}: held-out accuracy (%) and perplexity, mean "
                 f"over {len(chosen_seeds)} seed(s)")
    for header in ("layer", "top-1", "top-10", "perplexity", "twin top-1", "twin top-10", "twin perplexity"):
        view.add_column(header, justify="right")
    for layer in sorted(summary["layer"].unique()):
        cells = [str(int(layer))]
        for kind in ("trained", "untrained"):
            part = summary[(summary["layer"] == layer) & (summary["weights"] == kind)]
            if part.empty:
                cells += [MISSING] * 3
            else:
                row = part.iloc[0]
                cells += [percent(row["top1"]), percent(row["top10"]), number(row["perplexity"], 1)]
        view.add_row(*cells)
    console.print(view)
    base = result["baselines"].iloc[0]
    console.print(f"unigram baseline: top-1 {percent(base['top1'])}%, top-10 {percent(base['top10'])}%, "
                  f"perplexity {base['perplexity']:.1f}")
    console.print(f"results in {out} (layers, summary, baselines, training; mlm_probe.png)")


@app.command("lama")
def lama_command(
    model: str = options.model_option(),
    data: Optional[Path] = options.data_option(help="A LAMA data folder (relations.jsonl, TREx/, Google_RE/, "
                                               "Squad/; default $BERTOLOGY_DATA/lama) or one relation's JSONL file."),
    out: Optional[Path] = options.out_option("knowledge/lama"),
    corpora: Optional[str] = typer.Option(None, "--corpora", help="Google-RE, T-REx, SQuAD (default all)."),
    relations: Optional[str] = typer.Option(None, "--relations", help="Only these relations, e.g. P19,P20."),
    template: Optional[str] = typer.Option(None, "--template", help="For a single relation file: the template, "
                                           "with [X] for the subject and [Y] for the object."),
    vocab: Optional[Path] = typer.Option(None, "--vocab", help="Candidate vocabulary, one token a line (e.g. "
                                         "LAMA's common_vocab_cased.txt); default the tokenizer's whole words."),
    max_sentences: Optional[int] = options.max_sentences_option(help="Use only the first N facts of each relation."),
    layers: Optional[str] = options.layers_option(help="Also score each layer through the model's own MLM head "
                                                  "(a logit lens): all, 0,3,6, ...; default only the output."),
    seeds: int = options.seeds_option(default=1, help="How many untrained twins (seeds from --seed)."),
    seed: int = options.seed_option(),
    untrained: bool = typer.Option(True, "--untrained/--no-untrained", help="Also score the untrained twin."),
    batch_size: int = typer.Option(32, "--batch-size", help="Sentences per forward pass."),
    device: str = options.device_option(),
    progress: bool = options.progress_option(),
) -> None:
    """LAMA (Petroni et al. 2019): P@1, P@10 and MRR per relation and per corpus for a masked LM, over a common
    vocabulary, single-token objects only (the others are counted), model vs untrained twin."""
    from bertology.results import percent
    from bertology.runtime import seed_list

    options.check_positive(batch_size, "--batch-size")
    options.check_positive(max_sentences, "--max-sentences")
    chosen_seeds = seed_list(seeds, seed)
    out = out or options.default_out("knowledge/lama", Path(model).name, _data_name(data, "lama"))
    from bertology.errors import SettingError
    from bertology.knowledge.spec import LamaSpec

    try:
        spec = LamaSpec(corpora=corpora, relations=relations.split(",") if relations else None, template=template,
                        max_facts=max_sentences, layers=layers, seeds=chosen_seeds, untrained=untrained,
                        batch_size=batch_size)
    except SettingError as error:
        raise error.as_option({"max_facts": "--max-sentences"}) from None
    from bertology.knowledge.lama import lama

    result = lama(model, data, spec, vocab=vocab, device=device, progress=progress)
    from bertology.knowledge.lama import plot_lama

    _save(result, out, "lama", "lama.png", lambda path: plot_lama(
        result["relations"], path, title=f"{result.meta['model']}: LAMA P@1 per relation"))
    corpus_table = result["corpora"]
    last = corpus_table["layer"].max()
    view = Table(title=f"LAMA, {result.meta['model']} ({result.meta['vocabulary']['kept']:,} candidates; "
                 "mean over relations, %)")
    for header in ("corpus", "relations", "facts", "P@1", "P@10", "MRR", "twin P@1", "chance P@1"):
        view.add_column(header, justify="right")
    trained = corpus_table[(corpus_table["weights"] == "trained") & (corpus_table["layer"] == last)]
    twins = corpus_table[(corpus_table["weights"] == "untrained") & (corpus_table["layer"] == last)]
    for _, row in trained.iterrows():
        twin = twins[twins["corpus"] == row["corpus"]]["p_at_1"]
        view.add_row(row["corpus"], str(int(row["relations"])), f"{int(row['facts']):,}", percent(row["p_at_1"]),
                     percent(row["p_at_10"]), percent(row["mrr"]), percent(twin.mean()),
                     percent(row["chance_p_at_1"], 3))
    console.print(view)
    split = int(result["relations"].query("weights == 'trained'")["split_objects"].sum())
    if split:
        console.print(f"{split:,} facts have objects the tokenizer splits into several tokens; they are counted "
                      "(split_objects) and not scored, as in LAMA")
    if len(result["missing"]):
        console.print(f"relations without data here: {', '.join(result['missing']['relation'])}")
    console.print(f"results in {out} (relations, corpora, facts, missing; lama.png)")


@app.command("pairs")
def pairs_command(
    model: str = options.model_option(),
    data: Optional[Path] = options.data_option(default=None, help="BLiMP-format JSONL (sentence_good, "
                                               "sentence_bad per line; UID = paradigm) or a folder of them."),
    out: Optional[Path] = options.out_option("knowledge/pairs"),
    whole_word: bool = typer.Option(False, "--whole-word", help="Mask all tokens of a word together."),
    max_sentences: Optional[int] = options.max_sentences_option(help="Use only the first N pairs of each file."),
    layers: Optional[str] = options.layers_option(help="Also score through the model's MLM head applied to each "
                                                  "layer (a logit lens): all, 0,3,6, ...; default only the output."),
    seeds: int = options.seeds_option(default=1, help="How many untrained twins (seeds from --seed)."),
    seed: int = options.seed_option(),
    untrained: bool = typer.Option(True, "--untrained/--no-untrained", help="Also score the untrained twin."),
    batch_tokens: int = typer.Option(8192, "--batch-tokens", help="Padded tokens per forward pass (all masked "
                                     "copies of a sentence always go together)."),
    device: str = options.device_option(),
    progress: bool = options.progress_option(),
) -> None:
    """Minimal pairs scored by pseudo-log-likelihood (Salazar et al. 2020): accuracy per paradigm (good
    sentence's PLL above the bad one's), model vs untrained twin, chance 0.5."""
    from bertology.results import percent
    from bertology.runtime import seed_list

    options.check_positive(max_sentences, "--max-sentences")
    options.check_positive(batch_tokens, "--batch-tokens")
    chosen_seeds = seed_list(seeds, seed)
    out = out or options.default_out("knowledge/pairs", Path(model).name, _data_name(data, "pairs"))
    from bertology.knowledge.pairs import minimal_pairs

    result = minimal_pairs(model, data, whole_word=whole_word, layers=layers, max_pairs=max_sentences,
                           seeds=chosen_seeds, untrained=untrained, batch_tokens=batch_tokens, device=device,
                           progress=progress)
    from bertology.knowledge.pairs import plot_pairs

    _save(result, out, "pairs", "pairs.png", lambda path: plot_pairs(
        result["paradigms"], path, title=f"{result.meta['model']}: minimal pairs per paradigm"))
    paradigms = result["paradigms"]
    last = paradigms["layer"].max()
    view = Table(title=f"minimal pairs, {result.meta['model']}: accuracy (%), PLL"
                 + (" with whole-word masking" if whole_word else ""))
    for header in ("paradigm", "pairs", "model", "twin"):
        view.add_column(header, justify="right")
    trained = paradigms[(paradigms["weights"] == "trained") & (paradigms["layer"] == last)]
    twins = paradigms[(paradigms["weights"] == "untrained") & (paradigms["layer"] == last)]
    for _, row in trained.iterrows():
        twin = twins[twins["paradigm"] == row["paradigm"]]["accuracy"]
        view.add_row(row["paradigm"], str(int(row["pairs"])), percent(row["accuracy"]),
                     percent(twin.mean()))
    console.print(view)
    summary = result["summary"]
    overall = summary[(summary["weights"] == "trained") & (summary["layer"] == last)].iloc[0]
    console.print(f"overall: {percent(overall['accuracy'])}% of {int(overall['pairs'])} pairs "
                  f"(mean over {int(overall['paradigms'])} paradigms {percent(overall['paradigm_mean'])}%; chance 50%)")
    console.print(f"results in {out} (pairs, paradigms, summary; pairs.png)")
