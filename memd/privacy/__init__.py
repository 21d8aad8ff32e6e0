"""Redaction of secrets and personal data from text before memd stores it
(``memd.privacy.sanitizer`` holds the design)."""

from memd.privacy.sanitizer import (
    PLACEHOLDER,
    CustomPattern,
    Finding,
    Mode,
    Placeholders,
    RegexSanitizer,
    Sanitized,
    Sanitizer,
    parse_patterns,
)

__all__ = [
    "PLACEHOLDER",
    "CustomPattern",
    "Finding",
    "Mode",
    "Placeholders",
    "RegexSanitizer",
    "Sanitized",
    "Sanitizer",
    "parse_patterns",
]
