"""``memd config show`` and ``memd config path``: the effective settings, each with its
source, never a secret."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from memd.cli import main
from memd.config import load_settings, load_settings_with_sources
from memd.errors import InvalidInput

API_KEY = "sk-test-0123456789abcdef"
DB_PASSWORD = "hunter2-db-pw"
URL_PASSWORD = "s3cret-url-pw"


def run(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), prog_name="memd")


def line(output: str, name: str) -> str:
    (found,) = [ln for ln in output.splitlines() if ln.startswith(f"{name} = ")]
    return found


def shown(*args: str) -> dict[str, dict[str, Any]]:
    result = run("config", "show", "--json", *args)
    assert result.exit_code == 0, result.output
    settings: dict[str, dict[str, Any]] = json.loads(result.output)["settings"]
    return settings


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    """The default config file (XDG_CONFIG_HOME points into tmp_path)."""
    path = tmp_path / "xdg-config" / "memd" / "config.toml"
    path.parent.mkdir(parents=True)
    return path


def test_defaults_are_shown_as_default() -> None:
    result = run("config", "show")
    assert result.exit_code == 0, result.output
    assert "does not exist" in result.output.splitlines()[0]
    assert line(result.output, "port").startswith("port = 8765 ")
    assert line(result.output, "port").endswith("# default")
    assert line(result.output, "similarity").endswith("# default")  # [weights]
    assert "[maintenance]" in result.output
    assert shown()["maintenance.tick"] == {"value": 60.0, "source": "default"}


def test_a_file_value_names_the_file(config_file: Path) -> None:
    config_file.write_text('port = 9999\npreset = "semantic"\n[maintenance]\ntick = 5\n')
    result = run("config", "show")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == f"# config file: {config_file}"
    assert line(result.output, "port").endswith(f"# file {config_file}")
    settings = shown()
    assert settings["port"] == {"value": 9999, "source": f"file {config_file}"}
    assert settings["maintenance.tick"]["source"] == f"file {config_file}"
    assert settings["maintenance.expiry"]["source"] == "default"
    assert settings["weights.keyword"] == {
        "value": 0.25, "source": f"file {config_file} (preset semantic)"}


def test_the_environment_wins_over_the_file(config_file: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    config_file.write_text('upstream_url = "http://file.example/v1"\ndb = "file.db"\n')
    monkeypatch.setenv("MEMD_UPSTREAM_URL", "http://env.example/v1")
    monkeypatch.setenv("MEMD_DB", str(tmp_path / "env.db"))
    settings = shown()
    assert settings["upstream_url"] == {"value": "http://env.example/v1",
                                        "source": "env MEMD_UPSTREAM_URL"}
    assert settings["db"] == {"value": str(tmp_path / "env.db"), "source": "env MEMD_DB"}
    # MEMD_DATA_DIR (set by the hermetic fixture) reaches click too, yet is no flag
    assert settings["data_dir"]["source"] == "env MEMD_DATA_DIR"


@pytest.mark.parametrize("where", ["before", "after"])
def test_flags_are_shown_as_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  where: str) -> None:
    monkeypatch.setenv("MEMD_DB", "env.db")
    flags = ["--data-dir", str(tmp_path / "flagged"), "--db", str(tmp_path / "flag.db")]
    args = [*flags, "config", "show"] if where == "before" else ["config", "show", *flags]
    result = run(*args)
    assert result.exit_code == 0, result.output
    assert line(result.output, "data_dir").endswith("# flag --data-dir")
    assert line(result.output, "db").endswith("# flag --db")
    settings = shown(*flags)
    assert settings["data_dir"] == {"value": str(tmp_path / "flagged"),
                                    "source": "flag --data-dir"}


def test_a_config_flag_names_its_file(tmp_path: Path) -> None:
    config = tmp_path / "mine.toml"
    config.write_text("port = 7000\n")
    result = run("config", "show", "--config", str(config))
    assert result.exit_code == 0, result.output
    assert line(result.output, "config_file").endswith("# flag --config")
    assert line(result.output, "port").endswith(f"# file {config}")
    assert run("--config", str(config), "config", "path").output.strip() == str(config)


def test_secrets_never_appear(config_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config_file.write_text(
        f'upstream_api_key = "{API_KEY}"\n'
        f'db = "postgresql://memd:{DB_PASSWORD}@db.example/memd"\n'
        f'helper_url = "http://helper:{URL_PASSWORD}@127.0.0.1:8080/v1"\n')
    monkeypatch.setenv("MEMD_UPSTREAM_URL", f"https://me:{URL_PASSWORD}@api.example/v1")
    for args in (["config", "show"], ["config", "show", "--json"]):
        result = run(*args)
        assert result.exit_code == 0, result.output
        for secret in (API_KEY, DB_PASSWORD, URL_PASSWORD):
            assert secret not in result.output
    settings = shown()
    assert settings["upstream_api_key"]["value"] == "***"
    assert settings["helper_api_key"]["value"] is None  # unset is not masked as set
    assert settings["upstream_url"]["value"] == "https://api.example/v1"
    assert "db.example" in settings["db"]["value"]


@pytest.mark.parametrize(("text", "says"), [
    ("port = = 1\n", "line 1"),
    ('memory_placement = "nowhere"\n', "memory_placement must be one of"),
    ('port = "eighty"\n', "port"),
    ("no_such_setting = 1\n", "unknown settings"),
])
def test_an_invalid_config_file_is_named(config_file: Path, text: str, says: str) -> None:
    config_file.write_text(text)
    result = run("config", "show")
    assert result.exit_code == 2
    assert f"config file {config_file}" in result.output
    assert says in result.output


def test_a_missing_config_named_by_flag_is_an_error(tmp_path: Path) -> None:
    result = run("config", "show", "--config", str(tmp_path / "absent.toml"))
    assert result.exit_code == 2
    assert "absent.toml does not exist" in result.output


def test_config_path_prints_where_the_file_would_be(config_file: Path) -> None:
    result = run("config", "path")
    assert result.exit_code == 0
    assert result.stdout.strip() == str(config_file)


def test_load_settings_is_load_settings_with_sources(config_file: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    config_file.write_text('preset = "seed000"\n[weights]\nsimilarity = 0.5\n')
    monkeypatch.setenv("MEMD_SANITIZE", "off")
    settings, sources = load_settings_with_sources(port=1234)
    assert settings == load_settings(port=1234)
    assert sources["port"] == "flag --port"
    assert sources["sanitize"] == "env MEMD_SANITIZE"
    assert sources["weights.similarity"] == f"file {config_file}"
    assert sources["weights.keyword"] == "default"  # a [weights] table replaces the preset
    monkeypatch.setenv("MEMD_SANITIZE", "everything")
    with pytest.raises(InvalidInput, match="environment MEMD_SANITIZE: sanitize must be"):
        load_settings()
