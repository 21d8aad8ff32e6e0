"""`memd sessions`, `memd usage`, `memd pause|resume` and the pause in `memd status`: on
the store opened directly and through the daemon of the data dir."""

from __future__ import annotations

import json
from pathlib import Path

from test_cli_store import cli, daemon

import memd
from memd.config import load_settings
from memd.types import Usage


def seed(data_dir: Path) -> list[str]:
    engine = memd.open(settings=load_settings(data_dir=data_dir))
    try:
        ids = []
        for ws in ("proj", None):
            s = engine.create_session("local", workspace=ws)
            engine.append(s.id, "local", [{"role": "user", "content": "hello there"}])
            ids.append(s.id)
        engine.store.record_usage(Usage(id="u1", user_id="local", created_at=86400.0 * 20000,
                                        model="gpt", prompt_tokens=1200,
                                        completion_tokens=34, cost_microcents=5000))
        return ids
    finally:
        engine.close()


def test_sessions_lists_a_table_and_json(hermetic_env: Path) -> None:
    in_proj, plain = seed(hermetic_env)
    table = cli("sessions")
    assert table.splitlines()[0].split()[:3] == ["CREATED", "LAST", "ACTIVE"]
    assert table.index(plain) < table.index(in_proj)  # newest first
    page = json.loads(cli("sessions", "--json", "--workspace", "proj"))
    assert [(s["id"], s["message_count"]) for s in page["data"]] == [(in_proj, 1)]
    assert [s["id"] for s in json.loads(cli("sessions", "--json", "--limit", "1"))["data"]] \
        == [plain]
    assert "limit" in cli("sessions", "--limit", "0", code=2)


def test_usage_prints_sums_per_group(hermetic_env: Path) -> None:
    seed(hermetic_env)
    table = cli("usage", "--by", "model")
    assert "gpt" in table and "1,200" in table and "$0.0001" in table
    found = json.loads(cli("usage", "--json"))
    assert found["data"][0]["key"] == "2024-10-04" and found["total"]["total_tokens"] == 1234
    assert "hour" in cli("usage", "--by", "hour", code=2)


def test_pause_resume_and_status_on_the_store_and_through_the_daemon(
        hermetic_env: Path) -> None:
    seed(hermetic_env)
    assert "paused in workspace proj" in cli("pause", "--workspace", "proj")
    assert "learning:  paused in workspace proj" in cli("status")
    with daemon(hermetic_env) as engine:
        assert "paused everywhere" in cli("pause")
        assert set(engine.store.pauses("local")) == {"", "proj"}
        assert "learning:  paused everywhere" in cli("status")
        out = cli("resume")
        assert "paused in workspace proj" in out
    assert cli("resume", "--workspace", "proj").strip() == "learning:  on"
    assert "learning:  on" in cli("status")
    assert "workspace" in cli("pause", "--workspace", "../x", code=2)
    assert "learning:  on" in cli("status")
