#!/usr/bin/env bash
# The GPU check on a lent machine (run from the repository root there, after gpu_prepare.sh here, carrying .minilm
# and .whl): installs NeuroX into /tmp/site, puts src/ on the path (nothing is installed), runs tests/gpu_check.py
# under a time limit that leaves the stored throughput in place if the report is cut off, and writes the run and
# its log under $OUT. BENCHMARK_COMMIT names the commit sent (the copy has no git folder).
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 BERTOLOGY_CACHE=/tmp/bc HF_HOME=/tmp/hf MPLBACKEND=Agg
out=${OUT:-/tmp/gpu-out}; mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src:$PWD
nvidia-smi -L
python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__, torch.backends.cpu.get_cpu_capability())"
# GPU_CHECK_ARGS: more of tests.gpu_check's options (e.g. "--no-report --rounds 5" for the throughput alone).
timeout -s INT "${LIMIT:-565}" python3 -m tests.gpu_check --minilm-dir .minilm --name "$out/gpu_check.json" ${GPU_CHECK_ARGS:-} > "$out/log.txt" 2>&1
echo "rc $?"
tail -c 7000 "$out/log.txt"
