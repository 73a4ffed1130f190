"""Shared fixtures: tiny random encoders built in code, the real MiniLM, and the shared data folder."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def shared_data():
    from bertology.data import shared_data_dir
    from bertology.errors import DataError

    try:
        return shared_data_dir()
    except DataError:
        pytest.skip("../shared/data not available")


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
