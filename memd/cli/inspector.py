"""``memd ui``: print the web inspector's link and open it in the browser."""

from __future__ import annotations

import os

import click

from memd.cli.common import handles_errors, main, settings_for
from memd.errors import InvalidInput


def inspector_base(host: str, port: int) -> str:
    """The base URL a browser on this machine reaches a daemon listening on ``host`` at:
    a wildcard address is reached on loopback (the Host guard refuses its name)."""
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}"


@main.command()
@click.option("--no-open", is_flag=True, help="Print the link; do not open a browser.")
@click.pass_context
@handles_errors
def ui(ctx: click.Context, no_open: bool) -> None:
    """Open the web inspector of the running daemon: its calls, memories and facts,
    jobs and health. The link carries a token (in team mode: your API key, from
    MEMD_API_KEY) that the browser keeps in a cookie; anyone with the link can open it."""
    import webbrowser

    from memd.server.discovery import alive, daemon_record
    from memd.ui.token import ui_token, ui_url

    settings = settings_for(ctx)
    record = daemon_record(settings.data_dir)
    if record is None or not alive(record[0]):
        raise InvalidInput(f"no memd daemon serves {settings.data_dir}: start one with "
                           "'memd serve'")
    _, host, port = record
    if settings.auth:
        token = os.environ.get("MEMD_API_KEY")
        if not token:
            raise InvalidInput("this memd requires an API key: set MEMD_API_KEY to yours "
                               "('memd key create --user NAME' makes one)")
    else:
        token = ui_token(settings.data_dir)
    url = ui_url(inspector_base(host, port), token)
    click.echo(url)
    if not no_open:
        webbrowser.open(url)
