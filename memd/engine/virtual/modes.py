"""When context virtualization engages: the mode of a call and the caution line."""

from __future__ import annotations

from memd.config import VIRTUALIZE_MODES, Settings
from memd.errors import InvalidInput

HEADER = "X-Memd-Virtualize"


def header_mode(value: str | None) -> str | None:
    """The mode a request's ``X-Memd-Virtualize`` header asks for (None: no header)."""
    if value is None:
        return None
    mode = value.strip().lower()
    if mode not in VIRTUALIZE_MODES:
        raise InvalidInput(f"{HEADER} must be one of {', '.join(VIRTUALIZE_MODES)}, "
                           f"not {value!r}")
    return mode


def call_mode(settings: Settings, workspace: str | None, asked: str | None) -> str:
    """A call's mode: the header's, else the workspace's, else the configured one."""
    if asked is not None:
        return asked
    if workspace is not None and workspace in settings.virtualize_workspaces:
        return settings.virtualize_workspaces[workspace]
    return settings.virtualize
