"""Published tables formatted from raw output that an earlier run stored in this repository.

Each subcommand reads one stored raw file (named in the new record's ``source`` field, never re-measured
here), formats the tables a page publishes and writes them as a stored run (``benchmarks/stored.py``):

    PYTHONPATH=src .venv/bin/python -m benchmarks.formatters.format_stored_tables mlm-modes   # docs/knowledge.md, MLM probe
    PYTHONPATH=src .venv/bin/python -m benchmarks.formatters.format_stored_tables table2      # docs/probing.md, Table 2
    PYTHONPATH=src .venv/bin/python -m benchmarks.formatters.format_stored_tables structural  # docs/structural_probes.md
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.stored import RESULTS, ROOT, save_run, table

FIGURES = ROOT / "docs" / "figures"


def relative(path: Path) -> str:
    return path.resolve().relative_to(ROOT).as_posix()


def _weights(row: dict) -> str:
    # runs stored before the column was renamed call it `encoder`; the records stay as written
    return row["weights"] if "weights" in row else row["encoder"]


def mlm_mode_table(summary: list[dict]) -> dict:
    """Held-out top-1, top-10 (percent) and perplexity per layer, model beside twin; the model's best layer
    per metric in bold."""
    trained = sorted((r for r in summary if _weights(r) == "trained"), key=lambda r: r["layer"])
    twin = {r["layer"]: r for r in summary if _weights(r) == "untrained"}
    best = {"top1": max(trained, key=lambda r: r["top1"])["layer"], "top10": max(trained, key=lambda r: r["top10"])["layer"],
            "perplexity": min(trained, key=lambda r: r["perplexity"])["layer"]}

    def cell(row: dict, metric: str, bold: bool) -> str:
        text = f"{100 * row[metric]:.1f}%" if metric != "perplexity" else f"{row[metric]:.1f}"
        return f"**{text}**" if bold else text

    rows = [[r["layer"], *(cell(r, m, best[m] == r["layer"]) for m in ("top1", "top10", "perplexity")),
             *(cell(twin[r["layer"]], m, False) for m in ("top1", "top10", "perplexity"))] for r in trained]
    return table(["layer", "top-1", "top-10", "perplexity", "twin top-1", "twin top-10", "twin perplexity"], rows)


def mlm_modes(args) -> None:
    source = RESULTS / "mlm_probe_modes_minilm_cpu.json"
    record = json.loads(source.read_text(encoding="utf-8"))
    modes = record["modes"]
    tables = {mode: mlm_mode_table(modes[mode]["summary"]) for mode in modes}
    unigram = modes["target"]["baselines"][0]
    tables["unigram"] = table(["baseline", "top-1", "top-10", "perplexity"],
                              [["unigram (most frequent training tokens)", f"{100 * unigram['top1']:.1f}%",
                                f"{100 * unigram['top10']:.1f}%", f"{unigram['perplexity']:,.0f}"]])
    if not args.no_figures:
        import pandas as pd

        from bertology.knowledge.mlm_probe import plot_mlm_probe

        settings = modes["target"]["meta"]["settings"]
        summary = pd.DataFrame(modes["target"]["summary"]).rename(columns={"encoder": "weights"})
        plot_mlm_probe(summary, pd.DataFrame(modes["target"]["baselines"]),
                       FIGURES / "knowledge-mlm-probe-minilm.png",
                       title=f"minilm: MLM probe per layer (input dropout {settings['dropout']:g}, "
                       f"{settings['corrupt']}; {modes['target']['meta']['train_sentences']} training sentences, 1 seed)")
    raw = {mode: {"seconds": modes[mode]["seconds"], "settings": modes[mode]["meta"]["settings"],
                  "train_sentences": modes[mode]["meta"]["train_sentences"],
                  "eval_sentences": modes[mode]["meta"]["eval_sentences"],
                  "train_tokens": modes[mode]["layers"][0]["train_tokens"], "eval_tokens": modes[mode]["layers"][0]["tokens"],
                  "summary": modes[mode]["summary"], "baselines": modes[mode]["baselines"]} for mode in modes}
    save_run("knowledge_mlm_probe_modes_minilm_cpu", argv=sys.argv, raw=raw, tables=tables, source=relative(source),
             source_command=record["command"], source_commit=record["commit"], source_date=record["date"],
             figure="docs/figures/knowledge-mlm-probe-minilm.png (the target mode's summary)")


TABLE2_ORDER = ("sentence_length", "word_content", "tree_depth", "top_constituents", "bigram_shift", "past_present",
                "subj_number", "obj_number", "odd_man_out", "coordination_inversion")


def table2(args) -> None:
    """docs/probing.md's "MiniLM's Table 2 with the defaults" from the stored table2_frame CSV."""
    import numpy as np
    import pandas as pd

    from bertology.probing.report import _delta_text
    from bertology.probing.summary import best_layer
    from bertology.results import percent
    from bertology.tasks import TABLE2_COLUMNS

    source = RESULTS / "probe_senteval_minilm_default_table2.csv"
    sizes_source = RESULTS / "probe_senteval_minilm_default_datasets.csv"
    run_source = RESULTS / "probe_senteval_minilm_default_run.json"
    run = json.loads(run_source.read_text(encoding="utf-8"))
    frame = pd.read_csv(source, keep_default_na=True, dtype={"delta_sign": str})
    frame["delta_sign"] = frame["delta_sign"].fillna("")
    layered = frame[frame["layer"].notna()].copy()
    layered["layer"] = layered["layer"].astype(int)
    tasks = [task for task in TABLE2_ORDER if task in set(frame["task"])]
    rows = []
    for layer in sorted(layered["layer"].unique()):
        row = [int(layer)]
        for task in tasks:
            cell = layered[(layered["task"] == task) & (layered["layer"] == layer)].iloc[0]
            row.append(f"{percent(cell['mean'])} ({_delta_text(cell['delta'], cell['delta_sign'])})")
        rows.append(row)
    half_widths = {task: float(np.median((layered[layered["task"] == task]["ci_high"]
                                          - layered[layered["task"] == task]["ci_low"]) / 2)) for task in tasks}
    rows.append(["95% CI (median half-width)", *(f"±{percent(half_widths[task])}" for task in tasks)])
    rows.append(["majority", *(percent(layered[layered["task"] == task]["majority"].iloc[0]) for task in tasks)])
    rows.append(["best layer (dev)", *(best_layer(frame, task).label() for task in tasks)])
    sizes = pd.read_csv(sizes_source).set_index("task")
    raw = {"median_ci_half_width": half_widths,
           "sizes": {task: {k: int(sizes.loc[task, k]) for k in ("n_train", "n_dev", "n_test")} for task in tasks},
           "twin_mean_over_layers": {task: float(layered[layered["task"] == task]["untrained"].mean()) for task in tasks}}
    save_run("probe_senteval_minilm_default_table2", argv=sys.argv, raw=raw,
             tables={"table2": table(["layer", *(TABLE2_COLUMNS[task] for task in tasks)], rows),
                     "sizes": table(["task", "train", "dev", "test"],
                                    [[TABLE2_COLUMNS[task], *(f"{raw['sizes'][task][k]:,}" for k in ("n_train", "n_dev", "n_test"))]
                                     for task in tasks])},
             source=f"{relative(source)} and {relative(sizes_source)} (the table2_frame and datasets tables as "
             f"written by the run {relative(run_source)}: {run['command']}, commit {run['commit']})")


def points(value: float) -> str:
    return f"{100 * value:+.1f}"


def sign_cell(delta: list) -> str:
    """``[delta, low, high, sign]`` -> ``-3.7 [-6.6, -0.8] -``; an established sign in bold."""
    value, low, high, sign = delta
    return f"{points(value)} [{points(low)}, {points(high)}] " + (f"**{sign}**" if sign in "+-" and sign else sign)


def structural(args) -> None:
    """docs/structural_probes.md's MiniLM table from the stored per-seed rows of the H100 run."""
    import pandas as pd

    source = RESULTS / "structural_minilm_ewt_h100.csv"
    rows = pd.read_csv(source)
    metrics = [("structural-distance", "uuas", True), ("structural-distance", "dspr", False),
               ("structural-depth", "root_acc", True), ("structural-depth", "nspr", False)]

    def stats(baseline: str, split: str, task: str, metric: str):
        part = rows[(rows.baseline == baseline) & (rows.split == split) & (rows.task == task) & (rows.metric == metric)]
        return part.groupby("layer")["value"].agg(["mean", "std"])

    def cell(mean: float, std: float, accuracy: bool) -> str:
        return f"{100 * mean:.1f} ± {100 * std:.1f}" if accuracy else f"{mean:.3f}"

    best_dev = {metric: int(stats("none", "dev", task, metric)["mean"].idxmax()) for task, metric, _ in metrics}
    twin_best = {metric: int(stats("untrained", "dev", task, metric)["mean"].idxmax()) for task, metric, _ in metrics}
    layers = sorted(rows.layer.unique())
    labels = {0: "0 (embeddings)", layers[-1]: f"{layers[-1]} (sentence-embedding output)"}
    body = []
    for layer in layers:
        cells = [cell(*stats("none", "test", task, metric).loc[layer], accuracy) for task, metric, accuracy in metrics]
        label = labels.get(layer, str(layer))
        if set(best_dev.values()) == {layer}:
            label, cells = f"**{layer}** (best on dev, all four metrics)", [f"**{c}**" for c in cells]
        body.append([label, *cells])
    body.append(["untrained twin, best dev layer",
                 *(cell(*stats("untrained", "test", task, metric).loc[twin_best[metric]], accuracy)
                   for task, metric, accuracy in metrics)])
    chain = [(stats("linear-chain", "test", task, metric)["mean"].iloc[0], accuracy) for task, metric, accuracy in metrics]
    body.append(["linear chain", *(f"{100 * m:.1f}" if accuracy else f"{m:.3f}" for m, accuracy in chain)])
    # quoted from Hewitt and Manning (2019), Table 1 and 2, for comparison; not measured here
    body.append(["*BERT-large layer 16, PTB (paper)*", "*82.5*", "*0.86*", "*90.1*", "*0.89*"])
    test = rows[rows.split == "test"]
    spread = test[test.metric.isin(["dspr", "nspr"]) & (test.baseline == "none")].groupby(["metric", "layer"])["value"].std()
    twin = test[test.baseline == "untrained"].groupby(["metric", "layer"])["value"].mean().groupby("metric")
    raw = {"best_dev_layer": best_dev, "twin_best_dev_layer": twin_best,
           "max_spearman_seed_std": float(spread.max()),
           "twin_range_over_layers": {m: float(v.max() - v.min()) for m, v in twin},
           "seeds": sorted(int(s) for s in rows.seed.unique())}
    save_run("structural_minilm_ewt_h100", argv=sys.argv, raw=raw,
             tables={"minilm": table(["layer", "UUAS", "DSpr.", "root acc.", "NSpr."], body)},
             source=f"{relative(source)} (per-seed rows of the H100 run, commit 69e9fcd; the last row is the paper's)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=sorted(COMMANDS))
    parser.add_argument("--no-figures", action="store_true")
    args = parser.parse_args()
    COMMANDS[args.what](args)


COMMANDS = {"mlm-modes": mlm_modes, "table2": table2, "structural": structural}

if __name__ == "__main__":
    main()
