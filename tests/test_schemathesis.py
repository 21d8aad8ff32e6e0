"""Property-based API testing from the served OpenAPI schema: no input the schema allows
(or that schemathesis derives from it) may produce a 5xx.

The app is built at import (schemathesis parametrizes at collection time) over a fresh
temp data dir, with the fake upstream wired in through an in-process ASGI transport.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from servers import FakeUpstream

import memd
from memd.config import load_settings
from memd.server.app import create_app

pytestmark = pytest.mark.slow

_data = Path(tempfile.mkdtemp(prefix="memd-schemathesis-"))
# schemathesis's ASGI transport sends Host: testserver; allowed the way a user would
# allow a non-loopback name in the config
_cfg = replace(load_settings(data_dir=_data), upstream_url="http://upstream/v1",
               embedder="fake", allowed_hosts=("testserver",))
_engine = memd.open(settings=_cfg)
_engine.add("a memory to find", "local")
_app = create_app(_engine, _cfg, run_jobs=False,
                  upstream_transport=httpx.ASGITransport(app=FakeUpstream().app))
schema = schemathesis.openapi.from_asgi("/openapi.json", _app)


@schema.parametrize()
@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
def test_no_server_errors(case: Any) -> None:
    case.call_and_validate(checks=[not_a_server_error])
