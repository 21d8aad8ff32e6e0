"""The background job queue: ``memd jobs`` lists pending or dead jobs and retries dead
ones, through the running daemon if there is one, else on the store directly."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import click

from memd.cli.common import daemon_call, daemon_for, handles_errors, main, open_engine


@main.command()
@click.option("--dead", is_flag=True, help="List the dead jobs (failed every attempt) "
                                           "instead of the pending ones.")
@click.option("--retry", "retry_id", metavar="ID", help="Put this dead job back in the queue.")
@click.option("--retry-all", is_flag=True, help="Put every dead job back in the queue.")
@click.option("--user", "user_id", help="Only this user's jobs (default: every job).")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
@handles_errors
def jobs(ctx: click.Context, dead: bool, retry_id: str | None, retry_all: bool,
         user_id: str | None, limit: int, as_json: bool) -> None:
    """List the background jobs (embeddings, memory ingest, access statistics) still
    pending, or with --dead those parked after failing every attempt; retry dead ones."""
    if retry_id is not None and retry_all:
        raise click.UsageError("give --retry ID or --retry-all, not both")
    out: Any
    daemon = daemon_for(ctx)
    if daemon is not None:
        params = {"user_id": user_id} if user_id else {}
        with daemon:
            if retry_id is not None:
                out = daemon_call(daemon, "POST", f"/v1/jobs/{retry_id}/retry", params=params)
            elif retry_all:
                listed = daemon_call(daemon, "GET", "/v1/jobs",
                                     params={**params, "state": "dead", "limit": 1000})
                out = {"retried": sum(
                    1 for j in listed["data"]
                    if daemon.request("POST", f"/v1/jobs/{j['id']}/retry",
                                      params=params).is_success)}
            else:
                out = daemon_call(daemon, "GET", "/v1/jobs", params={
                    **params, "state": "dead" if dead else "pending", "limit": limit})["data"]
    else:
        from memd.engine.shapes import job_json

        with open_engine(ctx) as m:
            if retry_id is not None:
                out = job_json(m.jobs.retry(retry_id, user_id))
            elif retry_all:
                out = {"retried": m.jobs.retry_all(user_id)}
            else:
                out = [job_json(q) for q in
                       m.jobs.listed("dead" if dead else "pending", user_id, limit)]
    if as_json:
        click.echo(json.dumps(out))
    elif retry_id is not None:
        click.echo(f"retried {out['id']}")
    elif retry_all:
        click.echo(f"retried {out['retried']} dead jobs")
    elif not out:
        click.echo(f"no {'dead' if dead else 'pending'} jobs")
    else:
        for j in out:
            when = datetime.fromtimestamp(j["updated_at"], UTC).strftime("%Y-%m-%d %H:%M:%S")
            click.echo(f"{j['id']}  {j['kind']:<15} {j['user_id'] or '-':<12} "
                       f"attempts {j['attempts']}  {when}  {j['last_error'] or ''}".rstrip())
