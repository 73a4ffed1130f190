"""docs/compare.md's results: MiniLM against its own fine-tuned versions, a CPU-sized run.

For each GLUE task: ``finetune`` MiniLM (baseline variant, one seed, ``--max-train`` training examples,
``--epochs`` epochs, ``--lr``) on the CPU, its dev metric, then ``compare_models(minilm, checkpoint)`` on
300 sentences of UD EWT dev. Tables: the dev metrics, the relative weight change per layer, linear CKA
(all tokens / [CLS]) and the attention-map cosine (mean and min over heads), stored as
``benchmarks/results/compare_finetune_minilm_cpu.json``:

    OMP_NUM_THREADS=1 BERTOLOGY_DATA=/work/shared/data PYTHONPATH=src .venv/bin/python \\
        -m benchmarks.experiments.compare.compare_finetune --tasks sst2,cola --max-train 1000 --epochs 3 --lr 1e-4
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time

from benchmarks.stored import save_run, table

TASK_NAMES = {"cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B", "rte": "RTE"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="cola,sst2")
    parser.add_argument("--max-train", type=int, default=2000)
    parser.add_argument("--epochs", type=float, default=2.0)
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--sentences", type=int, default=300)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--name", default="compare_finetune_minilm_cpu")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    from bertology.compare.compare import compare_models
    from bertology.data import default_corpus, read_corpus
    from bertology.finetune.examples import read_examples
    from bertology.finetune.metrics import glue_metric
    from bertology.finetune.train import FinetuneConfig, finetune

    sentences = read_corpus(default_corpus("ewt-dev"))
    raw, metrics, weights, cka, attention = {}, [], [], [], []
    with tempfile.TemporaryDirectory() as out:
        for task in args.tasks.split(","):
            started = time.perf_counter()
            config = FinetuneConfig(seeds=(0,), epochs=args.epochs, max_train=args.max_train, lr=args.lr, device="cpu",
                                    progress=False)
            tuned = finetune("minilm", task, config, out_dir=out)
            train_seconds = time.perf_counter() - started
            results = tuned["results"]
            checkpoint = results["checkpoint"].iloc[0]
            started = time.perf_counter()
            compared = compare_models("minilm", checkpoint, sentences, max_sentences=args.sentences, device="cpu")
            compare_seconds = time.perf_counter() - started
            name = TASK_NAMES.get(task, task)
            history = tuned["history"]
            last_loss = float(history["train_loss"].dropna().iloc[-1]) if len(history) else float("nan")
            # the baseline: the training subset's most frequent label predicted for every dev example
            train_labels = [e.label for e in read_examples(task, "train")]
            dev_labels = [e.label for e in read_examples(task, "dev")]
            majority_label = max(set(train_labels), key=train_labels.count)
            majority = glue_metric(task, [majority_label] * len(dev_labels), dev_labels)
            metrics.append([name, "; ".join(f"{row.metric} {row.value:.3f}" for row in results.itertuples()),
                            "; ".join(f"{metric} {value:.3f}" for metric, value in majority.items()),
                            f"{last_loss:.3f}"])
            by_layer = compared["weights_by_layer"]
            layered = by_layer[by_layer["layer"].notna()].sort_values("layer")
            weights.append([name, *(f"{v:.4f}" for v in layered["rel_change"])])
            frame = compared["cka"]
            tokens = frame[frame["representation"] == "tokens"].set_index("layer")["cka"]
            cls = frame[frame["representation"] == "cls"].set_index("layer")["cka"]
            cka.append([name, *(f"{tokens[l]:.3f} / {cls[l]:.3f}" for l in sorted(tokens.index) if l >= 1)])
            heads = compared["attention"].groupby("layer")["cosine"].agg(["mean", "min"])
            attention.append([name, *(f"{row.mean:.3f} ({row.min:.3f})" for row in heads.itertuples())])
            raw[task] = {"majority": majority, "train_seconds": train_seconds, "compare_seconds": compare_seconds,
                         "results": json.loads(results.drop(columns=["checkpoint"]).to_json(orient="records")),
                         "history": json.loads(history.to_json(orient="records")),
                         "meta": tuned.meta, "compare_meta": compared.meta,
                         "weights_by_layer": json.loads(by_layer.to_json(orient="records")),
                         "cka": json.loads(frame.to_json(orient="records")),
                         "attention": json.loads(compared["attention"].to_json(orient="records"))}
            print(name, metrics[-1], f"train {train_seconds:.0f} s, compare {compare_seconds:.0f} s", flush=True)
    layers = list(range(len(weights[0]) - 1))
    save_run(args.name, argv=sys.argv, raw=raw, tables={
        "dev": table(["task", "dev metric", "majority label", "last training loss"], metrics),
        "weights": table(["task", *layers], weights),
        "cka": table(["task", *(f"layer {l}" if l == 1 else str(l) for l in layers[1:])], cka),
        "attention": table(["task", *(f"layer {l}" if l == 1 else str(l) for l in layers[1:])], attention)})


if __name__ == "__main__":
    main()
