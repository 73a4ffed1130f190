"""Sweeps on a Ray cluster: one Ray task per fine-tuning run (task x variant x seed), each with its own
CPU/GPU request. A run whose finished checkpoint is already in the output folder is not scheduled again;
every run writes its checkpoint exactly as a local run does, so the table built from the folder
(:func:`bertology.finetune.collect_results`, ``bertology finetune-table``) is the local one.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Sequence

import pandas as pd
import torch

from bertology.finetune.evaluation import TaskEvaluator, checkpoint_task
from bertology.finetune.model import load_finetuned
from bertology.finetune.train import FinetuneConfig, finetune, finished_run
from bertology.readouts.glue import readout_rows
from bertology.intervention.importance import single_head_ablation, summarize_single_head
from bertology.models.encoders import Encoder, load_encoder
from bertology.results import Result
from bertology.scale.cluster import check_resources, connect, default_workers, run_tasks
from bertology.scale.extraction import pack_encoder, unpack_encoder


def _one_run(encoder_bytes: bytes | None, load: dict | None, task: str, config: dict, out: str, threads: int,
             device: str) -> Result:
    torch.set_num_threads(max(1, threads))
    if load is not None:
        encoder = load_encoder(**load)
    else:
        encoder = unpack_encoder(encoder_bytes)
    settings = {**config, "device": device, "progress": False}
    return finetune(encoder, task, FinetuneConfig(**settings), out)


def finetune_sweep_ray(
    encoder: Encoder,
    tasks: Sequence[str],
    variants: Sequence[str],
    config: FinetuneConfig,
    out: str | Path,
    *,
    load: dict | None = None,
    address: str | None = None,
    workers: int | None = None,
    cpus_per_worker: float = 1,
    gpus_per_worker: float = 0,
    on_result=None,
) -> list[Result]:
    """Fine-tune every (task, variant, seed of ``config.seeds``) as its own Ray task; return the runs'
    :func:`~bertology.finetune.finetune` results (finished runs found under ``out`` are skipped: not in the
    list). ``load``: ``load_encoder`` arguments for the workers to load the model themselves (the CLI);
    otherwise ``encoder`` is shipped. At most ``workers`` runs at once (default: what the cluster holds),
    each asking for ``cpus_per_worker`` CPUs (its torch threads) and ``gpus_per_worker`` GPUs (then it
    trains on cuda). ``on_result(result)`` is called as each run finishes."""
    out = Path(out)
    runs = []
    for task in tasks:
        for variant in variants:
            run_config = dataclasses.replace(config, variant=variant)
            for seed in run_config.seeds:
                if not finished_run(out, encoder, task, seed, run_config):
                    runs.append((task, variant, seed))
    if not runs:
        return []
    ray = connect(address, progress=False)
    check_resources(cpus_per_worker, gpus_per_worker)  # one line, not an endless wait
    workers = min(workers or default_workers(cpus_per_worker, gpus_per_worker), len(runs))
    remote = ray.remote(num_cpus=cpus_per_worker, num_gpus=gpus_per_worker or 0, max_retries=1)(_one_run)
    shipped = None if load is not None else ray.put(pack_encoder(encoder))
    device = "cuda" if gpus_per_worker else "cpu"
    base = {field.name: getattr(config, field.name) for field in dataclasses.fields(config)}
    started = time.perf_counter()

    def submit(run):
        task, variant, seed = run
        settings = {**base, "variant": variant, "seeds": (seed,)}
        return remote.remote(shipped, load, task, settings, str(out), int(max(1, cpus_per_worker)), device)

    def finished(_, result) -> None:
        result.meta["ray_seconds_since_start"] = round(time.perf_counter() - started, 3)
        if on_result is not None:
            on_result(result)

    results = run_tasks(submit, list(runs), workers, finished)
    return results


def _ablate_layer(checkpoint: str, seed: int, layer: int, task: str | None, max_examples: int | None,
                  data_dir: str | None, threads: int, device: str, allow_task_mismatch: bool = False):
    torch.set_num_threads(max(1, threads))
    model, tokenizer, meta = load_finetuned(checkpoint, device=device)
    evaluator = TaskEvaluator(checkpoint_task(checkpoint, meta, task, allow_task_mismatch), tokenizer,
                              max_examples=max_examples, data_dir=data_dir)
    return single_head_ablation(model, evaluator, seeds=[seed], heads=f"L{layer}")["ablation"]


def single_head_ablation_ray(
    checkpoints: Sequence[str | Path],
    seeds: Sequence[int],
    num_layers: int,
    task: str | None = None,
    max_examples: int | None = None,
    data_dir: str | Path | None = None,
    *,
    address: str | None = None,
    workers: int | None = None,
    cpus_per_worker: float = 1,
    gpus_per_worker: float = 0,
    allow_task_mismatch: bool = False,
) -> Result:
    """Michel et al.'s single-head ablation table (:func:`bertology.intervention.importance.single_head_ablation`)
    with one Ray task per checkpoint (fine-tuning seed) x layer: each loads its checkpoint, scores it once
    whole and once per head of its layer masked. Returns the same ``ablation`` and ``summary`` tables as the
    local function (the baseline of a checkpoint is computed by each of its tasks, identically)."""
    ray = connect(address, progress=False)
    check_resources(cpus_per_worker, gpus_per_worker)  # one line, not an endless wait
    remote = ray.remote(num_cpus=cpus_per_worker, num_gpus=gpus_per_worker or 0, max_retries=1)(_ablate_layer)
    units = [(str(Path(c).resolve()), int(s), layer) for c, s in zip(checkpoints, seeds)
             for layer in range(1, num_layers + 1)]
    workers = min(workers or default_workers(cpus_per_worker, gpus_per_worker), len(units))
    device = "cuda" if gpus_per_worker else "cpu"
    root = str(Path(data_dir).resolve()) if data_dir else None
    frames = dict(zip(units, run_tasks(
        lambda unit: remote.remote(*unit, task, max_examples, root, int(max(1, cpus_per_worker)), device,
                                   allow_task_mismatch),
        units, workers)))
    raw = pd.concat([frames[unit] for unit in units], ignore_index=True)  # the local order: seed, then layer
    return Result("single_head_ablation", tables={"ablation": raw, "summary": summarize_single_head(raw)},
                  meta={"seeds": [int(s) for s in seeds], "n_heads": int(raw.groupby("seed").size().max())
                        if len(raw) else 0, "engine": "ray", "workers": workers})


def _readout_job(name: str, seed: int, train_folder: str, dev_folder: str, context: dict, threads: int, device: str):
    torch.set_num_threads(max(1, threads))
    config = dataclasses.replace(context["config"], device=device, progress=False)
    return readout_rows(name, seed, train_folder, dev_folder, **{**context, "config": config})


def glue_readouts_runner(*, address: str | None = None, workers: int | None = None, cpus_per_worker: float = 1,
                         gpus_per_worker: float = 0):
    """A ``runner`` for :func:`bertology.readouts.glue.run_glue_readouts`: one Ray task per readout x seed, each
    reading the activation stores from their folders (on a path every node sees)."""

    def runner(jobs, train_folder: str, dev_folder: str, context: dict) -> list[list[dict]]:
        ray = connect(address, progress=False)
        check_resources(cpus_per_worker, gpus_per_worker)  # one line, not an endless wait
        remote = ray.remote(num_cpus=cpus_per_worker, num_gpus=gpus_per_worker or 0, max_retries=1)(_readout_job)
        limit = min(workers or default_workers(cpus_per_worker, gpus_per_worker), len(jobs))
        device = "cuda" if gpus_per_worker else "cpu"
        train, dev = str(Path(train_folder).resolve()), str(Path(dev_folder).resolve())
        return run_tasks(lambda job: remote.remote(job[0], job[1], train, dev, context, int(max(1, cpus_per_worker)),
                                                   device), list(jobs), limit)

    return runner
