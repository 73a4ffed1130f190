"""docs/knowledge.md's contextuality and static-similarity tables and figures, as one stored run.

Runs ``bertology geometry contextuality -m minilm`` and ``bertology knowledge static -m minilm`` (packaged
UD English EWT dev, 3 seeds, model + untrained twins, the commands' defaults), formats the two published
tables, redraws docs/figures/knowledge-contextuality-minilm.png and knowledge-static-minilm.png and stores
everything (summaries, meta, the numbers the page's prose quotes) in
``benchmarks/results/knowledge_tables_minilm_cpu.json``:

    OMP_NUM_THREADS=1 BERTOLOGY_CACHE=/tmp/cache PYTHONPATH=src .venv/bin/python -m benchmarks.experiments.knowledge.knowledge_tables
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from benchmarks.stored import ROOT, save_run, table

FIGURES = ROOT / "docs" / "figures"


def cosine(value: float) -> str:
    return "–" if value is None or value != value else f"{value:.3f}"


def contextuality_table(summary, kawine) -> dict:
    """MiniLM layer l beside bert-base-cased layer 2l (relative depth): raw, adjusted and twin-adjusted values."""

    def pick(encoder: str, measure: str, layer: int, column: str) -> float:
        part = summary[(summary["weights"] == encoder) & (summary["measure"] == measure) & (summary["layer"] == layer)]
        return float(part[column].iloc[0])

    header = ["MiniLM layer", "BERT layer", "self-sim raw", "adj.", "twin adj.", "BERT raw", "BERT adj.",
              "intra-sent. raw", "adj.", "twin adj.", "BERT raw", "BERT adj.", "MEV adj.", "BERT MEV adj.",
              "anisotropy", "twin", "BERT"]
    rows = []
    for layer in sorted(int(x) for x in summary["layer"].unique()):
        bert = 2 * layer
        bert_anisotropy = kawine["anisotropy"][bert]
        bert_mev = kawine["max_explainable_variance"][bert]
        row = [layer, bert]
        for measure in ("self_similarity", "intra_sentence_similarity"):
            row += [cosine(pick("trained", measure, layer, "value")), cosine(pick("trained", measure, layer, "adjusted")),
                    cosine(pick("untrained", measure, layer, "adjusted")), cosine(kawine[measure][bert]),
                    cosine(kawine[measure][bert] - bert_anisotropy)]
        row += [cosine(pick("trained", "max_explainable_variance", layer, "adjusted")),
                cosine(None if bert_mev is None else bert_mev - kawine["random_words_explained_variance"][bert]),
                cosine(pick("trained", "anisotropy", layer, "value")), cosine(pick("untrained", "anisotropy", layer, "value")),
                cosine(bert_anisotropy)]
        rows.append(row)
    return table(header, rows)


def static_table(summary) -> dict:
    def pick(encoder: str, reference: str, layer: int, column: str = "adjusted") -> str:
        part = summary[(summary["weights"] == encoder) & (summary["reference"] == reference) & (summary["layer"] == layer)]
        return f"{float(part[column].iloc[0]):.3f}"

    header = ["layer", "(a) input embedding, model", "twin", "(b) type average, model", "twin", "(b) raw, model"]
    rows = [[layer, pick("trained", "input_embedding", layer), pick("untrained", "input_embedding", layer),
             pick("trained", "type_average", layer), pick("untrained", "type_average", layer),
             pick("trained", "type_average", layer, "value")]
            for layer in sorted(int(x) for x in summary["layer"].unique())]
    return table(header, rows)


def records(frame) -> list:
    return json.loads(frame.to_json(orient="records"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--name", default="knowledge_tables_minilm_cpu")
    parser.add_argument("--no-figures", action="store_true")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    from bertology.geometry.contextuality import KAWINE_BERT_BASE_CASED, contextuality, plot_contextuality
    from bertology.knowledge.static import plot_static, static_similarity

    seeds = tuple(range(args.seeds))
    started = time.perf_counter()
    context = contextuality(args.model, None, seeds=seeds, device="cpu")
    context_seconds = time.perf_counter() - started
    started = time.perf_counter()
    static = static_similarity(args.model, None, seeds=seeds, device="cpu")
    static_seconds = time.perf_counter() - started
    csum, ssum = context["summary"], static["summary"]
    if not args.no_figures:
        name = context.meta["model"]["name"]
        plot_contextuality(csum, FIGURES / f"knowledge-contextuality-{name}.png", title=f"{name}: contextuality per layer")
        plot_static(ssum, FIGURES / f"knowledge-static-{name}.png", title=f"{name}: similarity to static embeddings")

    adjusted = csum[csum["measure"] != "anisotropy"]
    anisotropy = csum[csum["measure"] == "anisotropy"]
    spread = {
        # the page quotes the largest std over seeds of the adjusted values (model and twin separately)
        "contextuality_max_adjusted_std": {kind: float(adjusted[adjusted["weights"] == kind]["adjusted_std"].max())
                                           for kind in ("trained", "untrained")},
        "contextuality_max_anisotropy_std": {kind: float(anisotropy[anisotropy["weights"] == kind]["value_std"].max())
                                             for kind in ("trained", "untrained")},
        "static_max_adjusted_std": {kind: float(ssum[ssum["weights"] == kind]["adjusted_std"].max())
                                    for kind in ("trained", "untrained")},
    }
    static_baseline = ssum[(ssum["weights"] == "trained") & (ssum["reference"] == "type_average")]
    raw = {
        "contextuality": {"seconds": round(context_seconds, 1), "meta": context.meta, "summary": records(csum)},
        "static": {"seconds": round(static_seconds, 1), "meta": static.meta, "summary": records(ssum)},
        "spread": spread,
        "static_type_average_baseline": {int(r.layer): float(r.baseline) for r in static_baseline.itertuples()},
    }
    print(json.dumps(spread, indent=1))
    print("static type-average baseline", raw["static_type_average_baseline"])
    print(f"contextuality {context_seconds:.0f} s, static {static_seconds:.0f} s")
    save_run(args.name, argv=sys.argv, raw=raw,
             tables={"contextuality": contextuality_table(csum, KAWINE_BERT_BASE_CASED),
                     "static": static_table(ssum)})


if __name__ == "__main__":
    main()
