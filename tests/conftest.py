"""Shared fixtures: tiny random encoders built in code, the real MiniLM, and the shared data folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
# The suite passes however it is launched: what a launcher's environment may hold and the tests read through
# the product is dropped (the debug switch changes every error's shape; a terminal's size and forced colours
# change how rich wraps and styles one-line messages). Tests that need one set it themselves.
for _name in ("BERTOLOGY_DEBUG", "COLUMNS", "LINES", "FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE",
              "TTY_INTERACTIVE", "CLICOLOR_FORCE"):
    os.environ.pop(_name, None)
# The product never looks beside the checkout for data; the tests read this project's shared data folder
# (../shared/data, as CI has it) through the one documented way in: $BERTOLOGY_DATA.
_SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
if _SHARED.is_dir():
    os.environ.setdefault("BERTOLOGY_DATA", str(_SHARED))

# Tests run as two xdist workers on two cores: one intra-op thread each avoids oversubscription, under
# which torch's small ops slow down by orders of magnitude (seen on these machines).
import torch  # noqa: E402

torch.set_num_threads(1)

#: The test files that take longest, run first. Under ``--dist loadfile`` a file runs whole on one worker; the
#: README's command-line tour alone runs for minutes (every line as written), and started last (xdist by default
#: queues the files with the most tests first) it held the run open on one core for its last third. ``make test``
#: passes ``--no-loadscope-reorder`` so that xdist keeps this order; the other files follow in collection order.
SLOWEST_FIRST = ("test_readme.py", "test_faults_kill.py", "test_scale_ray.py", "test_report.py",
                 "test_probing_integration.py", "test_extract_shared.py", "test_spine_extract.py",
                 "test_claims_report.py", "test_faults_race.py", "test_probing_labels.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: position for position, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a file's tests keep their order


@pytest.fixture(scope="session")
def shared_data():
    from bertology.data import shared_data_dir
    from bertology.errors import DataError

    try:
        return shared_data_dir()
    except DataError:
        pytest.skip("../shared/data not available (or $BERTOLOGY_DATA not set)")


@pytest.fixture(scope="session")
def minilm():
    from bertology.models import load_encoder
    from bertology.errors import ModelError

    try:
        return load_encoder("minilm")
    except ModelError as error:
        pytest.skip(str(error))


@pytest.fixture(scope="session")
def tiny_bert():
    from bertology.models.tiny import tiny_encoder

    return tiny_encoder("bert")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    """A tiny random BERT saved as a model folder (what commands take as --model)."""
    from bertology.models.tiny import tiny_encoder

    encoder = tiny_encoder("bert")
    folder = tmp_path_factory.mktemp("tiny") / "tiny-bert"
    encoder.model.save_pretrained(folder)
    encoder.tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_report(tmp_path_factory):
    """One quick report on a tiny random BERT, shared by the report tests: (index.html, encoder, out)."""
    from bertology.models.tiny import tiny_encoder
    from bertology.report import build_report

    out = tmp_path_factory.mktemp("reports")
    encoder = tiny_encoder("bert", layers=2, hidden=32, heads=4, attentions=False)
    # As on a user's machine: no data folder, no network (the report needs only what the package ships).
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("BERTOLOGY_DATA", raising=False)
        patch.setenv("HF_DATASETS_OFFLINE", "1")
        patch.setenv("BERTOLOGY_CACHE", str(out / "cache"))
        path = build_report(encoder=encoder, out=out, max_sentences=40, seeds=(0, 1), progress=False)
    return path, encoder, out


CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def browser():
    """Debian's chromium driven by playwright (never a downloaded browser); skipped where not installed."""
    if not CHROMIUM.exists():
        pytest.skip("/usr/bin/chromium not installed (make browser)")
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray instance (2 CPUs) for the whole session; the ray tests all live in test_scale_ray.py, so
    under `-n 2 --dist loadfile` only one xdist worker starts it. Skipped where the extra is not installed."""
    ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'bertology[ray]')")
    pytest.importorskip("ray.data")
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield ray
    ray.shutdown()
