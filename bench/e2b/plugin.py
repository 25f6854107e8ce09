"""A pytest plugin for E2B's suite (`-p bench.e2b.plugin`): each worker ends its sandboxes
when its tests are done, before the interpreter winds down."""

from __future__ import annotations

import pytest

from bench.e2b.sandbox import Backend


def pytest_unconfigure(config: pytest.Config) -> None:
    Backend.close_shared()
