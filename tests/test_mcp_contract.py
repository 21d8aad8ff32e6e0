"""The MCP tools' names and schemas are a contract with every client configured to call
them: ``tests/fixtures/mcp_tools.json`` holds them, and any change to a tool's name, its
argument or result schema, its hints, or the resources, fails here. A deliberate change
(a new tool, never a renamed one) rewrites the fixture with
``python tests/test_mcp_contract.py`` and says so in the changelog.

Then a real MCP client from npm, the MCP Inspector in CLI mode, launches ``memd mcp`` as
an editor would, lists the tools and calls ``search_memory``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp_client import MEMD_MCP

import memd
from memd.server.mcp_server import build_server
from memd.server.mcp_tools import MemoryTools

FIXTURE = Path(__file__).parent / "fixtures" / "mcp_tools.json"


def contract() -> dict[str, Any]:
    """What a client sees of memd's tools and resources, listed by the SDK's client."""
    server = build_server(lambda _request: (MemoryTools(None, "local"), None))  # type: ignore[arg-type]

    async def listed() -> dict[str, Any]:
        async with Client(server) as client:
            tools = (await client.list_tools()).tools
            templates = (await client.list_resource_templates()).resource_templates
        return {
            "tools": [{"name": t.name, "inputSchema": t.input_schema,
                       "outputSchema": t.output_schema,
                       "annotations": t.annotations.model_dump(by_alias=True,
                                                               exclude_none=True)
                       if t.annotations else None}
                      for t in tools],
            "resourceTemplates": [{"uriTemplate": r.uri_template, "mimeType": r.mime_type}
                                  for r in templates],
        }

    return anyio.run(listed)


def test_tool_names_and_schemas_are_the_committed_ones() -> None:
    now = contract()
    committed = json.loads(FIXTURE.read_text())
    assert [t["name"] for t in now["tools"]] == [t["name"] for t in committed["tools"]]
    assert len(now["tools"]) <= 8  # a model choosing among many tools chooses worse
    for ours, theirs in zip(now["tools"], committed["tools"], strict=True):
        assert ours == theirs, f"the {ours['name']} tool changed: see this module's docstring"
    assert now["resourceTemplates"] == committed["resourceTemplates"]


def test_every_tool_documents_itself_and_its_arguments() -> None:
    server = build_server(lambda _request: (MemoryTools(None, "local"), None))  # type: ignore[arg-type]

    async def listed() -> list[Any]:
        async with Client(server) as client:
            return list((await client.list_tools()).tools)

    for tool in anyio.run(listed):
        assert tool.description and "\n" not in tool.description, tool.name
        for name, schema in tool.input_schema["properties"].items():
            assert schema.get("description"), f"{tool.name}.{name}"


@pytest.mark.slow
def test_the_mcp_inspector_lists_the_tools_and_searches_through_memd_mcp(
        tmp_path: Path) -> None:
    from agents.install import ensure_inspector

    inspector = ensure_inspector()
    data = tmp_path / "d"
    with memd.open(data) as engine:
        engine.add("The staging cluster lives in Frankfurt", "local")
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "MEMD_DATA_DIR": str(data),
           "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}

    def inspect(*args: str) -> Any:
        done = subprocess.run([str(inspector), "--cli", *MEMD_MCP, *args], env=env,
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    listed = inspect("--method", "tools/list")
    assert [t["name"] for t in listed["tools"]] == [
        t["name"] for t in json.loads(FIXTURE.read_text())["tools"]]
    found = inspect("--method", "tools/call", "--tool-name", "search_memory",
                    "--tool-arg", "query=staging cluster Frankfurt")
    assert found["isError"] is False
    assert [h["text"] for h in found["structuredContent"]["hits"]][:1] == [
        "The staging cluster lives in Frankfurt"]


if __name__ == "__main__":  # rewrite the fixture after a deliberate change
    FIXTURE.write_text(json.dumps(contract(), indent=2, sort_keys=True) + "\n")
    print(f"wrote {FIXTURE}", file=sys.stderr)
