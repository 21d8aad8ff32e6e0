"""Keys and tokens recognised by their format: provider keys, private key blocks, JWTs,
passwords in URLs, webhook URLs.

Several formats follow the plugins of Yelp's detect-secrets (Apache-2.0): AWS, Azure
storage, GitHub, GitLab, Slack, Stripe, SendGrid, Twilio, Mailchimp, Square, PyPI, npm,
Telegram and the private-key headers.

Documentation examples are not secrets: a value with a fill-in word (``sk-your-key-here``,
AWS's ``AKIAIOSFODNN7EXAMPLE``) or without a digit is left as it is (``looks_random``).
"""

from __future__ import annotations

import re

from memd.privacy.rules import (
    API_KEY,
    PASSWORD,
    PRIVATE_KEY,
    PRIVATE_KEY_PRIORITY,
    SECRET,
    TOKEN,
    Locate,
    Rule,
    Span,
    glued,
    glued_left,
    looks_random,
)


def _random_key(digit: bool = True) -> Locate:
    """A key with a known prefix: not glued to a longer word, and random after its prefix
    (the prefix is the text up to its first ``-`` or ``_`` after the second character)."""
    def locate(m: re.Match[str], text: str) -> Span | None:
        start, end = m.span()
        if glued(text, start, end):
            return None
        body = m.group()
        for sep in "-_":
            head = body.find(sep, 2)
            if 0 <= head < 12:
                body = body[head + 1:]
                break
        ok = looks_random(body, min_len=12, min_entropy=2.8, digit=digit)
        return (start, end) if ok else None

    return locate


def _exact(m: re.Match[str], text: str) -> Span | None:
    """A fixed-format value: not glued to a longer word, and not a documentation example."""
    start, end = span = m.span(m.lastindex or 0)
    if glued(text, start, end) or not looks_random(text[start:end], min_len=8,
                                                   min_entropy=2.5):
        return None
    return span


def _key(name: str, pattern: str, kind: str = API_KEY, digit: bool = True) -> Rule:
    return Rule(name, kind, re.compile(pattern, re.ASCII), _random_key(digit))


def _fixed(name: str, pattern: str, kind: str = API_KEY, flags: int = 0) -> Rule:
    return Rule(name, kind, re.compile(pattern, re.ASCII | flags), _exact)


def _whole(name: str, pattern: str, kind: str, flags: int = 0) -> Rule:
    return Rule(name, kind, re.compile(pattern, re.ASCII | flags))


def _sas_signature(m: re.Match[str], text: str) -> Span | None:
    """``sig=`` as a query parameter of a signed URL (Azure SAS)."""
    return m.span(1) if text[m.start() - 1:m.start()] in ("?", "&") else None


def _hex_before(n: int) -> Locate:
    """A suffix matched by the regex, after ``n`` hex digits that start a token."""
    def locate(m: re.Match[str], text: str) -> Span | None:
        start = m.start() - n
        if start < 0 or glued_left(text, start) \
                or any(c not in "0123456789abcdef" for c in text[start:m.start()]):
            return None
        return start, m.end()

    return locate


def _telegram(m: re.Match[str], text: str) -> Span | None:
    digits = m.start()
    while digits > 0 and text[digits - 1].isdigit():
        digits -= 1
    ok = 8 <= m.start() - digits <= 10 and not glued_left(text, digits)
    return m.span(1) if ok else None


_URL_PLACEHOLDER = re.compile(r"[$<{%*]|^(?:x+|pass(?:word|wd)?|pwd|secret|token|\.\.\.)$",
                              re.ASCII | re.IGNORECASE)


def _url_password(m: re.Match[str], text: str) -> Span | None:
    """``scheme://user:password@host``: the password, unless a variable or a fill-in."""
    value = m.group(2)
    return None if _URL_PLACEHOLDER.search(value) else m.span(2)


PROVIDER_RULES: tuple[Rule, ...] = (
    # A whole private key block, with real newlines or JSON's escaped ones (up to the
    # next BEGIN, so that many headers without an END take linear time); a block cut off
    # before its END line is replaced to the end of its base64 body.
    Rule("private-key", PRIVATE_KEY, re.compile(
        r"-----BEGIN ([A-Z0-9 ]{0,30}PRIVATE KEY(?: BLOCK)?)-----"
        r"(?:(?:(?!-----BEGIN ).){0,20000}?-----END \1-----"
        r"|(?:(?:\s|\\[nr])+[A-Za-z0-9+/=]{16,})*)",
        re.ASCII | re.DOTALL), priority=PRIVATE_KEY_PRIORITY),
    Rule("putty-private-key", PRIVATE_KEY, re.compile(
        r"Private-Lines: *\d+\r?\n(?:[A-Za-z0-9+/=]+\r?\n?)+", re.ASCII),
        priority=PRIVATE_KEY_PRIORITY),
    _key("anthropic", r"sk-ant-[A-Za-z0-9_-]{20,}"),
    # OpenAI: sk-..., sk-proj-..., sk-svcacct-..., sk-admin-...; also DeepSeek and others
    # that copied the sk- format.
    _key("openai", r"sk-[A-Za-z0-9_-]{20,}"),
    _fixed("aws-access-key-id", r"(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}"),
    # The secret access key beside its key id, as in the CSV the AWS console hands out.
    _fixed("aws-secret-access-key",
           r"(?:AKIA|ASIA)[A-Z0-9]{16}[\s,;:|\"']{1,4}([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"),
    _key("github", r"(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{30,}"),
    _key("github-fine-grained", r"github_pat_[A-Za-z0-9_]{40,}"),
    _key("gitlab", r"gl(?:pat|dt|ft|soat|rt|cbt|imt|ptt|oas|agent)-[A-Za-z0-9_-]{20,}"),
    _key("slack", r"xox[abposre]-[A-Za-z0-9-]{10,}"),
    _key("slack-app", r"xapp-\d-[A-Za-z0-9-]{20,}"),
    _whole("slack-webhook", r"https://hooks\.slack\.com/(?:services|workflows|triggers)/"
           r"[A-Za-z0-9_/-]{20,}", SECRET),
    _whole("discord-webhook", r"https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/"
           r"\d+/[A-Za-z0-9_-]{20,}", SECRET),
    _key("stripe", r"sk_(?:live|test)_[A-Za-z0-9]{20,}"),
    _key("stripe", r"rk_(?:live|test)_[A-Za-z0-9]{20,}"),
    _key("stripe-webhook", r"whsec_[A-Za-z0-9+/=]{24,}"),
    _fixed("google-api-key", r"AIza[0-9A-Za-z_-]{35}"),
    _key("google-oauth-secret", r"GOCSPX-[A-Za-z0-9_-]{20,}"),
    _key("google-oauth-token", r"ya29\.[0-9A-Za-z_-]{30,}", TOKEN),
    _key("huggingface", r"hf_[A-Za-z0-9]{30,}", digit=False),  # often letters only
    _key("npm", r"npm_[A-Za-z0-9]{36}"),
    _key("pypi", r"pypi-AgE[A-Za-z0-9_-]{50,}"),
    _fixed("azure-storage-key", r"AccountKey=([A-Za-z0-9+/]{86}==)"),
    _fixed("azure-shared-access-key", r"SharedAccessKey=([A-Za-z0-9+/]{42,44}=?)"),
    Rule("azure-sas-signature", SECRET, re.compile(r"sig=([A-Za-z0-9%+/]{30,}(?:%3D|=){0,2})",
                                                    re.ASCII), _sas_signature),
    _fixed("twilio-api-key", r"SK[0-9a-f]{32}"),
    _fixed("sendgrid", r"SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}"),
    _fixed("mailgun", r"key-[0-9a-f]{32}"),
    # [0-9a-f]{32}-us[0-9]{1,2}, found from its -us suffix (a regex that starts with a
    # character class is tried at every position)
    Rule("mailchimp", API_KEY, re.compile(r"-us[0-9]{1,2}(?![A-Za-z0-9])", re.ASCII),
         _hex_before(32)),
    _key("square", r"sq0(?:csp|atp)-[A-Za-z0-9_-]{22,}"),
    _key("shopify", r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}"),
    _key("digitalocean", r"do[opr]_v1_[a-f0-9]{64}"),
    _key("databricks", r"dapi[a-f0-9]{32}"),
    _key("groq", r"gsk_[A-Za-z0-9]{40,}"),
    _key("replicate", r"r8_[A-Za-z0-9]{30,}"),
    _key("xai", r"xai-[A-Za-z0-9]{40,}"),
    _key("perplexity", r"pplx-[A-Za-z0-9]{40,}"),
    _key("linear", r"lin_api_[A-Za-z0-9]{30,}"),
    _key("notion", r"secret_[A-Za-z0-9]{43}"),
    _key("notion", r"ntn_[A-Za-z0-9]{40,}"),
    _key("postman", r"PMAK-[a-f0-9]{24}-[a-f0-9]{34}"),
    _key("atlassian", r"ATATT3[A-Za-z0-9_=-]{50,}"),
    _key("sentry", r"sntr[ysu]s?_[A-Za-z0-9_=+/]{30,}"),
    _key("grafana", r"gl(?:sa|c)_[A-Za-z0-9_=+/-]{30,}"),
    _key("supabase", r"sbp_[a-f0-9]{40}"),
    _key("age", r"AGE-SECRET-KEY-1[0-9A-Z]{58}"),
    # a bot id of 8 to 10 digits, a colon, the secret
    Rule("telegram-bot", API_KEY, re.compile(r":(AA[0-9A-Za-z_-]{33})(?![0-9A-Za-z_-])",
                                             re.ASCII), _telegram),
    # JWT: header and payload are base64 of JSON objects, so both start with eyJ. The
    # lookbehind after the literal keeps re's fast literal search and skips the eyJ inside
    # a longer run; the possessive runs do not backtrack (no quadratic time on eyJeyJ...).
    Rule("jwt", TOKEN, re.compile(
        r"eyJ(?<![A-Za-z0-9_-]eyJ)[A-Za-z0-9_-]{8,}+\.eyJ[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]*+",
        re.ASCII),
        lambda m, text: None if glued(text, *m.span()) else m.span()),
    Rule("url-password", PASSWORD, re.compile(
        r"://([^\s:/?#@\"'<>]{0,128}):([^\s/?\"'<>]{1,256})@(?=[^\s@/?#\"'<>:]+)", re.ASCII),
        _url_password),
)
