"""The inspector's gate over HTTP (the browser tests are in test_inspector_browser.py):
its token, the loopback rule, team mode's keys as the pages' credential, its files."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from servers import user_with_key

import memd
from memd.config import load_settings
from memd.server.app import create_app
from memd.ui.token import TOKEN_FILE, ui_token


def client(tmp_path: Path, **overrides: object) -> TestClient:
    settings = replace(load_settings(data_dir=tmp_path / "d"), **overrides)  # type: ignore[arg-type]
    engine = memd.open(settings=settings)
    return TestClient(create_app(engine, settings, run_jobs=False),
                      base_url="http://127.0.0.1:8787", follow_redirects=False)


def test_the_token_is_made_once_and_kept_private(tmp_path: Path) -> None:
    first = ui_token(tmp_path)
    assert len(first) >= 40 and ui_token(tmp_path) == first
    assert (tmp_path / TOKEN_FILE).stat().st_mode & 0o077 == 0


def test_personal_mode_opens_with_the_token_only(tmp_path: Path) -> None:
    with client(tmp_path) as c:
        assert c.get("/ui").status_code == 401
        assert c.get("/ui?token=guess").status_code == 401
        assert c.get("/ui?token=").status_code == 401
        opened = c.get(f"/ui?token={ui_token(tmp_path / 'd')}")
        assert opened.status_code == 303 and opened.headers["location"] == "/ui"
        cookie = opened.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/" in cookie
        page = c.get("/ui")
        assert page.status_code == 200 and "memd inspector" in page.text
        assert "default-src 'self'" in page.headers["content-security-policy"]
        assert c.get("/ui/static/app.js").headers["content-type"].startswith("text/javascript")
        assert c.get("/ui/static/..%2Fstatic%2Findex.html").status_code == 404
        assert c.get("/ui/static/missing.js").status_code == 404


def test_the_page_names_its_files_by_version_so_a_browser_keeps_them(
        tmp_path: Path) -> None:
    from memd.server.inspector import assets_version

    version = assets_version()
    with client(tmp_path) as c:
        c.get(f"/ui?token={ui_token(tmp_path / 'd')}")
        page = c.get("/ui")
        assert page.headers["cache-control"] == "no-store"  # the page itself: always asked
        found = re.findall(r'(?:src|href)="(/ui/static/[^"]+)"', page.text)
        assert f"/ui/static/{version}/app.js" in found
        assert f"/ui/static/{version}/calls.js" in found  # preloaded with app.js
        assert all(f.startswith(f"/ui/static/{version}/") for f in found)
        kept = c.get(f"/ui/static/{version}/app.js")
        assert kept.status_code == 200 and "immutable" in kept.headers["cache-control"]
        assert kept.content == c.get("/ui/static/app.js").content
        assert c.get("/ui/static/v-000000000000/app.js").status_code == 404  # stale
        assert c.get(f"/ui/static/{version}/missing.js").status_code == 404
        for name in re.findall(r'from "\./([a-z]+\.js)"', kept.text):  # its imports
            assert c.get(f"/ui/static/{version}/{name}").status_code == 200, name


def test_beyond_loopback_without_auth_the_inspector_is_not_served(tmp_path: Path) -> None:
    with client(tmp_path, host="0.0.0.0") as c:
        refused = c.get(f"/ui?token={ui_token(tmp_path / 'd')}")
        assert refused.status_code == 403 and "set-cookie" not in refused.headers


def test_team_mode_takes_a_key_and_acts_as_its_user(tmp_path: Path) -> None:
    with client(tmp_path, auth=True) as c:
        engine = c.app.state.engine  # type: ignore[attr-defined]
        keys = {user: user_with_key(engine, user) for user in ("alice", "bob")}
        engine.add("Bob's secret is 42", "bob")
        # the personal token opens nothing in team mode
        assert c.get(f"/ui?token={ui_token(tmp_path / 'd')}").status_code == 401
        assert c.get("/v1/memories").status_code == 401
        assert c.get(f"/ui?token={keys['alice']}").status_code == 303
        assert c.get("/ui").status_code == 200
        c.post("/v1/memories", json={"text": "Alice likes tea"}).raise_for_status()
        seen = [m["text"] for m in c.get("/v1/memories").json()["memories"]]
        assert seen == ["Alice likes tea"]  # as alice; nothing of bob's
        assert c.get("/v1/memories", params={"user_id": "bob"}).status_code == 403


@pytest.mark.parametrize("headers", [{"Origin": "http://localhost:9999"},
                                     {"Sec-Fetch-Site": "cross-site"}])
def test_a_cookie_write_from_another_site_is_refused(tmp_path: Path,
                                                     headers: dict[str, str]) -> None:
    with client(tmp_path) as c:
        c.get(f"/ui?token={ui_token(tmp_path / 'd')}")
        refused = c.post("/v1/memories", json={"text": "planted"}, headers=headers)
        assert refused.status_code == 403
        assert c.get("/v1/memories").json()["memories"] == []


def test_memd_ui_without_a_daemon_says_to_start_one(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from memd.cli import main

    done = CliRunner().invoke(main, ["--data-dir", str(tmp_path), "ui", "--no-open"])
    assert done.exit_code == 2 and "memd serve" in done.output
