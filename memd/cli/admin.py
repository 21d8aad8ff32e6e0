"""Authenticated (team) mode's accounts: ``memd user``, ``key`` and ``workspace``."""

from __future__ import annotations

import json

import click

from memd.cli.common import (
    handles_errors,
    main,
    open_engine,
)


# -- accounts: authenticated (team) mode ------------------------------------------------
@main.group()
def user() -> None:
    """Users of an authenticated daemon (memd serve --auth)."""


@user.command(name="add")
@click.argument("user_id")
@click.option("--name", default="", help="A display name.")
@click.pass_context
@handles_errors
def user_add(ctx: click.Context, user_id: str, name: str) -> None:
    """Add a user; then give them a key with 'memd key create --user USER_ID'."""
    with open_engine(ctx) as m:
        m.accounts.add_user(user_id, name)
    click.echo(f"added user {user_id}")


@user.command(name="list")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@handles_errors
def user_list(ctx: click.Context, as_json: bool) -> None:
    """List the users."""
    with open_engine(ctx) as m:
        users = m.accounts.users()
    if as_json:
        click.echo(json.dumps([{"user_id": u.id, "name": u.name, "created_at": u.created_at}
                               for u in users], indent=2))
        return
    for u in users:
        click.echo(f"{u.id}\t{u.name}")


@main.group()
def key() -> None:
    """API keys of an authenticated daemon: only their SHA-256 is stored."""


@key.command(name="create")
@click.option("--user", "user_id", required=True, help="Whose key (memd user add first).")
@click.option("--label", default="", help="What the key is for, e.g. a machine.")
@click.pass_context
@handles_errors
def key_create(ctx: click.Context, user_id: str, label: str) -> None:
    """Create a key and print it once: it cannot be shown again."""
    with open_engine(ctx) as m:
        made = m.accounts.create_key(user_id, label)
    click.echo(f"key id:  {made.id}", err=True)
    click.echo("the key (shown once; use it as the OpenAI API key or 'Authorization: "
               "Bearer ...'):", err=True)
    click.echo(made.secret)


@key.command(name="list")
@click.option("--user", "user_id", help="Only this user's keys.")
@click.pass_context
@handles_errors
def key_list(ctx: click.Context, user_id: str | None) -> None:
    """List keys (ids, owners, labels, last use; never the keys themselves)."""
    with open_engine(ctx) as m:
        keys = m.accounts.keys(user_id)
    for k in keys:
        state = "revoked" if k.revoked_at else "live"
        click.echo(f"{k.id}\t{k.user_id}\t{state}\t{k.label}")


@key.command(name="revoke")
@click.argument("key_id")
@click.pass_context
@handles_errors
def key_revoke(ctx: click.Context, key_id: str) -> None:
    """Revoke a key: requests with it are refused from now on."""
    with open_engine(ctx) as m:
        m.accounts.revoke_key(key_id)
    click.echo(f"revoked {key_id}")


@main.group()
def workspace() -> None:
    """Workspace membership: a workspace's memories are shared among its members."""


@workspace.command(name="add")
@click.argument("workspace_name")
@click.argument("user_ids", nargs=-1, required=True)
@click.pass_context
@handles_errors
def workspace_add(ctx: click.Context, workspace_name: str, user_ids: tuple[str, ...]) -> None:
    """Make users members of a workspace."""
    with open_engine(ctx) as m:
        members = m.accounts.join(workspace_name, user_ids)
    click.echo(f"{workspace_name}: {', '.join(members)}")


@workspace.command(name="remove")
@click.argument("workspace_name")
@click.argument("user_ids", nargs=-1, required=True)
@click.pass_context
@handles_errors
def workspace_remove(ctx: click.Context, workspace_name: str,
                     user_ids: tuple[str, ...]) -> None:
    """Remove users from a workspace (their memories stay theirs)."""
    with open_engine(ctx) as m:
        members = m.accounts.leave(workspace_name, user_ids)
    click.echo(f"{workspace_name}: {', '.join(members) or '(no members)'}")


@workspace.command(name="members")
@click.argument("workspace_name")
@click.pass_context
@handles_errors
def workspace_members(ctx: click.Context, workspace_name: str) -> None:
    """List a workspace's members."""
    with open_engine(ctx) as m:
        for uid in m.accounts.members(workspace_name):
            click.echo(uid)
