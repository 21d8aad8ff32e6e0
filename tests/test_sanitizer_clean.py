"""Long texts the sanitizer found nothing in are remembered and not scanned again; the
output is the same as a fresh sanitizer's, for texts with and without secrets."""

from __future__ import annotations

from typing import Any

import pytest

from memd.privacy import Placeholders, RegexSanitizer
from tests.sanitizer_corpus import ALL, LOOKALIKES, Case

# Plain tool output around each case, long enough for the sanitizer to remember a clean
# text (the lookalikes stay clean: nothing in the filler is a secret).
FILLER = "".join(f"src/module_{i}.py:{i}: def handler_{i}(request): return None\n"
                 for i in range(60))


def _padded(case: Case) -> str:
    return f"{FILLER}{case.text}\n{FILLER}"


def _scans(sanitizer: RegexSanitizer, monkeypatch: Any) -> list[int]:
    """A list that grows by one each time ``sanitizer`` scans a text."""
    seen: list[int] = []
    scan = sanitizer._scan

    def counted(text: str, windows: list[tuple[int, int]]) -> Any:
        seen.append(len(text))
        return scan(text, windows)

    monkeypatch.setattr(sanitizer, "_scan", counted)
    return seen


@pytest.mark.parametrize("case", ALL, ids=lambda c: c.text[:40])
def test_a_second_pass_gives_what_a_fresh_sanitizer_gives(case: Case) -> None:
    text = _padded(case)
    assert len(text) > 4096
    kept = RegexSanitizer(case.mode)
    first = kept.sanitize(text, Placeholders())
    again = kept.sanitize(text, Placeholders())
    fresh = RegexSanitizer(case.mode).sanitize(text, Placeholders())
    assert first == again == fresh
    left = [s for s in case.secrets if s in again.text]
    assert not left


def test_a_clean_long_text_is_scanned_once(monkeypatch: Any) -> None:
    sanitizer = RegexSanitizer()
    seen = _scans(sanitizer, monkeypatch)
    clean = _padded(LOOKALIKES[0])
    assert sanitizer.sanitize(clean).text == clean
    assert sanitizer.sanitize(clean, Placeholders()).text == clean
    assert len(seen) == 1  # the second call found it remembered
    # a text with a secret is scanned every time: its placeholders are the session's
    secret = clean + "\nOPENAI_API_KEY=sk-proj-4fJx9QmZk2LwT7vR8bNc3HdY6uPa1sEg\n"
    for _ in range(2):
        before = len(seen)
        assert sanitizer.sanitize(secret).text != secret
        assert len(seen) > before
    # a short text is not remembered (scanning it costs less than its digest)
    for _ in range(2):
        before = len(seen)
        assert sanitizer.sanitize("a short clean text").text == "a short clean text"
        assert len(seen) == before + 1
