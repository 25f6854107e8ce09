"""The egress tests run mitmproxy's master inside the test's own event loop; when it shuts
down, connections it still held are left to the collector. Collected here, after each test
(their ResourceWarnings are mitmproxy's shutdown, not a leak of the proxy process, which
runs on its own), rather than in whichever test of the worker runs next."""

from __future__ import annotations

import gc
import warnings
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _collect_what_the_proxy_left() -> Iterator[None]:
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
