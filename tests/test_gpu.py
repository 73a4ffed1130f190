"""The GPU check's correctness part as tests (``-m gpu``): on a machine with CUDA, extraction (hidden states and
word-level attentions) of tiny models of four families and the batched probe agree with the CPU. Skipped where no
CUDA device exists. The whole check (these, then throughput and the default report, stored as
``benchmarks/results/gpu_check_<gpu>.json``) is one command: ``python -m tests.gpu_check`` (tests/gpu_check.py)."""

from __future__ import annotations

import pytest
import torch

from tests.gpu_check import check_modernbert, correctness

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]

#: Largest |cpu - cuda| accepted, fp32 (tests/gpu_check.py's ModernBERT check uses the same).
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def sentences():
    from bertology.data import default_corpus, read_conllu

    return read_conllu(default_corpus("ewt-dev"))[:64]


def test_extraction_and_the_probe_agree_with_the_cpu(sentences, tmp_path):
    found = correctness(sentences, tmp_path)
    for name in ("tiny-bert", "tiny-roberta", "tiny-deberta-v2"):
        assert found[name]["hidden_max_abs_diff"] <= TOLERANCE, (name, found[name])
        assert found[name]["attention_max_abs_diff"] <= TOLERANCE, (name, found[name])
    cpu, cuda = found["probe_accuracy"]["cpu"], found["probe_accuracy"]["cuda"]
    assert max(abs(a - b) for a, b in zip(cpu, cuda)) <= 0.01, found["probe_accuracy"]


def test_modernbert_agrees_with_the_cpu(sentences, tmp_path):
    check_modernbert(sentences, tmp_path, device="cuda", tolerance=TOLERANCE)
