"""A dialect's unit tests: the app on the fake engine (tests/fake_engine.py), driven by Starlette's
TestClient."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from localspec.config.settings import Settings
from localspec.server import create_app

from ..fake_engine import FakeModel


@pytest.fixture()
def fake():
    return FakeModel()


@pytest.fixture()
def client(fake):
    with TestClient(create_app(Settings(parallel=4), model=fake), base_url="http://localhost") as c:
        yield c
