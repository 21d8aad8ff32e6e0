"""Users, API keys and workspace members: what an administrator manages on the host
(``memd user``, ``memd key``, ``memd workspace``) and what the server asks of a key.

The engine part between those callers and the store's accounts role: ids are checked
here, keys are made and hashed here (only their SHA-256 is stored, see
:mod:`memd.auth`), and a missing user, key or member is a :class:`NotFound` that says
which.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from memd.auth import hash_key, key_id_of, looks_like_key, new_key
from memd.backends.base import Store
from memd.engine import validate as v
from memd.errors import NotFound
from memd.types import ApiKey, User


@dataclass(frozen=True, slots=True)
class NewKey:
    """A key as it is created: ``secret`` is shown once and never stored."""

    id: str
    user_id: str
    secret: str


class Accounts:
    def __init__(self, store: Store, clock: Callable[[], float]) -> None:
        self.store = store
        self.clock = clock

    def add_user(self, user_id: str, name: str = "") -> User:
        return self.store.create_user(v.check_id(user_id, "user_id"), name, self.clock())

    def users(self) -> list[User]:
        return self.store.list_users()

    def create_key(self, user_id: str, label: str = "") -> NewKey:
        """A new key for ``user_id`` (who must exist: ``add_user``)."""
        uid = v.check_id(user_id, "user_id")
        secret = new_key()
        digest = hash_key(secret)
        self.store.add_api_key(key_id_of(digest), uid, digest, label, self.clock())
        return NewKey(key_id_of(digest), uid, secret)

    def keys(self, user_id: str | None = None) -> list[ApiKey]:
        return self.store.list_api_keys(user_id)

    def revoke_key(self, key_id: str) -> None:
        if not self.store.revoke_api_key(key_id, self.clock()):
            raise NotFound(f"no live key {key_id!r} (see memd key list)")

    def user_of_key(self, secret: str) -> str | None:
        """The user of a live key, else None (a revoked, unknown or malformed key)."""
        if not looks_like_key(secret):
            return None
        return self.store.api_key_user(hash_key(secret), self.clock())

    def join(self, workspace: str, user_ids: Sequence[str]) -> list[str]:
        """Make users members of ``workspace``; its members after."""
        ws = v.check_id(workspace, "workspace")
        with self.store.transaction():
            for uid in user_ids:
                self.store.add_workspace_member(ws, v.check_id(uid, "user_id"), self.clock())
        return self.store.workspace_members(ws)

    def leave(self, workspace: str, user_ids: Sequence[str]) -> list[str]:
        """Remove users from ``workspace`` (all or none); its members after."""
        with self.store.transaction():
            for uid in user_ids:
                if not self.store.remove_workspace_member(workspace, uid):
                    raise NotFound(f"{uid!r} is not a member of {workspace!r}")
        return self.store.workspace_members(workspace)

    def members(self, workspace: str) -> list[str]:
        return self.store.workspace_members(workspace)

    def check_row_security(self) -> None:
        """Raise unless the store enforces what authenticated mode relies on."""
        self.store.check_row_security()
