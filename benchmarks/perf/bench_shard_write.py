"""Writing a store's shards: the former writer (each shard hashed, then written and fsynced, on one thread) against
``write_shard_atomic``'s (hashed on a second thread while it is written and fsynced), same process, same tensors.

The shards are a bert-base-shaped store of UD EWT dev (13 layers x 768, float16, one row per word), cut as
``extract`` cuts them on a GPU (``plan_shards`` with the ramp, at the 1 GiB target): about 500 MB in seven shards,
the write that sets the pace of a GPU extraction (BENCHMARKS.md, "Writing a store's shards"). Each variant writes
every shard into a fresh folder of ``--dir`` (default: the system's temporary folder), rounds alternated, the best
of ``--rounds``; the files of both are checked to hash to what each recorded.

    .venv/bin/python -m benchmarks.perf.bench_shard_write [--rounds 5] [--dir DIR]

Stored as ``benchmarks/results/shard_write_cpu.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.stored import save_run, table

#: What this benchmark times ours against, in the same process (tests/test_benchmarks_layout.py).
BASELINE = "the former shard write: SHA-256 of each block, then its write, one thread, fsync (same tensors, same disk)"


def former_write(path: Path, tensors, metadata) -> str:
    """The writer before session 22 (``write_shard_atomic`` then): hash each block, then write it."""
    import torch

    header, offset, buffers = {"__metadata__": dict(metadata)}, 0, []
    for name, tensor in tensors.items():
        raw = tensor.reshape(-1).view(torch.uint8).numpy()
        header[name] = {"dtype": "F16", "shape": list(tensor.shape), "data_offsets": [offset, offset + raw.nbytes]}
        offset += raw.nbytes
        buffers.append(raw)
    encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
    encoded += b" " * (-len(encoded) % 8)
    digest = hashlib.sha256()
    with open(path, "wb") as handle:
        for block in (len(encoded).to_bytes(8, "little"), encoded, *buffers):
            digest.update(block)
            handle.write(block)
        handle.flush()
        os.fsync(handle.fileno())
    return digest.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--name", default="shard_write_cpu")
    args = parser.parse_args()
    import numpy as np
    import torch

    from bertology.data import default_corpus, read_conllu
    from bertology.extraction.spec import SHARD_MAX_BYTES
    from bertology.store.store import file_sha256, write_shard_atomic
    from bertology.store.writer import plan_shards, shard_metadata

    words = np.asarray([len(s.words) for s in read_conllu(default_corpus("ewt-dev"))], dtype=np.int64)
    layers, hidden = 13, 768
    bytes_per_row = 2 * hidden * layers
    shards = plan_shards(words, bytes_per_row, SHARD_MAX_BYTES, ramp=128)
    generator = torch.Generator().manual_seed(0)
    data = [{f"layer.{layer}": torch.randn(int(words[a:b].sum()), hidden, generator=generator).to(torch.float16)
             for layer in range(layers)} for a, b in shards]
    total = sum(t.numel() * 2 for shard in data for t in shard.values())
    metadata = shard_metadata()
    writers = {"former": lambda path, tensors: former_write(path, tensors, metadata),
               "ours": lambda path, tensors: write_shard_atomic(path, tensors, metadata)["sha256"]}
    times = {name: [] for name in writers}
    load_before = os.getloadavg()
    root = Path(tempfile.mkdtemp(prefix="bench-shard-write-", dir=args.dir))
    try:
        for _ in range(args.rounds):
            for name, write in writers.items():
                folder = root / name
                shutil.rmtree(folder, ignore_errors=True)
                folder.mkdir()
                start = time.perf_counter()
                digests = [write(folder / f"shard-{k:05d}.safetensors", tensors) for k, tensors in enumerate(data)]
                times[name].append(time.perf_counter() - start)
                for k, digest in enumerate(digests):  # what each recorded is its file's hash
                    assert file_sha256(folder / f"shard-{k:05d}.safetensors") == digest, (name, k)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    former, ours = min(times["former"]), min(times["ours"])
    rows = [[f"EWT dev, bert-base shape ({layers} x {hidden} float16), {len(shards)} shards, {total / 1e6:,.0f} MB",
             f"{former:.3f}", f"{ours:.3f}", f"{former / ours:.2f}x", f"{total / 1e9 / ours:.2f}"]]
    print(rows[0], flush=True)
    save_run(args.name, argv=sys.argv, cpu_capability=torch.backends.cpu.get_cpu_capability(),
             raw={"seconds": times, "bytes": total, "shard_sentences": [b - a for a, b in shards],
                  "cpus": os.cpu_count(), "load_average_before": load_before, "load_average_after": os.getloadavg()},
             tables={"write": table(["writing a store's shards", "former (s)", "ours (s)", "ours vs former",
                                     "ours, GB/s"], rows)})


if __name__ == "__main__":
    main()
