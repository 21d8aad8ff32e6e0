"""``POST /v1/import``: import one file of a client's history (:mod:`memd.imports`).

The file travels as text in a JSON body, with the source that reads it. The whole
file is read before anything is written, and its conversations are stored in one
transaction: a file that cannot be read is a 400 saying why, and nothing of it is
stored. A workspace (the ``/w/{workspace}`` prefix or the body's) puts every
conversation of the file in it, whatever project the file names.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any

from fastapi import APIRouter, Request
from pydantic import Field

from memd.errors import InvalidInput
from memd.imports import SOURCES
from memd.server import schemas as s
from memd.server.deps import engine_of, user_of, workspace_of

router = APIRouter(responses=s.ERRORS)

SourceName = Annotated[str, s._schema(enum=sorted(SOURCES)), Field(
    description="The client whose file this is: claude-code (a session's .jsonl), "
                "chatgpt or claude-ai (an export's conversations.json), aider "
                "(.aider.chat.history.md), continue (a session's .json), cline (a task's "
                "api_conversation_history.json). opencode keeps a database: import it "
                "with `memd import-history opencode`.")]


class ImportFile(s.Strict):
    user_id: s.UserId = None
    workspace: s.Workspace = None
    source: SourceName
    name: Annotated[str, s._schema(pattern=r"^[^\x00]*$", maxLength=4096)] = Field(
        "", description="The file's name or path, as the client wrote it: some formats "
                        "key their conversations by it (a Claude Code session's file "
                        "name, a Cline task's folder).")
    content: Annotated[str, Field(description="The file's text (UTF-8).")]


@router.post("/v1/import", tags=["import"])
def import_file(request: Request, body: ImportFile) -> dict[str, Any]:
    """Import one history file: its conversations become sessions at their original
    times, learnt from as live turns are; turns imported before are skipped."""
    from memd.imports import import_conversations, source

    engine = engine_of(request)
    user = user_of(request, body.user_id)
    workspace = workspace_of(request, body.workspace)
    src = source(body.source)
    if src.parse is None:
        raise InvalidInput(f"{src.name}'s history is a database, not a file to upload: "
                           f"import it with `memd import-history {src.name}`")
    conversations = src.parse(body.content.encode("utf-8", "surrogatepass"),
                              body.name or "upload")
    if workspace is not None:
        conversations = [replace(c, workspace=workspace) for c in conversations]
    with engine.store.transaction():
        counts = import_conversations(engine, user, conversations)
    return counts.to_json()
