"""Property-based API testing from the served OpenAPI schema, with every schemathesis
check: no 5xx, every status code and response documented, schema-valid requests
accepted and schema-violating ones refused, ``Allow`` on a 405.

A smaller budget of the full run (``schemathesis run URL/openapi.json --checks all
--max-examples 100``), which finds nothing either. The app is built at import
(schemathesis parametrizes at collection time) over a fresh temp data dir, with a fake
upstream wired in through an in-process ASGI transport.
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
from ollama_upstream import FakeOllama
from schemathesis import GenerationMode
from schemathesis.checks import positive_data_acceptance
from servers import FakeUpstream
from starlette.applications import Starlette

import memd
from memd.config import load_settings
from memd.server.app import create_app

pytestmark = pytest.mark.slow


class Upstream(FakeUpstream):
    """Answers any chat: schemathesis sends histories with no user message at all."""

    def _answer(self, body: dict[str, Any]) -> dict[str, Any]:
        return {"role": "assistant", "content": "ok"}


_data = Path(tempfile.mkdtemp(prefix="memd-schemathesis-"))
# schemathesis's ASGI transport sends Host: testserver; allowed the way a user would
# allow a non-loopback name in the config
_cfg = replace(load_settings(data_dir=_data), upstream_url="http://upstream/v1",
               embedder="fake", allowed_hosts=("testserver",))
_engine = memd.open(settings=_cfg)
_engine.add("a memory to find", "local")
# one in-process server for every upstream: the OpenAI-format one and Ollama's
_upstreams = Starlette(routes=[*Upstream().app.routes, *FakeOllama().app.routes])
_app = create_app(_engine, _cfg, run_jobs=False,
                  upstream_transport=httpx.ASGITransport(app=_upstreams))
schema = schemathesis.openapi.from_asgi("/openapi.json", _app)
schema.config.generation.update(modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
                                max_examples=3)
schema.config.phases.update(phases=["fuzzing"])


@schema.parametrize()
@settings(deadline=None, suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_schema(case: Any) -> None:
    # An import's content is a file in the named client's own format, which no schema
    # describes: a schema-valid body whose file is not one is a 400 that says why. Every
    # other check still holds for it.
    imports = case.method == "POST" and case.path.endswith("/v1/import")
    case.call_and_validate(excluded_checks=[positive_data_acceptance] if imports else None)
