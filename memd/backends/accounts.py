"""Users, API keys and workspace membership: the same SQL on both backends.

A part over the store's connection, the SQL swapped to its driver's placeholder. These
tables are administered by the owner (the CLI) and read by the server before it knows
who is asking, so nothing here acts as a user: under PostgreSQL's Row-Level Security
they run as the owner.
"""

from __future__ import annotations

from memd.backends.common.connection import Part
from memd.errors import Conflict, NotFound
from memd.types import ApiKey, User


class Accounts(Part):
    """Users, API keys and workspace members (memd.backends.service_roles.AccountStore)."""

    def create_user(self, user_id: str, name: str, now: float) -> User:
        if self.get_user(user_id) is not None:
            raise Conflict(f"user {user_id!r} already exists")
        self._write(self._sql("INSERT INTO users (user_id, name, created_at) VALUES (?, ?, ?)"),
                    (user_id, name, now))
        return User(user_id, name, now)

    def get_user(self, user_id: str) -> User | None:
        rows = self._rows(self._sql(
            "SELECT user_id, name, created_at FROM users WHERE user_id = ?"), (user_id,))
        return User(*rows[0]) if rows else None

    def list_users(self) -> list[User]:
        return [User(*r) for r in self._rows("SELECT user_id, name, created_at FROM users "
                                             "ORDER BY user_id")]

    def add_api_key(self, key_id: str, user_id: str, key_hash: str, label: str,
                    now: float) -> ApiKey:
        if self.get_user(user_id) is None:
            raise NotFound(f"no user {user_id!r} (add it first: memd user add {user_id})")
        self._write(self._sql(
            "INSERT INTO api_keys (key_id, user_id, key_hash, label, created_at) "
            "VALUES (?, ?, ?, ?, ?)"), (key_id, user_id, key_hash, label, now))
        return ApiKey(key_id, user_id, label, now)

    def api_key_user(self, key_hash: str, now: float) -> str | None:
        """The user of a live key with this hash (and its use recorded), else None."""
        rows = self._rows(self._sql("SELECT key_id, user_id, last_used_at FROM api_keys "
                                    "WHERE key_hash = ? AND revoked_at IS NULL"), (key_hash,))
        if not rows:
            return None
        key_id, user_id, last_used = rows[0]
        if last_used is None or last_used < now - 60.0:  # at most one write a minute per key
            self._write(self._sql("UPDATE api_keys SET last_used_at = ? WHERE key_id = ?"),
                        (now, key_id))
        return str(user_id)

    def list_api_keys(self, user_id: str | None = None) -> list[ApiKey]:
        cols = "key_id, user_id, label, created_at, last_used_at, revoked_at"
        if user_id is None:
            rows = self._rows(f"SELECT {cols} FROM api_keys ORDER BY user_id, created_at")
        else:
            rows = self._rows(self._sql(f"SELECT {cols} FROM api_keys WHERE user_id = ? "
                                        "ORDER BY created_at"), (user_id,))
        return [ApiKey(*r) for r in rows]

    def revoke_api_key(self, key_id: str, now: float) -> bool:
        return self._write(self._sql("UPDATE api_keys SET revoked_at = ? WHERE key_id = ? "
                                     "AND revoked_at IS NULL"), (now, key_id)) > 0

    def add_workspace_member(self, workspace: str, user_id: str, now: float) -> bool:
        if self.get_user(user_id) is None:
            raise NotFound(f"no user {user_id!r} (add it first: memd user add {user_id})")
        if user_id in self.workspace_members(workspace):
            return False
        self._write(self._sql("INSERT INTO workspace_members (workspace, user_id, created_at) "
                              "VALUES (?, ?, ?)"), (workspace, user_id, now))
        return True

    def remove_workspace_member(self, workspace: str, user_id: str) -> bool:
        return self._write(self._sql("DELETE FROM workspace_members WHERE workspace = ? "
                                     "AND user_id = ?"), (workspace, user_id)) > 0

    def workspace_members(self, workspace: str) -> list[str]:
        return [r[0] for r in self._rows(self._sql(
            "SELECT user_id FROM workspace_members WHERE workspace = ? ORDER BY user_id"),
            (workspace,))]
