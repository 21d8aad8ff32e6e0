"""The secret and personal-data sanitizer (memd.privacy): the labelled corpus in
tests/sanitizer_corpus.py, placeholders, modes, custom patterns, and properties."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memd.errors import InvalidInput
from memd.privacy import (
    PLACEHOLDER,
    CustomPattern,
    Mode,
    Placeholders,
    RegexSanitizer,
    Sanitizer,
    parse_patterns,
)
from tests.sanitizer_corpus import ALL, ANTHROPIC, GHP, LOOKALIKES, OPENAI, PERSONAL, SECRETS, Case

SANITIZERS = {mode: RegexSanitizer(mode) for mode in ("secrets", "secrets+pii")}
PROPS = settings(max_examples=300, deadline=None)


def run(case: Case) -> str:
    return SANITIZERS[case.mode].sanitize(case.text).text


def test_corpus_size() -> None:
    assert len(SECRETS) + len(PERSONAL) >= 80
    assert len(LOOKALIKES) >= 80


@pytest.mark.parametrize("case", SECRETS + PERSONAL, ids=lambda c: c.text[:40])
def test_positive_secrets_are_gone(case: Case) -> None:
    out = run(case)
    left = [s for s in case.secrets if s in out]
    assert not left, out
    assert PLACEHOLDER.search(out)


@pytest.mark.parametrize("case", LOOKALIKES, ids=lambda c: c.text[:40])
def test_lookalikes_are_unchanged(case: Case) -> None:
    assert run(case) == case.text


def test_precision_and_recall_over_the_corpus() -> None:
    """Recall: positives with every secret gone. Precision: of the texts changed, those
    that had something to remove."""
    found = sum(1 for c in ALL if c.secrets and not any(s in run(c) for s in c.secrets))
    changed_positives = sum(1 for c in ALL if c.secrets and run(c) != c.text)
    false_alarms = sum(1 for c in ALL if not c.secrets and run(c) != c.text)
    positives = sum(1 for c in ALL if c.secrets)
    recall = found / positives
    precision = changed_positives / (changed_positives + false_alarms)
    print(f"\nsanitizer corpus: {positives} positives, {len(ALL) - positives} look-alikes; "
          f"recall {recall:.3f}, precision {precision:.3f}")
    assert recall >= 0.95
    assert precision >= 0.95


def test_result_and_findings_never_show_the_secret() -> None:
    result = RegexSanitizer().sanitize(f"key={OPENAI} password=hunter2x")
    assert OPENAI not in repr(result) and "hunter2x" not in repr(result)
    assert {f.kind for f in result.findings} == {"API_KEY", "PASSWORD"}
    assert result.counts() == {"API_KEY": 1, "PASSWORD": 1}
    assert result.changed


def test_placeholders_are_stable_within_a_session_and_distinct_across_secrets() -> None:
    session = Placeholders()
    sanitizer = RegexSanitizer()
    first = sanitizer.sanitize(f"a {OPENAI} b {GHP} c {OPENAI}", session).text
    assert first == "a [API_KEY_1] b [API_KEY_2] c [API_KEY_1]"
    second = sanitizer.sanitize(f"again {GHP}, new {ANTHROPIC}", session).text
    assert second == "again [API_KEY_2], new [API_KEY_3]"
    assert "sk-" not in repr(session) and len(session) == 3


def test_without_a_session_each_call_numbers_from_one() -> None:
    sanitizer = RegexSanitizer()
    assert sanitizer.sanitize(f"x {GHP}").text == sanitizer.sanitize(f"x {OPENAI}").text


def test_placeholders_are_bounded() -> None:
    session = Placeholders(max_entries=2)
    assert [session.get("SECRET", v) for v in "abc"] == ["[SECRET_1]", "[SECRET_2]",
                                                           "[SECRET_3]"]
    assert len(session) == 2
    assert session.get("SECRET", "c") == "[SECRET_3]"
    assert session.get("SECRET", "a") == "[SECRET_4]"  # forgotten: a new, unused number


def test_one_counter_across_kinds() -> None:
    out = RegexSanitizer("secrets+pii").sanitize(f"{GHP} from bob@example.com").text
    assert out == "[API_KEY_1] from [EMAIL_2]"


def test_url_password_keeps_user_and_host() -> None:
    out = RegexSanitizer().sanitize("postgres://app:Xk9mQ2vLp@db.internal:5432/app").text
    assert out == "postgres://app:[PASSWORD_1]@db.internal:5432/app"


def test_private_key_block_is_replaced_whole() -> None:
    text = ("before\n-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBYr9kA4sjt2Zr3Y6Xk1aQ\n"
            "-----END EC PRIVATE KEY-----\nafter")
    assert RegexSanitizer().sanitize(text).text == "before\n[PRIVATE_KEY_1]\nafter"


@pytest.mark.parametrize("case", ALL, ids=lambda c: c.text[:40])
def test_idempotent_on_the_corpus(case: Case) -> None:
    sanitizer = SANITIZERS[case.mode]
    once = sanitizer.sanitize(case.text).text
    assert sanitizer.sanitize(once).text == once


def test_modes() -> None:
    text = f"mail jane@example.com, key {OPENAI}"
    assert RegexSanitizer("off").sanitize(text).text == text
    assert RegexSanitizer().mode is Mode.SECRETS
    assert RegexSanitizer().sanitize(text).text == "mail jane@example.com, key [API_KEY_1]"
    assert RegexSanitizer("secrets+pii").sanitize(text).text == \
        "mail [EMAIL_1], key [API_KEY_2]"
    with pytest.raises(InvalidInput, match="privacy mode"):
        RegexSanitizer("paranoid")


def test_custom_patterns() -> None:
    sanitizer = RegexSanitizer(patterns=[CustomPattern("employee-id", r"EMP-\d{6}"),
                                         ("ticket", r"ticket (?P<value>T\d+)")])
    out = sanitizer.sanitize("EMP-123456 opened ticket T998 and EMP-123456 closed it").text
    assert out == "[EMPLOYEE_ID_1] opened ticket [TICKET_2] and [EMPLOYEE_ID_1] closed it"
    assert RegexSanitizer("off", [("x", "EMP")]).sanitize("EMP").text == "EMP"


def test_custom_patterns_never_match_placeholders() -> None:
    sanitizer = RegexSanitizer(patterns=[("word", r"[A-Z_]+\d*")])
    once = sanitizer.sanitize("ABC and DEF").text
    assert once == "[WORD_1] and [WORD_2]"
    assert sanitizer.sanitize(once).text == once


@pytest.mark.parametrize("pattern, message", [
    (("bad", "ab(c"), "invalid regex"),
    (("empty", "x*"), "empty string"),
    (("9lives", "x"), "name"),
])
def test_invalid_custom_patterns(pattern: tuple[str, str], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        RegexSanitizer(patterns=[pattern])


def test_parse_patterns_from_config() -> None:
    assert parse_patterns({"ticket": r"T\d+"}) == (CustomPattern("ticket", r"T\d+"),)
    assert parse_patterns([{"name": "a", "regex": "b"}]) == (CustomPattern("a", "b"),)
    with pytest.raises(InvalidInput):
        parse_patterns([{"name": "a"}])
    with pytest.raises(InvalidInput):
        parse_patterns("a=b")


def test_the_default_is_a_sanitizer() -> None:
    assert isinstance(RegexSanitizer(), Sanitizer)


def test_registered_as_an_entry_point() -> None:
    from memd import registry

    assert registry.load("memd.sanitizers", "regex") is RegexSanitizer


# Text made of the pieces secrets and their look-alikes are built from.
PIECES = st.sampled_from([
    "password", "PASSWORD", "token", "api_key", "secret", "key", " is ", "=", ": ", '"', "'",
    "\n", " ", "sk-", "ghp_", "AKIA", "eyJ", "://", "@", ":", "-----BEGIN RSA PRIVATE KEY-----",
    "-----END RSA PRIVATE KEY-----", "[SECRET_1]", "[", "]", "+1 ", "(555) ", "4111", "-",
    "DE89", "0", "7", "x", "Ab3", "hunter2", OPENAI, GHP, "bob@example.com", ".", "&", "?",
    "Bearer ", "--password ",
])
SHAPED = st.lists(st.one_of(PIECES, st.text(max_size=8)), max_size=30).map("".join)


@PROPS
@given(text=st.one_of(st.text(max_size=300), SHAPED),
       mode=st.sampled_from(["secrets", "secrets+pii"]))
def test_never_raises_and_is_idempotent(text: str, mode: str) -> None:
    sanitizer = SANITIZERS[mode]
    session = Placeholders()
    once = sanitizer.sanitize(text, session).text
    assert sanitizer.sanitize(once, session).text == once
    assert sanitizer.sanitize(once).text == once


@PROPS
@given(st.text(alphabet=st.characters(blacklist_characters="[]"), max_size=300))
def test_off_is_identity_and_text_without_findings_is_unchanged(text: str) -> None:
    assert RegexSanitizer("off").sanitize(text).text == text
    result = SANITIZERS["secrets"].sanitize(text)
    assert result.changed or result.text == text
