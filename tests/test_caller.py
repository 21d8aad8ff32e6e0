"""The caller of a proxied chat call: its headers read once into one typed object, the
same on every door, and a header memd refuses is a 400 before anything is stored."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from starlette.requests import Request

from memd.errors import InvalidInput
from memd.server.caller import Caller


def request(headers: dict[str, str], path: str = "/v1/chat/completions") -> Request:
    app = SimpleNamespace(state=SimpleNamespace(
        engine=SimpleNamespace(settings=SimpleNamespace(default_user="local"))))
    return Request({"type": "http", "method": "POST", "path": path, "app": app,
                    "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
                    "path_params": {}, "state": {}})


def test_the_headers_are_read_into_the_caller() -> None:
    caller = Caller.read(request({
        "User-Agent": "opencode/1.18.33", "X-Memd-Session": "s-1", "X-Memd-Memory": "OFF",
        "X-Memd-Virtualize": "on", "X-Memd-User": "alex", "x-session-id": "conv-9"}))
    assert (caller.user, caller.session, caller.memory, caller.memory_header) == (
        "alex", "s-1", "off", "OFF")
    assert caller.virtualize == "on" and caller.client == "opencode"
    assert caller.agent == "opencode/1.18.33" and "conv-9" in (caller.conversation or "")


def test_nothing_sent_means_no_pin_and_no_flag() -> None:
    caller = Caller.read(request({}))
    assert (caller.user, caller.session, caller.memory, caller.virtualize,
            caller.client) == ("local", None, "", None, "")


@pytest.mark.parametrize("header", [{"X-Memd-Memory": "maybe"},
                                    {"X-Memd-Virtualize": "sometimes"}])
def test_a_header_memd_refuses_is_invalid_input(header: dict[str, str]) -> None:
    with pytest.raises(InvalidInput):
        Caller.read(request(header))
