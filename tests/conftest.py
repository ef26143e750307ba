"""Fixtures every test folder may use. Helpers that are not fixtures are in
:mod:`tests.support`; fixtures of one folder only live in that folder's ``conftest.py``."""

from __future__ import annotations

import os

import pytest


@pytest.fixture
def no_config_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ``A2E_*`` variable of the environment the tests run in reaches the configuration
    (of this process, and of the subprocesses it starts)."""
    for name in list(os.environ):
        if name.startswith("A2E_"):
            monkeypatch.delenv(name)
