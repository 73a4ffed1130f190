"""The `bertology` command: a thin typer layer over the Python API."""

from __future__ import annotations

import os
import signal
import sys

INTERRUPTED = "interrupted; rerun the same command to resume"


def _interrupted_while_starting(signum, frame) -> None:
    sys.stderr.write(INTERRUPTED + "\n")
    sys.exit(130)


# Ctrl-C while this module (typer, rich, the commands) is still being imported: the same one line and exit
# code as later (main() handles it from then on). Only where Ctrl-C would raise KeyboardInterrupt, and put
# back at the end of the module.
_sigint = signal.getsignal(signal.SIGINT)
if _sigint is signal.default_int_handler:
    try:
        signal.signal(signal.SIGINT, _interrupted_while_starting)
    except ValueError:  # imported outside the main thread: nothing to do
        _sigint = None

import time  # noqa: E402
from enum import Enum  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Optional  # noqa: E402

import typer  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from bertology import __version__  # noqa: E402
from bertology.cli import options  # noqa: E402
from bertology.errors import BertologyError, SettingError  # noqa: E402
from bertology.cli.options import (  # noqa: E402
    check_positive, data_option, default_out, device_option, layers_option, max_sentences_option, model_option,
    out_option, parse_layers, progress_option, resolve_device,
)

app = options.CommandApp(
    name="bertology",
    help="The BERTology literature, runnable: extract, probe, analyse attention, intervene, report.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
console = Console(stderr=True)
out_console = Console()

#: ``--debug`` (or ``BERTOLOGY_DEBUG=1``): an unexpected error shows its traceback instead of one line.
DEBUG_ENV = "BERTOLOGY_DEBUG"
_debug = {"on": False}


@app.callback()
def _options(
    debug: bool = typer.Option(False, "--debug", help=f"Show the traceback of an unexpected error (also "
                               f"{DEBUG_ENV}=1)."),
) -> None:
    _debug["on"] = debug


class Pool(str, Enum):
    word_mean = "word-mean"
    word_first = "word-first"
    word_last = "word-last"
    cls = "cls"
    mean = "mean"
    tokens = "tokens"


class StoreDtype(str, Enum):
    float16 = "float16"
    bfloat16 = "bfloat16"
    float32 = "float32"


class LongPolicy(str, Enum):
    window = "window"
    error = "error"


@app.command()
def extract(
    model: str = model_option(),
    data: Path = data_option(...),
    out: Optional[Path] = out_option("extract"),
    layers: Optional[str] = layers_option(),
    pool: Pool = typer.Option(Pool.word_mean, help="Vectors per word, per sentence (cls/mean) or per subword."),
    attentions: bool = typer.Option(False, "--attentions", help="Also store word-level attention maps (float32)."),
    dtype: StoreDtype = typer.Option(StoreDtype.float16, help="Storage dtype of hidden states."),
    bf16: bool = typer.Option(False, "--bf16", help="Compute under bfloat16 autocast (not used for attentions)."),
    long_policy: LongPolicy = typer.Option(LongPolicy.window, help="Sentences over the max length: sliding window or error."),
    untrained_seed: Optional[int] = typer.Option(None, help="Use the untrained twin re-initialised from this seed."),
    batch_tokens: Optional[int] = typer.Option(
        None, "--token-budget", "--batch-tokens", show_default=False,
        help="Padded tokens per batch (at least 1; default: the device's, 4,096 on a CPU, from free memory on a "
             "GPU; halved when the GPU runs out of memory)."),
    max_sentences: Optional[int] = max_sentences_option("Use only the first N sentences of the corpus."),
    max_attention_words: Optional[int] = typer.Option(
        None, "--max-attention-words", show_default=False,
        help="With --attentions, refuse sentences of more words, before writing anything (default 512; maps "
             "take 4 x heads x layers x (words+2)^2 bytes)."),
    overwrite: bool = typer.Option(False, help="Replace a store built from another model or input."),
    device: str = device_option(),
    compile_model: bool = typer.Option(False, "--compile", help="Run the model through torch.compile: 10-30 s "
                                       "up front, at most ~1.15x faster after; for large corpora."),
    engine: str = options.engine_option(),
    address: Optional[str] = options.address_option(),
    workers: Optional[int] = options.workers_option(),
    cpus_per_worker: float = options.cpus_per_worker_option(),
    gpus_per_worker: float = options.gpus_per_worker_option(),
    progress: bool = progress_option(),
) -> None:
    """Extract every layer's word-aligned vectors (and attentions) into a chunked, resumable store.

    With --engine ray the shards are computed by a pool of Ray actors (one model replica each) and written
    straight into --out, which must be a folder every node of the cluster sees (docs/scale.md)."""
    check_positive(batch_tokens, "--token-budget")
    options.check_scale(engine, workers, cpus_per_worker, gpus_per_worker)
    if engine == "ray":
        from bertology.scale import require_ray

        require_ray()  # one line saying how to install the extra, before the model loads
    check_positive(max_sentences, "--max-sentences")
    check_positive(max_attention_words, "--max-attention-words")
    options.check_seed(untrained_seed, "--untrained-seed")
    parse_layers(layers)  # the spelling, before the model loads; the range once its depth is known
    from bertology.extraction import MAX_ATTENTION_WORDS, ExtractionSpec

    spec = ExtractionSpec(layers=layers, pool=pool.value, attentions=attentions, dtype=dtype.value,
                          autocast="bfloat16" if bf16 else None, long_policy=long_policy.value,
                          batch_tokens=batch_tokens, max_attention_words=max_attention_words or MAX_ATTENTION_WORDS)
    from bertology.data import read_corpus

    sentences = read_corpus(data)  # a missing or malformed corpus is one line before torch loads
    run_device = resolve_device(device)
    from bertology.extraction import check_output
    from bertology.extraction import extract as run_extract
    from bertology.models import load_encoder

    out = out if out is not None else default_out("extract", Path(model).name, _corpus_name(data))
    check_output(out)
    for note in sentences.notes():
        console.print(f"note: {note}", highlight=False)
    if max_sentences is not None:
        sentences = sentences[:max_sentences]
    encoder = load_encoder(model, untrained_seed=untrained_seed, attentions=attentions, device=str(run_device))
    parse_layers(layers, encoder.num_layers)  # the range, named as the option
    started = time.perf_counter()
    run = dict(input_path=str(data), overwrite=overwrite, progress=progress)
    if engine == "ray":
        from bertology.scale import extract_ray
        from bertology.scale.spec import ClusterSpec

        source = str(Path(model).resolve()) if Path(model).exists() else model  # a folder: the same path on every node
        cluster = ClusterSpec(address=address, workers=workers, cpus_per_worker=cpus_per_worker,
                              gpus_per_worker=gpus_per_worker)
        store = extract_ray(encoder, sentences, out, spec, cluster=cluster,
                            load={"name_or_path": source, "untrained_seed": untrained_seed, "attentions": attentions},
                            **run)
    else:
        store = run_extract(encoder, sentences, out, spec, compile_model=compile_model, **run)
    _print_store_summary(store, time.perf_counter() - started)


def _corpus_name(data: Path) -> str:
    name = data.name
    for suffix in (".gz", ".conllu", ".txt", ".tsv"):
        name = name.removesuffix(suffix)
    return name


@app.command()
def info(
    store: Path = typer.Argument(..., help="Store folder (what `bertology extract --out` wrote)."),
    verify: bool = typer.Option(True, help="Check every shard's size and SHA-256."),
) -> None:
    """Show what a store holds and verify it."""
    options.check_exists(store, "STORE")  # before torch loads
    from bertology.store import Store

    opened = Store.open(store, allow_incomplete=True)
    _print_store_summary(opened, None)
    if verify:
        problems = opened.verify()
        if problems:
            for problem in problems:
                console.print(f"[red]✗[/] {problem}")
            raise typer.Exit(1)
        out_console.print(f"[green]✓[/] {len(opened.shards)} shards verified")


def _print_store_summary(store, seconds: Optional[float]) -> None:
    index = store.index
    table = Table(title=f"store {store.path}", show_header=False)
    model = index["model"]
    done = sum(s.complete for s in store.shards)
    tokenizer = f", tokenizer {model['tokenizer_fingerprint']}" if model.get("tokenizer_fingerprint") else ""
    rows = [
        ("model", f"{model['name']} ({model['model_type']}, fingerprint {model['fingerprint']}{tokenizer})"),
        ("layers", ", ".join(map(str, store.layers)) + "  (0 = embeddings)"),
        ("pooling", store.pool),
        ("attentions", f"word-level, float32, layers {', '.join(map(str, store.attention_layers))}"
         if store.has_attentions else "no"),
        ("sentences", f"{store.n_sentences:,}"),
        ("words", f"{int(store.word_counts.sum()):,}"),
        ("rows per layer", f"{int(store.offsets[-1]):,} x {store.dim} ({index['dtype']})"),
        ("shards", f"{done}/{len(store.shards)} complete"),
        ("size on disk", f"{store.size_on_disk() / 2**20:,.1f} MiB"),
        ("input", f"{index['input'].get('path')} (hash {index['input']['hash']})"),
        ("bertology", f"{index['bertology_version']} (format {index['format_version']})"),
    ]
    stats = index.get("stats") or {}
    if stats.get("tokens_per_second"):
        rows.append(("throughput", f"{stats['tokens_per_second']:,.0f} tokens/s "
                     f"({stats['tokens']:,} tokens, {stats['padded_tokens'] - stats['tokens']:,} padding, "
                     f"{stats['seconds']:.1f} s)"))
    if stats.get("windowed_sentences"):
        rows.append(("long sentences", f"{stats['windowed_sentences']} covered by sliding windows"))
    for key, value in rows:
        table.add_row(key, value)
    out_console.print(table)


@app.command()
def report(
    model: str = options.model_option(),
    out: Path = typer.Option(Path("reports"), "--out", "-o", help="Reports go to OUT/<model>/index.html."),
    fresh: bool = typer.Option(False, "--fresh", help="Recompute everything instead of reusing finished parts."),
    seeds: int = options.seeds_option(help="How many probe seeds (from --seed); mean and spread are reported."),
    seed: int = options.seed_option(),
    max_sentences: Optional[int] = options.max_sentences_option(),
    sections: Optional[str] = typer.Option(None, "--sections", "--section",
                                           help="Comma-separated sections to run (default: all): "
                                                "tokenization, probing, attention, interventions, knowledge, "
                                                "languages; compression only when named here."),
    device: str = options.device_option(),
    progress: bool = options.progress_option(),
    compare: Optional[tuple[str, str]] = typer.Option(
        None, "--compare", help="Two models side by side: --compare A B (B may be 'untrained' for A's twin)."),
    languages: Optional[list[Path]] = typer.Option(
        None, "--languages", help="CoNLL-U treebanks of several languages (files or folders, repeatable) for the "
                                  "Languages section (docs/languages.md); without them it only says how to add it."),
) -> None:
    """Run the battery on a model and write one self-contained HTML report.

    Exit status 0 when every section ran or was skipped by design (its data not at hand), 1 when one failed;
    a section that did not run is a box in the report saying why and which command runs it."""
    from rich.markup import escape

    from bertology.report.names import check_sections

    started = time.perf_counter()
    options.check_positive(max_sentences, "--max-sentences")
    seed_values = options.seed_list(seeds, seed)
    chosen = check_sections(sections.split(",")) if sections is not None else None
    options.resolve_device(device)
    for path in languages or ():
        options.check_exists(path, "--languages")
    from bertology.report import build_comparison, run_report

    if compare:
        path = build_comparison(compare[0], compare[1], out=out, fresh=fresh, seeds=seed_values,
                                max_sentences=max_sentences, sections=chosen, device=device, progress=progress)
        out_console.print(f"report written to {path} ({time.perf_counter() - started:.0f} s)")
        return
    outcome = run_report(model, out=out, fresh=fresh, seeds=seed_values, max_sentences=max_sentences,
                         sections=chosen, device=device, progress=progress, languages=languages)
    out_console.print(f"report written to {outcome.path} ({time.perf_counter() - started:.0f} s)", soft_wrap=True)
    for section_id, why in outcome.skipped.items():
        console.print(f"skipped section {section_id}: {escape(why)}", highlight=False, soft_wrap=True)
    for section_id, why in outcome.failed.items():
        console.print(f"[bold red]failed section {section_id}:[/] {escape(why)}", highlight=False, soft_wrap=True)
    if outcome.failed:
        raise typer.Exit(1)


@app.command()
def demo(
    out: Path = typer.Option(Path("reports"), "--out", "-o", help="Where the report goes."),
) -> None:
    """The main job on the embedded default: `bertology report --model minilm`."""
    report(model="minilm", out=out, fresh=False, seeds=3, seed=0, max_sentences=None, sections=None, device="auto",
           progress=True, compare=None, languages=None)


def _register_subcommands() -> None:
    from bertology.cli.tasks import app as tasks_app

    app.add_typer(tasks_app, name="tasks", help="Build and list SentEval probing tasks from treebanks.")
    from bertology.cli.probing import probe

    app.command("probe", help="Probe every layer (SentEval tasks, UPOS/XPOS/deprel/NER, structural) with "
                "majority, untrained-twin and control baselines.")(probe)
    from bertology.cli.attention import app as attention_app

    app.add_typer(attention_app, name="attention",
                  help="Clark head statistics and heads as parsers, Kovaleva pattern types, viewer.")
    from bertology.cli.finetune import finetune_command, table_command

    app.command("finetune", help="Fine-tune on a GLUE task (CoLA, SST-2, MRPC, STS-B, RTE) with the Convexity "
                "report's variants.")(finetune_command)
    app.command("finetune-table", help="Rebuild the Convexity Table 1 (variant x task) from a runs folder.")(
        table_command)
    from bertology.cli.compare import compare_command

    app.command("compare", help="What fine-tuning changed: per-layer CKA, attention cosine, weight change.")(
        compare_command)
    from bertology.cli.intervention import app as ablate_app

    app.add_typer(ablate_app, name="ablate", help="Head and layer ablation, head importance, pruning.")
    from bertology.cli.geometry import app as geometry_app

    app.add_typer(geometry_app, name="geometry", help="Contextuality and anisotropy per layer (Ethayarajh 2019).")
    from bertology.cli.knowledge import app as knowledge_app

    app.add_typer(knowledge_app, name="knowledge", help="Static similarity, the Convexity MLM probe, LAMA, "
                  "minimal pairs.")
    from bertology.cli.readouts import app as readouts_app, deprecated_app as old_readouts_app

    app.add_typer(readouts_app, name="readouts", help="Frozen-feature readouts (BERT Vision): SQuAD 2.0 and GLUE.")
    app.add_typer(old_readouts_app, name="heads", hidden=True)  # the old spelling, for one release
    from bertology.cli.languages import languages_command

    app.command("languages", help="Several languages' treebanks: language identity, centroids, parallel sentence "
                "retrieval and zero-shot transfer of English probes, per layer, model vs untrained twin.")(
        languages_command)
    from bertology.cli.claims import claims_command

    app.command("claims", help="The Primer as a checklist: does each BERTology claim hold on this model? "
                "Verdicts with numbers, baselines and intervals; --compare A B ... side by side.")(claims_command)
    from bertology.cli.compression import compress_command

    app.command("compress", help="Quantize, prune heads or weights, drop layers; measure size, speed-up and what "
                "the model still knows (the Primer's Table 1).")(compress_command)


_register_subcommands()


@app.command()
def version() -> None:
    """Print the bertology version."""
    out_console.print(__version__)


def _one_line_warning(previous):
    """A ``warnings.showwarning`` that prints a BertologyWarning as one line and leaves others to ``previous``."""
    from bertology.errors import BertologyWarning

    def show(message, category, filename, lineno, file=None, line=None):
        if not issubclass(category, BertologyWarning):
            return previous(message, category, filename, lineno, file, line)
        from rich.markup import escape

        console.print(f"[yellow]warning:[/] {escape(str(message))}", highlight=False, soft_wrap=True)

    return show


def _interrupted(error: BaseException) -> bool:
    """Whether Ctrl-C ended the run: a KeyboardInterrupt, or the exit typer makes of one (exit 130 raised
    from it)."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def _debugging() -> bool:
    return _debug["on"] or os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")


def _escaped(text: str) -> str:
    from rich.markup import escape

    # escaped: a message may hold brackets ("pip install 'bertology[ray]'") that rich would read as markup
    return escape(text)


def main() -> None:
    """Entry point: user errors become one clear line and exit code 1, not a traceback; a
    :class:`~bertology.errors.BertologyWarning` becomes one ``warning:`` line; any other error is one line
    naming its type (the traceback with ``--debug`` or ``BERTOLOGY_DEBUG=1``), exit code 1; Ctrl-C is one
    line and exit code 130."""
    import warnings

    _debug["on"] = False
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _one_line_warning(warnings.showwarning)
            app()
    except BertologyError as error:
        if _debugging():
            raise
        if isinstance(error, SettingError):  # raised outside a command's speaking_options: its default option name
            error = error.as_option()
        console.print(f"[bold red]error:[/] {_escaped(str(error))}", highlight=False, soft_wrap=True)
        sys.exit(1)
    except (KeyboardInterrupt, SystemExit) as error:
        if not _interrupted(error):
            raise
        if _debugging():
            import traceback

            traceback.print_exception(error)
        console.print(INTERRUPTED, highlight=False, soft_wrap=True)
        sys.exit(130)
    except Exception as error:
        if _debugging():
            raise
        message = _escaped(" ".join(str(error).split()))  # one line, whatever the message
        console.print(f"[bold red]error:[/] {type(error).__name__}{': ' + message if message else ''} "
                      "(rerun with --debug for the traceback)", highlight=False, soft_wrap=True)
        sys.exit(1)


if _sigint is signal.default_int_handler:  # the module is imported: main() handles Ctrl-C from here on
    signal.signal(signal.SIGINT, _sigint)

if __name__ == "__main__":
    main()
