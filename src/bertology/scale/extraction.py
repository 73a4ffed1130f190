"""Extraction on a Ray cluster: the local engine's shards, computed by a pool of encoder replicas.

The driver plans the store exactly as :func:`bertology.extraction.extract` does (same checks, same
tokenization, same shard plan, same index). The shards still to do become the rows of a Ray Dataset,
each carrying its sentences' encoded inputs; ``map_batches`` hands them, one shard per call, to a pool of
actors that each hold one encoder replica (loaded once per actor) and run the local engine's
:class:`~bertology.extraction.pipeline.ShardComputer` (its length-sorted batches, pooling and attention
maps) and the store writer's :func:`~bertology.store.writer.write_shard` straight into the store folder. The
driver alone writes the index (:meth:`~bertology.store.writer.StoreWriter.record`), one
shard at a time as their results come back, so the index never names a shard whose file is not whole; a
rerun skips the shards it lists and redoes the others (a worker killed mid-write leaves only a temporary
file, which the rerun deletes).
"""

from __future__ import annotations

import dataclasses
import gc
import os
import pickle
import socket
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from bertology.data.sentence import Sentence
from bertology.errors import OutputError, StoreError
from bertology.extraction.pipeline import ShardComputer, plan_extraction, run_context, run_stats
from bertology.extraction.spec import ExtractionSpec
from bertology.models.encoders import Encoder, load_encoder
from bertology.progress import progress_bar
from bertology.scale.cluster import check_resources, connect, default_workers, plain_error, user_error
from bertology.scale.spec import ClusterSpec
from bertology.settings import spec_of
from bertology.store.names import INDEX_NAME
from bertology.store.store import Store
from bertology.store.writer import write_shard

#: A test hook: ``{"shard": k, "mode": "raise" | "exit", "marker": path}`` makes the actor given shard ``k``
#: raise, or die mid-write (leaving a partial temporary file); with ``marker`` only once (the marker
#: file is created on the first failure).
FAIL_ENV = "BERTOLOGY_RAY_FAIL"
#: The keywords of :func:`extract_ray` that are :class:`~bertology.scale.spec.ClusterSpec` fields.
CLUSTER_FIELDS = tuple(field.name for field in dataclasses.fields(ClusterSpec))


class ShardActor:
    """One encoder replica; called by Ray Data with a batch of shard rows, it writes each shard and
    returns their index entries and counts."""

    def __init__(self, encoder, load: dict | None, fingerprint: str, spec: ExtractionSpec, layers: list[int],
                 max_rows: int, out: str, threads: int, device: str, fail: dict | None = None):
        torch.set_num_threads(max(1, threads))
        self.out, self.fail = Path(out), fail
        if not (self.out / INDEX_NAME).is_file():
            raise StoreError(f"{out}: the store folder is not visible on node {socket.gethostname()}; the store "
                             "must live on a path every node sees (a shared file system; docs/scale.md)")
        if load is not None:
            encoder = load_encoder(**{**load, "device": device})
            if encoder.fingerprint != fingerprint:
                raise StoreError(f"node {socket.gethostname()}: model {load.get('name_or_path')!r} has fingerprint "
                                 f"{encoder.fingerprint}, the driver's has {fingerprint}; every node needs the same "
                                 "weights and tokenizer")
        else:
            import ray

            encoder = unpack_encoder(ray.get(encoder))
            encoder.to(device)
        self.encoder = encoder
        self.encoded: dict = {}
        self.computer = ShardComputer(encoder, self.encoded, spec, layers, max_rows=max_rows)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        results = {name: [] for name in ("shard", "bytes", "sha256", "tokens", "padded_tokens", "windowed_sentences",
                                         "seconds", "node")}
        for k, start, stop, file, payload in zip(batch["shard"], batch["start"], batch["stop"], batch["file"],
                                                 batch["payload"]):
            started = time.perf_counter()
            self.encoded.clear()
            self.encoded.update(pickle.loads(payload))
            self._maybe_fail(int(k), "raise")
            with run_context(self.encoder, self.computer.spec.autocast, self.computer.attention_layers):
                tensors, counts = self.computer.compute(int(start), int(stop))
            self._maybe_fail(int(k), "exit")
            entry = write_shard(self.out, str(file), tensors)
            for name, value in (("shard", int(k)), ("bytes", entry["bytes"]), ("sha256", entry["sha256"]),
                                *counts.items(), ("seconds", time.perf_counter() - started),
                                ("node", socket.gethostname())):
                results[name].append(value)
        return {name: np.asarray(values) for name, values in results.items()}

    def _maybe_fail(self, k: int, mode: str) -> None:
        fail = self.fail
        if not fail or fail.get("shard") != k or fail.get("mode") != mode:
            return
        marker = Path(fail["marker"]) if fail.get("marker") else None
        if marker is not None:
            if marker.exists():
                return
            marker.write_text(str(os.getpid()))
        if mode == "raise":
            raise RuntimeError(f"injected failure on shard {k} ({FAIL_ENV})")
        partial = self.out / f".shard-{k:05d}.safetensors.killed.tmp"
        partial.write_bytes(b"\0" * 1024)  # what a process killed while writing leaves behind
        os._exit(1)


def extract_ray(
    encoder: Encoder,
    sentences: Sequence[Sentence | str],
    out: str | Path,
    spec: ExtractionSpec | None = None,
    *,
    cluster: ClusterSpec | None = None,
    load: dict | None = None,
    input_path: str | None = None,
    overwrite: bool = False,
    progress: bool = True,
    fail: dict | None = None,
    **settings,
) -> Store:
    """:func:`bertology.extraction.extract` on a Ray cluster: the same store, written by ``workers`` actors.

    ``encoder`` is the driver's copy (it tokenizes and fingerprints). Each actor loads its own replica
    with ``load_encoder(**load)`` when ``load`` is given (what the CLI does: nothing but the name travels),
    and refuses to work if its fingerprint differs; otherwise ``encoder`` itself is shipped through the
    object store. ``cluster`` (:class:`~bertology.scale.spec.ClusterSpec`, or its fields as keywords: ``address``,
    ``workers``, ``cpus_per_worker``, ``gpus_per_worker``): where the workers run. ``address``: ``None`` starts (or
    reuses) a local instance, ``"auto"`` or ``HOST:PORT`` joins a cluster. ``workers`` defaults to what the
    cluster has room for; each asks for ``cpus_per_worker`` CPUs (its torch threads) and ``gpus_per_worker``
    GPUs (then it runs on ``cuda``). ``out`` must be a folder every node sees. ``spec`` (or its fields as
    keywords), ``input_path``, ``overwrite`` and ``progress`` as :func:`~bertology.extraction.extract`.
    """
    started = time.perf_counter()
    placed = {name: settings.pop(name) for name in CLUSTER_FIELDS if name in settings}
    cluster = spec_of(ClusterSpec, cluster, placed, "cluster")
    address, workers = cluster.address, cluster.workers
    cpus_per_worker, gpus_per_worker = cluster.cpus_per_worker, cluster.gpus_per_worker
    spec = ExtractionSpec.of(spec, **settings)  # a bad setting is one line before the cluster starts
    # The cluster first: workers it has no room for are refused in one line (Ray would wait for them forever)
    # before the plan writes the store's index into ``out``.
    ray = connect(address, progress=progress)
    check_resources(cpus_per_worker, gpus_per_worker)
    connected = time.perf_counter()
    plan = plan_extraction(encoder, sentences, out, spec, input_path=input_path, overwrite=overwrite)
    writer = plan.writer
    if plan.complete:
        return Store.open(plan.out)
    todo = plan.todo
    workers = min(workers or default_workers(cpus_per_worker, gpus_per_worker), len(todo))
    rows = []
    for k in todo:
        shard = plan.index["shards"][k]
        payload = {i: plan.encoded[i] for i in range(shard["start"], shard["stop"])}
        rows.append({"shard": k, "start": shard["start"], "stop": shard["stop"], "file": shard["file"],
                     "payload": pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)})
    fail = fail if fail is not None else _fail_from_env()
    encoder_ref = None if load is not None else ray.put(pack_encoder(encoder))
    dataset = ray.data.from_items(rows, override_num_blocks=len(rows)).map_batches(
        ShardActor, batch_size=1, batch_format="numpy", compute=ray.data.ActorPoolStrategy(size=workers),
        num_cpus=cpus_per_worker, num_gpus=gpus_per_worker or None,
        fn_constructor_kwargs={"encoder": encoder_ref, "load": load, "fingerprint": encoder.fingerprint,
                               "spec": plan.spec, "layers": plan.layers, "max_rows": plan.largest_shard_rows(todo),
                               "out": str(plan.out.resolve()), "threads": int(max(1, cpus_per_worker)),
                               "device": "cuda" if gpus_per_worker else "cpu", "fail": fail})
    counts, nodes, first = [], set(), None
    sentences_of = {k: plan.index["shards"][k]["stop"] - plan.index["shards"][k]["start"] for k in todo}
    finished = iter(dataset.iter_rows())
    try:
        with progress_bar(progress) as bar:
            task = bar.add_task(f"extract {encoder.name} on Ray, {workers} workers (sentences)",
                                total=sum(sentences_of.values()))
            for row in finished:
                k = int(row["shard"])
                writer.record(k, {"file": plan.index["shards"][k]["file"], "bytes": int(row["bytes"]),
                                  "sha256": str(row["sha256"])})
                counts.append({key: int(row[key]) for key in ("tokens", "padded_tokens", "windowed_sentences")})
                nodes.add(str(row["node"]))
                first = first if first is not None else time.perf_counter()
                bar.advance(task, sentences_of[k])
    except Exception as error:  # Ray wraps what the actors raised
        cause = user_error(error)
        if isinstance(cause, OutputError):
            raise writer.output_error(cause) from None
        if cause is not None:
            raise plain_error(cause) from None
        raise
    finally:
        # Shut the actor pool down now: while anything refers to it (a caller keeping the exception keeps
        # this frame) its actors keep their CPUs, and the next run in the same process waits for them forever.
        # Closing the iterator is not enough; the pool goes when nothing refers to it any more.
        finished.close()
        del finished, dataset
        gc.collect()
    missing = plan.todo
    if missing:
        raise StoreError(f"{plan.out}: the Ray run ended with shards {missing} not written; run the same command "
                         "again to redo them")
    writer.remove_leftovers()  # what a worker killed mid-write left (its shard was redone)
    elapsed = time.perf_counter() - started
    writer.finish(run_stats(counts, elapsed, engine="ray", workers=workers, nodes=sorted(nodes),
                          connect_seconds=round(connected - started, 3),
                          first_shard_seconds=round((first or connected) - started, 3)))
    return Store.open(plan.out)


def pack_encoder(encoder: Encoder) -> bytes:
    """An encoder as bytes for the object store: model class, config, weights and tokenizer. The model
    object itself does not pickle once it has run (transformers hangs closures on it as forward hooks)."""
    model = encoder.model
    state = {name: tensor.detach().cpu() for name, tensor in model.state_dict().items()}
    return pickle.dumps({"class": type(model), "config": model.config, "state": state, "tokenizer": encoder.tokenizer,
                         "name": encoder.name, "source": encoder.source, "untrained_seed": encoder.untrained_seed,
                         "fingerprint": encoder.fingerprint}, protocol=pickle.HIGHEST_PROTOCOL)


def unpack_encoder(data: bytes) -> Encoder:
    packed = pickle.loads(data)
    model = packed["class"](packed["config"])
    model.load_state_dict(packed["state"])
    return Encoder(model=model.eval(), tokenizer=packed["tokenizer"], name=packed["name"], source=packed["source"],
                   untrained_seed=packed["untrained_seed"], _fingerprint=packed["fingerprint"])


def _fail_from_env() -> dict | None:
    value = os.environ.get(FAIL_ENV)
    if not value:
        return None
    shard, _, rest = value.partition(":")
    mode, _, marker = rest.partition(":")
    return {"shard": int(shard), "mode": mode or "raise", "marker": marker or None}
