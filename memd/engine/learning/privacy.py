"""Where the engine redacts secrets: on the way in, before anything is derived.

A stored message keeps what the client sent (``content``: its owner reads it back, chain
hashes cover it) and, when the sanitizer changed something, a ``sanitized`` copy; every
derived thing reads :attr:`memd.types.Message.safe_text` (extraction, embeddings, the
full-text indexes, memory blocks, history memd builds itself). A memory's text is
sanitized before it is written. Placeholders are numbered per session
(:class:`SessionPlaceholders`), so a key said twice in a session is one placeholder.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

from memd.registry import load

if TYPE_CHECKING:
    from memd.config import Settings
    from memd.privacy import Placeholders, Sanitizer

# Sessions whose placeholder maps are kept; past that the least recently used is
# forgotten, and its values get new numbers if they come back.
MAX_SESSIONS = 1024
# Characters kept on each side of a cut when only part of a text is redacted: longer than
# any secret the sanitizer finds whole (a 4096-bit RSA private key block is ~3,300).
REDACT_MARGIN = 8_192


def make_sanitizer(settings: Settings) -> Sanitizer:
    """The registered sanitizer ``settings.sanitizer`` (entry points "memd.sanitizers"),
    in the settings' mode with their custom patterns."""
    cls = load("memd.sanitizers", settings.sanitizer)
    sanitizer: Sanitizer = cls(settings.sanitize, settings.sanitize_patterns)
    return sanitizer


class SessionPlaceholders:
    """The :class:`~memd.privacy.Placeholders` of recent sessions, by (user, session): in
    memory only, never persisted, at most ``max_sessions``. Thread-safe."""

    def __init__(self, max_sessions: int = MAX_SESSIONS) -> None:
        self._max = max_sessions
        self._maps: OrderedDict[tuple[str, str], Placeholders] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, user_id: str, session_id: str) -> Placeholders:
        from memd.privacy import Placeholders

        key = (user_id, session_id)
        with self._lock:
            found = self._maps.get(key)
            if found is None:
                found = self._maps[key] = Placeholders()
                if len(self._maps) > self._max:
                    self._maps.popitem(last=False)
            else:
                self._maps.move_to_end(key)
            return found

    def __len__(self) -> int:
        return len(self._maps)


def redacted(sanitizer: Sanitizer, text: str | None,
             placeholders: Placeholders | None = None) -> str | None:
    """``text`` with its secrets replaced, or None when the sanitizer changed nothing
    (what a message's ``sanitized`` column holds)."""
    if not text:
        return None
    out = sanitizer.sanitize(text, placeholders).text
    return None if out == text else out
