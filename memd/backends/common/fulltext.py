"""What a message's keyword index holds, the same on both backends."""

from __future__ import annotations

# The whole text up to this many characters, else its first and last half of it (a whole
# log as a tool result is stored whole, indexed in part; PostgreSQL's tsvector cannot hold
# more than 1 MB). sql/postgres/012 says the same.
KEYWORD_INDEX_CHARS = 65_536


def keyword_part(text: str) -> str:
    """The part of a message's text that its keyword index holds."""
    if len(text) <= KEYWORD_INDEX_CHARS:
        return text
    half = KEYWORD_INDEX_CHARS // 2
    return text[:half] + " " + text[-half:]


def rarest(words: list[str], counts: list[int], budget: int) -> list[str]:
    """The fewest-matched of ``words`` (``counts``: their matches each), as many as
    match at most ``budget`` messages together: a bounded keyword search's rare words."""
    out: list[str] = []
    held = 0
    for n, word in sorted(zip(counts, words, strict=True)):
        if held + n > budget:
            break
        out.append(word)
        held += n
    return out
