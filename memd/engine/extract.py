"""Inline, rules-based extraction of memories and facts from a user message.

It runs synchronously on every user message (docs/design.md, "Inline extraction"), so
it has no model and no I/O. It would rather miss a fact than invent one.

1. **What is read.** Fenced code (an unclosed fence hides the rest of the message), quoted
   lines (``> ...``) and indented code are skipped. The rest is cut into sentences at
   ``. ! ? ;`` and line ends, and each sentence into clauses at a comma or a conjunction
   (and, but, so, because, ...) followed by a new subject (I, my, we, our) or an order
   (always, never, don't, please, call me). A sentence ending in ``?``, a clause opening
   with an interrogative ("what", "do you", "can", "I wonder") and a clause under 3 words
   or over 300 characters yield nothing.
2. **Markers.** A clause may open with a correction ("actually", "no,", "correction:",
   "I meant"), a standing order ("from now on", "going forward"), a request to remember
   ("remember that", "keep in mind"), a hedge ("I think", "maybe") or filler ("so", "btw");
   these are peeled off and noted. A correction is also: a sentence that is only "No."
   (it marks the next one), "instead" (not "instead of"), "actually" before the value,
   "not X but Y", "I switched to X", and a second name in one message ("... call me Al").
3. **Rules.** The first rule in ``_RULES`` whose lead-in matches the start of the clause
   wins: identity ("my name is", "call me", "I'm <Name>", "I work at", "I'm a <role>",
   "I live in", "I moved to", "my pronouns are", "my timezone is"), constraints ("I'm
   allergic to", "I don't eat", "I can't", "I never", "we must"), preferences ("I prefer X
   over Y", "I'd rather", "I like", "I hate", "I use X for Y", "I switched to", "I'm on
   <OS>", "my favorite X is Y"), facts about the user's work ("I deploy with", "we use",
   "our stack is", "we are a", "we sell", "located in", "my project is") and instructions
   to the assistant ("always", "never", "don't", "stop ...ing", "from now on ...",
   "remember to").
4. **Grounding.** A fact's value is always a slice of the message: the words after the
   lead-in up to a stop word or punctuation, or, for tool/language/editor/OS/style
   preferences, the term(s) a built-in vocabulary recognises, which also name the key:
   "I prefer tabs over spaces" is ``preference/indentation = tabs``. The memory text is a
   third-person sentence that keeps the user's words ("User prefers tabs over spaces").
5. **Scores.** Confidence comes from the rule ("my name is" 1.0, "call me" 0.9, "I'm
   <Name>" 0.8, "I like" 0.8); a hedge caps it at 0.6. A correction keeps the fact's key,
   has provenance CORRECTION and importance at least 0.9; the fact store lets it replace a
   value of higher confidence.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from memd.types import Provenance, Tier

__all__ = ["CATEGORIES", "ExtractedFact", "Extraction", "extract", "extract_entities"]

CATEGORIES = ("identity", "preference", "constraint", "instruction")
MAX_CLAUSE_CHARS = 300
MIN_CLAUSE_WORDS = 3
HEDGED_CONFIDENCE = 0.6


@dataclass(frozen=True, slots=True)
class ExtractedFact:
    """A key/value fact. ``value`` is a slice of the source text."""

    category: str  # identity | preference | constraint | instruction
    key: str
    value: str
    confidence: float


@dataclass(frozen=True, slots=True)
class Extraction:
    """One memory found in a message: a standalone third-person sentence plus its scores,
    entities and, for a key/value statement, the structured fact."""

    text: str
    provenance: Provenance
    tier: Tier
    importance: float
    confidence: float
    entities: tuple[str, ...]
    fact: ExtractedFact | None
    is_correction: bool


# -- vocabulary ------------------------------------------------------------------------
# kind -> "canonical|alias|...; ...". A kind is also the fact key its terms set, except
# the _KEYLESS ones.
_VOCAB = {
    "language": "python|py|python3; javascript|js|ecmascript; typescript|ts; java; kotlin; "
    "scala; go|golang; rust; c; c++|cpp; c#|csharp; f#; ruby; php; swift; objective-c|objc; "
    "elixir; erlang; haskell; clojure; lua; perl; r; julia; dart; zig; ocaml; sql; html; "
    "css; nim; crystal; elm; matlab; fortran; cobol; groovy; solidity; assembly; gleam; "
    "webassembly|wasm; lisp; racket",
    "editor": "vscode|vs code|visual studio code; visual studio; vim; neovim|nvim; emacs; "
    "intellij|intellij idea; pycharm; webstorm; goland; clion; rider; sublime text|sublime; "
    "atom; nano; helix; zed; cursor; xcode; android studio; eclipse; jupyter|jupyterlab; "
    "notepad++",
    "os": "linux; ubuntu; debian; fedora; arch linux|arch|archlinux; nixos; "
    "macos|mac os|osx|os x; windows; wsl|wsl2; freebsd; openbsd; centos; rhel; alpine; "
    "linux mint|mint; manjaro; chromeos",
    "cloud": "aws|amazon web services; gcp|google cloud|google cloud platform; azure; "
    "digitalocean; cloudflare; hetzner; linode; ovh; scaleway",
    "deploy_tool": "docker; kubernetes|k8s; podman; helm; terraform; ansible; pulumi; nomad; "
    "heroku; vercel; netlify; fly.io|flyio; render; railway; docker compose|docker-compose; "
    "openshift; argocd|argo cd; systemd; k3s; dokku; aws lambda|lambda",
    "database": "postgresql|postgres|psql; mysql; sqlite; mongodb|mongo; redis; mariadb; "
    "cassandra; dynamodb; elasticsearch; opensearch; clickhouse; snowflake; bigquery; "
    "supabase; firebase; duckdb; neo4j; cockroachdb; sql server|mssql; pgvector; qdrant",
    "framework": "django; flask; fastapi; rails|ruby on rails; react; vue|vue.js|vuejs; "
    "angular; svelte|sveltekit; next.js|nextjs; nuxt; spring|spring boot; express|express.js; "
    "laravel; symfony; .net|dotnet; asp.net; tailwind|tailwindcss; pytorch|torch; "
    "tensorflow; jax; pandas; numpy; htmx; phoenix; actix; axum; flutter; react native; "
    "electron; streamlit",
    "runtime": "node.js|node|nodejs; deno; bun",
    "shell": "bash; zsh; fish; powershell|pwsh; nushell",
    "package_manager": "npm; yarn; pnpm; pip; pipx; poetry; uv; conda; cargo; homebrew|brew; "
    "nix; pdm",
    "vcs": "git; mercurial|hg; svn",
    "code_host": "github; gitlab; bitbucket",
    "ci": "github actions; gitlab ci; jenkins; circleci; travis ci|travis; buildkite",
    "terminal": "iterm|iterm2; tmux; alacritty; kitty; wezterm; ghostty",
    "test_framework": "pytest; jest; vitest; mocha; rspec; junit; playwright; cypress",
    "linter": "ruff; black; prettier; eslint; mypy; flake8; pylint",
    "indentation": "tabs; spaces",
    "theme": "dark mode|dark theme; light mode|light theme",
    "naming_style": "snake_case; camelcase; pascalcase; kebab-case",
    "response_style": "concise; verbose; terse; detailed; short answers|short responses; "
    "bullet points",
    "syntax": "semicolons; type hints; docstrings",
    "ai": "openai; chatgpt; claude; llama; ollama; copilot",
}
_KEYLESS = frozenset({"syntax", "ai"})
# Words that are ordinary English in lower case: tech terms only when capitalised.
_CAPITALIZED_ONLY = frozenset(
    "go rust swift dart c r ruby julia crystal elm nim racket spring express node bun atom "
    "cursor helix zed render railway arch mint kitty fish eclipse sublime nano windows rails "
    "react vue angular svelte phoenix flutter jax nix apt brew torch lambda black jest mocha "
    "cypress poetry cargo assembly electron".split()
)


def _build_terms() -> dict[str, tuple[str, str]]:
    terms: dict[str, tuple[str, str]] = {}
    for kind, spec in _VOCAB.items():
        for entry in spec.split(";"):
            names = [n.strip() for n in entry.split("|")]
            for name in names:
                terms[name] = (names[0], kind)
    return terms


_TERMS = _build_terms()  # surface form (lowercase, single-spaced) -> (canonical, kind)

# -- words -------------------------------------------------------------------------------
_IDENTITY_KEYS = frozenset(
    "name pronouns timezone location employer role project birthday username "
    "company_location native_language".split()
)
# "my <noun> is X" -> fact key
_NOUN_KEYS = {
    "editor": "editor", "ide": "editor", "text editor": "editor", "code editor": "editor",
    "os": "os", "operating system": "os", "shell": "shell", "terminal": "terminal",
    "language": "language", "programming language": "language", "database": "database",
    "db": "database", "framework": "framework", "web framework": "framework",
    "cloud": "cloud", "cloud provider": "cloud", "theme": "theme", "color scheme": "theme",
    "colour scheme": "theme", "stack": "stack", "tech stack": "stack",
    "company": "employer", "employer": "employer", "job": "role", "role": "role",
    "title": "role", "job title": "role", "position": "role", "occupation": "role",
    "timezone": "timezone", "time zone": "timezone", "pronouns": "pronouns",
    "location": "location", "city": "location", "hometown": "location",
    "birthday": "birthday", "username": "username", "handle": "username",
    "github username": "username", "github handle": "username",
    "package manager": "package_manager", "browser": "browser",
    "indentation": "indentation", "test framework": "test_framework",
    "deploy tool": "deploy_tool", "deployment tool": "deploy_tool",
    "native language": "native_language", "first language": "native_language",
    "mother tongue": "native_language",
}
_ROLE_NOUNS = frozenset(
    "developer dev engineer programmer coder designer student teacher professor manager "
    "scientist analyst architect consultant founder cofounder co-founder ceo cto cfo coo vp "
    "pm researcher writer author doctor nurse lawyer admin administrator sre devops lead "
    "intern freelancer contractor hobbyist beginner newbie maintainer contributor owner "
    "entrepreneur marketer accountant editor journalist artist musician photographer "
    "recruiter tester qa librarian physician pharmacist technician specialist director "
    "officer executive president parent mom dad retiree veteran hacker tinkerer".split()
)
_NOT_ROLES = frozenset(
    "other either neither ever never over rather after under better bigger faster number "
    "matter order power paper water answer color colour error mirror minor honor horror "
    "believer lover hater follower sucker stickler moment comment different content event "
    "current recent present decent ancient giant pleasant important constant elegant "
    "relevant distant brilliant instant silent fan".split()
)
_NOT_NAMES = frozenset(
    "not no a an the in at on from with for to of by about into and or but so very really "
    "just also here there back done fine good great ok okay sorry sure glad happy sad tired "
    "busy ready new still now currently using working trying going looking getting doing "
    "having thinking gonna kinda sorta whatever anything something later maybe irrelevant "
    "unimportant secret private hard long weird common unusual spelled pronounced actually "
    "english american british german french indian chinese japanese spanish italian "
    "canadian australian russian dutch swedish norwegian danish finnish polish brazilian "
    "mexican korean irish scottish european asian african christian muslim jewish catholic "
    "hindu buddhist atheist vegan vegetarian monday tuesday wednesday thursday friday "
    "saturday sunday january february march july september october november december i me "
    "my you he she they we it this that lol hi hey btw please thanks online offline home "
    "out off up late early free available allergic based located originally married single "
    "retired learning when if whenever anytime tomorrow today crazy lazy old paranoid "
    "instead too again".split()
)
# Words that may follow "I'm <Name>" (anything else makes it "I'm <Adjective> ...").
_NAME_FOLLOWERS = frozenset(
    "and from here btw too again now instead but by the a an who of at with in on also "
    "actually lol thanks".split()
)
_VAGUE = frozenset(
    "it it's this that these those them him her you your something anything nothing "
    "everything what which how when one".split()
)
_DETERMINERS = frozenset("a an the both either neither".split())
_REFERENCES = frozenset(
    "one ones option options former latter above previous suggestion answer idea approach "
    "solution first second third last version".split()
)
_NOT_FAVORITES = frozenset(  # "my favorite part is ...": about this chat
    "part thing bit one way line answer option example response suggestion".split()
)
_NOT_PLACES = frozenset("night nights weekends home times least work fear peace".split())
_CLAUSE_STOPS = frozenset(
    "because since but although though so btw anyway anyways thanks lol cause cuz".split()
)
_LIST_STOPS = _CLAUSE_STOPS | frozenset(
    "with at in on to for from as who which that where when while if unless not over than "
    "rather instead now too using via by currently today here there so these nowadays "
    "anymore mostly mainly usually please except".split()
)
_STRICT_STOPS = _LIST_STOPS | frozenset({"and", "or", "&"})
_ROLE_STOPS = _STRICT_STOPS | frozenset({"of", "working", "based", "living", "located"})
_MODALS = frozenset(
    "can can't cannot could couldn't will won't would wouldn't shall should shouldn't must "
    "mustn't may might".split()
)
_IRREGULAR = {"have": "has", "do": "does", "go": "goes", "be": "is", "am": "is",
              "are": "is", "don't": "doesn't", "dont": "doesn't"}
_PRONOUNS = {"i'm": "the user is", "i've": "the user has", "i'd": "the user would",
             "i'll": "the user will", "i": "the user", "me": "the user", "my": "the user's",
             "mine": "the user's", "myself": "themselves", "you": "the assistant",
             "your": "the assistant's", "yours": "the assistant's",
             "you're": "the assistant is", "yourself": "itself"}
_TEAM_MODALS = {"have to": "has to", "are not allowed to": "is not allowed to",
                "'re not allowed to": "is not allowed to", "are required to": "is required to",
                "'re required to": "is required to"}
_CAP_STOP = frozenset(
    "i i'm i've i'd i'll im ok okay hi hello hey thanks please yes no the a an my we our you "
    "it this that and but or so also actually btw fyi always never not don't dont do must "
    "should only all any every very really just now then here there what when where why how "
    "who which is are be to of in on at for with from by as if mr mrs ms dr prof".split()
)
_CUT = ",;:!?()[]{}\"“”"  # punctuation after a word that ends a short value
_CLAUSE_CUT = ";:!?()[]{}"  # ... and a clause-long one
_EDGE = " \t\"'“”‘’*_()[]-–—"  # stripped from both ends of a clause
_TITLES = frozenset("mr mrs ms dr prof".split())
_ABBREVIATIONS = frozenset("mr. mrs. ms. dr. prof. st. e.g. i.e. vs. approx. no.".split())

# -- patterns ----------------------------------------------------------------------------
# No pattern nests one unbounded repeat in another, and every one that scans a whole
# message or sentence can only start a match at a word edge, so all of them stay linear.
_A = "['’]"
_IM = rf"i(?:{_A}?m|\s+am)"
_DONT = rf"(?:don{_A}?t|do\s+not)"
_CANT = rf"(?:can{_A}?t|cannot|can\s+not)"
_ADV = (r"(?:(?P<adv>really|much|strongly|generally|usually|definitely|actually|personally|"
        r"mostly|also|still|just|honestly|totally|absolutely|now|typically|normally|mainly|"
        r"always|kinda|probably|might|may)\s+)?")
_SUBJECT = (rf"(?:i|my|we|our|please|always|never|{_DONT}|call\s+me|from\s+now\s+on|"
            r"actually|remember)\b")
_CONJ = r"(?:and|but|so|plus|also|although|though|because|since|while|whereas)"

_SENT_SPLIT = re.compile(r"(?<=[.!?;])\s+")
_CLAUSE_SPLIT = re.compile(
    rf"(?<=[\w)\"'’])(?:\s*+,\s*+(?:{_CONJ}\s++)?|\s++{_CONJ}\s++)(?={_SUBJECT})", re.I
)
_WORD = re.compile(r"\w+")
_WS_TOKEN = re.compile(r"\S+")
_TOKEN = re.compile(r"[\w#.][\w#.+'’-]*")
_NAME_WORD = re.compile(r"[^\W\d_][\w'’.-]{0,30}")
_QUESTION_START = re.compile(
    r"(?:what|who|whom|whose|where|when|why|how|which|is|are|was|were|does|did|can|could|"
    r"would|should|will|shall|may|might|am|have|has|had|whether|if|unless|suppose|imagine|"
    rf"(?:is|are|does|did|wo|would|should|could){_A}?n{_A}?t|do(?!\s+not\b))\b"
    rf"|i\s+wonder|{_IM}\s+(?:wondering|curious|not\s+sure)|i\s+was\s+wondering|not\s+sure"
    rf"|i\s+{_DONT}\s+know\b",
    re.I,
)
_LEAD = re.compile(
    rf"(?P<corr>actually|correction|i\s+meant(?:\s+to\s+say)?|to\s+clarify)\b[\s,:;.!-]*"
    rf"|(?P<corr2>no|nope|nah|wait|sorry|oops|wrong|incorrect|not\s+quite"
    rf"|that{_A}?s\s+(?:wrong|incorrect|not\s+right|not\s+true))(?:\s*[,:;.!-]+\s*|$)"
    r"|(?P<fnow>from\s+now\s+on|going\s+forward|from\s+here\s+on(?:\s+out)?|henceforth"
    r"|in\s+the\s+future)\b[\s,:;-]*"
    rf"|(?P<rem>(?:please\s+)?(?:remember|note|keep\s+in\s+mind|{_DONT}\s+forget"
    r"|never\s+forget)(?:\s+that)?)\b[\s,:;-]*"
    r"|(?P<hedge>i\s+think|i\s+guess|i\s+believe|i\s+suppose|maybe|probably|perhaps)"
    r"(?:\s+that)?\b[\s,:;-]*"
    r"|(?:so|well|also|and|but|oh|ok|okay|hey|hi|hello|btw|by\s+the\s+way|fyi|for\s+the"
    r"\s+record|just\s+so\s+you\s+know|honestly|basically|yeah|yes|sure|anyway|ps|plus|then"
    r"|hmm|um|uh|ah|one\s+more\s+thing|just)\b[\s,:;.!-]*",
    re.I,
)
_TRAILERS = (("from now on", "fnow"), ("going forward", "fnow"), ("in the future", "fnow"),
             ("from here on", "fnow"), ("instead", "corr"), ("please", ""), ("thanks", ""),
             ("thank you", ""), ("btw", ""), ("lol", ""))
_HEDGE = re.compile(
    r"\b(?:maybe|probably|perhaps|possibly|might|kinda|kind\s+of|sort\s+of|sorta|i\s+think"
    r"|i\s+guess|i\s+suppose|i\s+believe|not\s+sure)\b",
    re.I,
)
_INSTEAD = re.compile(r"\binstead\b(?!\s+of\b)", re.I)
_VALUE_LEAD = re.compile(
    r"(?:(?P<actually>actually)\s+|(?:now|really|just|still|also|currently|definitely"
    r"|totally|simply|usually|mostly)\s+)?"
    r"(?P<notbut>not\s+[^,;]{1,80}?,?\s+but\s+(?:rather\s+)?)?",
    re.I,
)
_NEGATED = re.compile(rf"(?:not|never|n{_A}t)\b", re.I)
_COMPARATOR = re.compile(
    r"\b(?:over|to|than|rather\s+than|instead\s+of|versus|vs|for|not|when|whenever|unless"
    r"|if|because|except|but)\b",
    re.I,
)
_VERSION = re.compile(r"\s?v?\d[\d.x]{0,8}")
_AT_ORG = re.compile(r"[\s,]*(?:at|for|with)\s+", re.I)
_THIRD_PERSON = re.compile(
    rf"\b(?:i{_A}m|i{_A}ve|i{_A}d|i{_A}ll|i|me|my|mine|myself|you{_A}re|yourself|yours|your|you)\b",
    re.I,
)
_YOU_SHOULD = re.compile(r"you\s+(?:should|must|will|need\s+to|have\s+to)\s+", re.I)


@dataclass(frozen=True, slots=True)
class _Rule:
    """A lead-in anchored at the start of a clause and what to make of the words after it.

    ``key``: a fact key, ``"*"`` for the key of the vocabulary term in the value, ``"@noun"``
    for the key named by the ``noun`` group, None for a memory with no fact. ``read``: how
    the value is read (see ``_read_value``). A ``v`` group in the regex is the value itself.
    ``need``: the rule applies only when the value holds a term of this vocabulary kind
    (``"*"``: of any kind that names a key).
    """

    kind: str  # identity | preference | constraint | instruction | fact | auto
    regex: re.Pattern[str]
    template: str
    key: str | None = None
    confidence: float = 0.9
    read: str = "phrase"
    category: str = ""
    need: str | None = None
    block: frozenset[str] = frozenset()
    importance: float | None = None
    corrects: bool = False  # the statement replaces an older value ("I switched to")


def _r(kind: str, pattern: str, template: str, *, key: str | None = None,
       confidence: float = 0.9, read: str = "phrase", category: str = "",
       need: str | None = None, block: str = "", importance: float | None = None,
       corrects: bool = False) -> _Rule:
    return _Rule(kind, re.compile(pattern, re.I), template, key, confidence, read, category,
                 need, frozenset(block.split()), importance, corrects)


_FREQ = r"(?:(?:currently|now|usually|always|mostly|typically|also)\s+)?"
_RULES: tuple[_Rule, ...] = (
    # -- identity
    _r("identity", rf"my\s+(?:(?:full|first|real|actual|preferred)\s+)?name(?:{_A}s|\s+is)\s+",
       "User's name is {v}", key="name", confidence=1.0, read="loose_name"),
    _r("identity", r"(?:(?:you\s+can|you\s+may|please|just|everyone|people|friends)\s+)?"
       r"call\s+me\s+", "User wants to be called {v}", key="name", read="name"),
    _r("identity", rf"(?:i\s+go\s+by|{_IM}\s+(?:called|named))\s+", "User goes by {v}",
       key="name", read="name"),
    _r("identity", r"my\s+pronouns\s+are\s+", "User's pronouns are {v}", key="pronouns",
       confidence=1.0, read="short"),
    _r("identity", r"i\s+use\s+(?P<v>[a-z]{2,5}/[a-z]{2,5}(?:/[a-z]{2,5})?)\s+pronouns\b",
       "User's pronouns are {v}", key="pronouns", confidence=1.0),
    _r("identity", r"my\s+(?:time\s*zone|tz)\s+is\s+", "User's timezone is {v}",
       key="timezone", confidence=1.0, read="short"),
    _r("identity", rf"{_IM}\s+(?:in|on)\s+(?:the\s+)?(?P<v>[\w/+:-]{{2,30}}"
       r"(?:\s+[\w/+:-]{2,20})?)\s+(?:time\s*zone|time)\b", "User's timezone is {v}",
       key="timezone"),
    _r("identity", rf"{_IM}\s+in\s+(?P<v>(?-i:(?:UTC|GMT)(?:\s?[+-]\s?\d{{1,2}}(?::\d\d)?)?"
       r"|[A-Z]{2,4}T))\b", "User's timezone is {v}", key="timezone"),
    _r("identity", rf"i\s+{_FREQ}live\s+in\s+", "User lives in {v}", key="location"),
    _r("identity", rf"{_IM}\s+{_FREQ}(?:based|located|living)\s+(?:in|out\s+of)\s+",
       "User is based in {v}", key="location"),
    _r("identity", rf"{_IM}\s+(?:originally\s+)?from\s+", "User is from {v}", key="location",
       confidence=0.8),
    _r("identity", rf"i\s+{_FREQ}work\s+(?P<p>at|for)\s+", "User works {p} {v}", key="employer"),
    _r("identity", rf"{_IM}\s+{_FREQ}(?:employed|working)\s+(?:at|by|for)\s+",
       "User works at {v}", key="employer", confidence=0.85),
    _r("identity", r"i\s+work\s+as\s+(?P<art>an?)\s+", "User works as {art} {v}", key="role",
       read="role"),
    # -- constraints that are facts
    _r("constraint", rf"{_IM}\s+(?:(?:very|severely|deathly|highly)\s+)?allergic\s+to\s+",
       "User is allergic to {v}", key="allergy", confidence=1.0, read="list",
       category="constraint", importance=0.95),
    _r("constraint", r"i\s+have\s+(?:an?\s+)?(?P<v>[\w-]{2,30})\s+allergy\b",
       "User has a {v} allergy", key="allergy", confidence=1.0, category="constraint",
       importance=0.95),
    _r("constraint", rf"{_IM}\s+(?:an?\s+)?(?:strict\s+)?(?P<v>vegetarian|vegan|pescatarian"
       r"|lactose[\s-]intolerant|gluten[\s-]free|celiac|coeliac|diabetic|kosher|halal)\b",
       "User is {v}", key="diet", confidence=0.95, category="constraint"),
    _r("constraint", rf"i\s+(?:{_DONT}|{_CANT})\s+(?P<verb>eat|drink)\s+",
       "User doesn't {verb} {v}", key="diet", read="list", category="constraint"),
    # -- preferences (and the instructions phrased as one)
    _r("instruction", rf"i(?:{_A}d|\s+would)?\s+(?:really\s+)?(?:like|want|need|prefer)\s+"
       r"(?:you|the\s+assistant|the\s+ai)\s+to\s+", "User wants the assistant to {v}",
       read="clause"),
    _r("preference", rf"{_IM}\s+(?:an?\s+)?(?:(?:big|huge|massive|great)\s+)?fan\s+of\s+",
       "User is a fan of {v}", key="*", confidence=0.8, read="clause"),
    _r("identity", rf"{_IM}\s+(?:(?:currently|now|also)\s+)?(?P<art>an?)\s+", "User is {art} {v}",
       key="role", read="role"),
    _r("identity", rf"{_IM}\s+", "User's name is {v}", key="name", confidence=0.8,
       read="proper_name"),
    _r("preference", rf"i(?:{_A}d|\s+would)?\s+{_ADV}prefer\s+", "User prefers {v}",
       key="*", read="clause"),
    _r("preference", rf"i(?:{_A}d|\s+would)\s+{_ADV}rather\s+", "User would rather {v}",
       key="*", confidence=0.8, read="clause"),
    _r("preference", rf"i\s+{_ADV}(?P<verb>like|love|enjoy|adore)\s+", "User {verb3} {v}",
       key="*", confidence=0.8, read="clause"),
    _r("preference", rf"i\s+{_ADV}{_DONT}\s+(?:really\s+|much\s+)?(?P<verb>like|love|enjoy"
       r"|want|use|care\s+(?:for|about))\s+", "User doesn't {verb} {v}", confidence=0.8,
       read="clause"),
    _r("preference", rf"i\s+{_ADV}(?P<verb>hate|dislike|detest|loathe|despise|can{_A}?t\s+stand"
       r"|cannot\s+stand)\s+", "User {verb3} {v}", confidence=0.8, read="clause",
       block="to"),
    _r("preference", rf"i\s+{_ADV}want\s+(?=(?:\w+\s+)?(?:\w+\s+)?(?:answers|responses|replies"
       r"|explanations|code|comments|examples|output|summaries|posts|tests|commits|messages)\b)",
       "User wants {v}", key="*", confidence=0.8, read="clause"),
    _r("preference", rf"{_IM}\s+(?:(?:currently|now|mostly)\s+)?(?P<verb>on|running)\s+",
       "User is {verb} {v}", key="*", confidence=0.85, read="clause", need="os"),
    _r("preference", rf"i\s+{_FREQ}run\s+", "User runs {v}", key="*", confidence=0.85,
       read="clause", need="os"),
    _r("preference", rf"{_IM}\s+(?:(?:currently|now|mostly)\s+)?using\s+", "User is using {v}",
       key="*", confidence=0.8, read="clause"),
    _r("preference", r"i\s+(?:(?:mostly|mainly|primarily|usually)\s+)?(?:(?:code|program"
       r"|write\s+code|develop|work)\s+(?:(?:mostly|mainly|primarily|exclusively)\s+)?in"
       r"|write(?:\s+in)?)\s+", "User writes code in {v}", key="*", confidence=0.85,
       read="clause", need="language"),
    _r("preference", rf"i(?:{_A}ve|\s+have)?\s+(?:just\s+|recently\s+|finally\s+)?(?:switched"
       r"|moved|migrated|changed)\s+(?:over\s+)?(?:from\s+[^,;]{1,40}?\s+)?to\s+",
       "User switched to {v}", key="*", read="clause", need="*", corrects=True),
    _r("identity", rf"i(?:{_A}ve|\s+have)?\s+(?:just\s+|recently\s+)?(?:moved|relocated)"
       r"\s+to\s+(?=(?-i:[A-Z]))", "User moved to {v}", key="location", confidence=0.85,
       corrects=True),
    _r("preference", rf"i(?:{_A}ve|\s+have)\s+been\s+using\s+", "User has been using {v}",
       key="*", confidence=0.8, read="clause"),
    _r("preference", r"i\s+(?:(?P<adv>always|usually|mostly|mainly|generally|typically|normally"
       r"|also|still|now|only|just|currently|primarily|exclusively)\s+)?use\s+",
       "User {adv} uses {v}", key="*", confidence=0.85, read="clause"),
    _r("preference", r"i\s+(?P<adv>always|usually|typically|normally|generally)\s+",
       "User {adv} {v3}", key="*", confidence=0.8, read="clause",
       block="forget get have seem end run make mess struggle wonder find thought wanted"),
    _r("fact", r"(?:our|my)\s+(?:tech\s+)?stack\s+(?:is|includes|consists\s+of)\s+",
       "User's stack is {v}", key="stack", read="clause"),
    _r("fact", r"(?:my|our)\s+(?:current\s+|main\s+|side\s+)?(?:project|app|product|startup)"
       rf"(?:(?:{_A}s|\s+is)\s+(?:called|named)|(?:{_A}s|\s+)\s*name\s+is)\s+",
       "User's project is {v}", key="project", read="clause"),
    _r("fact", r"(?:my|our)\s+(?:current\s+|main\s+|side\s+)?project\s+is\s+"
       r"(?=(?-i:[A-Z])|[\w.-]+(?:[,;.!]|\s*$))", "User's project is {v}", key="project"),
    _r("auto", r"my\s+(?P<fav>(?:favou?rite|preferred|go-to|main|primary|default)\s+)?"
       r"(?P<noun>[a-z][a-z -]{1,30}?)\s+(?:of\s+choice\s+)?(?:is|are)\s+",
       "User's {fav} {noun} is {v}", key="@noun", confidence=0.95, read="list"),
    # -- facts about the user's work
    _r("fact", r"(?P<who>i|we)\s+(?:(?:usually|always|mostly|typically|currently|now)\s+)?"
       r"deploy\s+(?:(?:everything|it|things|stuff|apps|services|code|(?:my|our)\s+\w+)\s+)?"
       r"(?P<p>with|on|to|using|via|through|onto)\s+", "{who} deploys {p} {v}",
       key="deploy_tool", read="list"),
    _r("fact", rf"we(?:{_A}re|\s+are)?\s+(?:(?:also|mostly|mainly|currently|now|primarily)\s+)?"
       r"(?:use|using)\s+", "User's team uses {v}", key="*", confidence=0.85, read="clause"),
    _r("fact", rf"(?:(?:we(?:{_A}re|\s+are)|our\s+(?:company|team|office|business|startup|hq)"
       r"\s+is)\s+)?(?:currently\s+)?(?:based|located|headquartered)\s+in\s+",
       "User's company is based in {v}", key="company_location", confidence=0.8),
    _r("fact", rf"we(?:{_A}re|\s+are)\s+(?P<art>an?|the)\s+", "User's team is {art} {v}",
       confidence=0.8, read="clause", block="bit little lot"),
    _r("fact", r"our\s+(?P<noun>business|company|startup|product|app|agency|team|shop|store"
       r"|service|organi[sz]ation|org)\s+(?P<verb>is|sells|makes|builds|provides|offers|does"
       r"|helps|focuses\s+on)\s+", "User's {noun} {verb} {v}", confidence=0.8, read="clause"),
    _r("fact", r"we\s+(?P<verb>sell|make|build|develop|provide|offer|run|maintain|ship)\s+",
       "User's team {verb3} {v}", confidence=0.75, read="clause", block="sure"),
    _r("fact", r"i\s+work\s+on\s+", "User works on {v}", key="*", confidence=0.8, read="clause"),
    # -- constraints
    _r("constraint", rf"i\s+(?:(?:really|just|simply|absolutely)\s+)?{_CANT}\s+",
       "User can't {v}", confidence=0.85, read="clause",
       block="figure get find understand seem believe see wait remember reproduce tell think "
       "imagine decide recall help stop access login log open load connect install run build "
       "compile make import reach push pull fix debug read hear say agree explain do be"),
    _r("constraint", rf"i\s+(?:must\s+not|mustn{_A}?t|should\s+not|shouldn{_A}?t)\s+",
       "User must not {v}", confidence=0.85, read="clause"),
    _r("constraint", rf"{_IM}\s+not\s+(?:allowed|permitted)\s+to\s+",
       "User is not allowed to {v}", read="clause"),
    _r("constraint", r"i\s+never\s+", "User never {v3}", confidence=0.8, read="clause",
       block="know knew thought said understood get got really liked used had was did could "
       "would heard saw tried"),
    _r("constraint", rf"we\s+(?P<modal>must\s+not|mustn{_A}?t|must|have\s+to|{_CANT}"
       rf"|(?:are|{_A}re)\s+not\s+allowed\s+to|(?:are|{_A}re)\s+required\s+to)\s+",
       "User's team {modal} {v}", confidence=0.85, read="clause"),
    # -- instructions to the assistant
    _r("instruction", r"(?:please[\s,]+)?(?:you\s+(?:should|must|need\s+to|have\s+to|will)\s+)?"
       r"(?P<adv>always|never)\s+", "User wants the assistant to {adv} {v}", read="clause",
       block="mind happy glad nice good great fun a an the seen been done had heard thought "
       "gone known got gotten made used tried said told wanted liked needed"),
    _r("instruction", rf"(?:please[\s,]+)?{_DONT}\s+(?:ever\s+)?",
       "User doesn't want the assistant to {v}", read="clause",
       block="worry bother mind panic know think understand get care see remember"),
    _r("instruction", r"(?:please[\s,]+)?stop\s+(?=\w+ing\b)",
       "User wants the assistant to stop {v}", confidence=0.85, read="clause"),
)

_KINDS = {  # kind -> provenance, tier, default importance
    "identity": (Provenance.USER_STATED, Tier.SEMANTIC, 0.9),
    "preference": (Provenance.PREFERENCE, Tier.PROCEDURAL, 0.7),
    "constraint": (Provenance.USER_STATED, Tier.PROCEDURAL, 0.85),
    "instruction": (Provenance.INSTRUCTION, Tier.PROCEDURAL, 0.9),
    "fact": (Provenance.FACT, Tier.SEMANTIC, 0.75),
    "note": (Provenance.USER_STATED, Tier.SEMANTIC, 0.9),
}


@dataclass(frozen=True, slots=True)
class _Hit:
    kind: str
    text: str
    confidence: float
    key: str | None = None
    value: str = ""
    category: str = ""
    corrected: bool = False
    importance: float | None = None


@dataclass(frozen=True, slots=True)
class _Markers:
    correction: bool = False
    from_now_on: bool = False
    remember: bool = False
    hedged: bool = False

    def merged(self, other: _Markers) -> _Markers:
        return _Markers(self.correction or other.correction,
                        self.from_now_on or other.from_now_on,
                        self.remember or other.remember, self.hedged or other.hedged)


# -- public API --------------------------------------------------------------------------
def extract(text: str) -> list[Extraction]:
    """The memories and facts stated in one user message, in order of appearance.

    Pure and deterministic; never raises on any string. Questions, code and small talk
    give ``[]``."""
    out: list[Extraction] = []
    seen: set[tuple[str, ExtractedFact | None]] = set()
    named = False  # a name was already given: another one corrects it
    carry = _Markers()  # markers said on their own ("No." or "Actually, ...")
    for line in _prose_lines(text):
        for sentence in _sentences(line):
            if _is_question(sentence):
                carry = _Markers()
                continue
            for clause in _CLAUSE_SPLIT.split(sentence):
                clause = clause.strip(_EDGE)
                body, marks = _strip_markers(clause)
                if not body:
                    carry = carry.merged(marks)
                    continue
                marks, carry = marks.merged(carry), _Markers()
                for hit in _clause_hits(clause, body, marks):
                    renamed = named and hit.key == "name"
                    named = named or hit.key == "name"
                    ex = _finish(hit, marks, clause, renamed)
                    if (ex.text, ex.fact) not in seen:
                        seen.add((ex.text, ex.fact))
                        out.append(ex)
    return out


def extract_entities(text: str) -> tuple[str, ...]:
    """Lowercase entity names in ``text`` (outside code): known tech terms (canonical:
    "k8s" is "kubernetes"), runs of capitalised words ("new york") and hashtags; sorted."""
    names = {term.name for line in _prose_lines(text) for term in _scan(line)}
    return tuple(sorted(names))


# -- splitting ---------------------------------------------------------------------------
def _prose_lines(text: str) -> Iterator[str]:
    """The lines of ``text`` outside fenced and indented code and quotes."""
    for i, part in enumerate(text.split("```")):
        if i % 2:  # inside a fence; an unclosed one runs to the end
            continue
        for line in part.splitlines():
            if line.startswith(("    ", "\t")) or line.lstrip().startswith(">"):
                continue
            if line.strip():
                yield line


def _sentences(line: str) -> Iterator[str]:
    """Slices of ``line`` cut after ``. ! ? ;`` (not after "Dr." or "e.g.")."""
    start = 0
    for m in _SENT_SPLIT.finditer(line):
        words = line[start:m.start()].rsplit(None, 1)
        if words and words[-1].lower() in _ABBREVIATIONS:
            continue
        if line[start:m.start()].strip():
            yield line[start:m.start()].strip()
        start = m.end()
    if line[start:].strip():
        yield line[start:].strip()


def _is_question(sentence: str) -> bool:
    return sentence.rstrip(" \t\"'”’)]*_~!.").endswith("?")


def _strip_markers(clause: str) -> tuple[str, _Markers]:
    """The clause without its opening and closing markers, and what they said."""
    corr = fnow = rem = hedge = False
    body = clause
    for _ in range(6):
        m = _LEAD.match(body)
        if m is None or m.end() == 0:
            break
        corr |= bool(m.group("corr") or m.group("corr2"))
        fnow |= bool(m.group("fnow"))
        rem |= bool(m.group("rem"))
        hedge |= bool(m.group("hedge"))
        body = body[m.end():]
    for _ in range(3):
        body = body.rstrip(" \t,;:.!-")
        low = body[-14:].lower()
        for tail, mark in _TRAILERS:
            cut = len(body) - len(tail)
            if low.endswith(tail) and (cut == 0 or not body[cut - 1].isalnum()):
                body = body[:cut]
                corr |= mark == "corr"
                fnow |= mark == "fnow"
                break
        else:
            break
    body = body.strip()
    corr |= fnow or bool(_INSTEAD.search(body))
    hedge |= bool(_HEDGE.search(body))
    return body, _Markers(corr, fnow, rem, hedge)


# -- one clause --------------------------------------------------------------------------
def _clause_hits(clause: str, body: str, marks: _Markers) -> list[_Hit]:
    if len(clause) > MAX_CLAUSE_CHARS or len(_WORD.findall(clause)) < MIN_CLAUSE_WORDS:
        return []
    if _QUESTION_START.match(body):
        return []
    for rule in _RULES:
        m = rule.regex.match(body)
        if m is not None:
            hits = _apply(rule, body, m)
            if hits:
                return hits
    fallback = _fallback(body, marks)
    return [fallback] if fallback else []


def _fallback(body: str, marks: _Markers) -> _Hit | None:
    """A standing order or a request to remember that no rule understood."""
    if not (marks.from_now_on or marks.remember):
        return None
    you = _YOU_SHOULD.match(body)
    if you is not None:
        body = body[you.end():]
    if marks.remember and body[:3].lower() == "to ":
        value, _ = _read(body[3:], _CLAUSE_STOPS, 25, _CLAUSE_CUT)
        return _Hit("instruction", f"User wants the assistant to {_order(value)}", 0.9)
    value, _ = _read(body, _CLAUSE_STOPS, 25, _CLAUSE_CUT)
    words = _WORD.findall(value)
    if not words:
        return None
    if marks.remember:
        return _Hit("note", f"User asked to remember that {_third_person(value)}", 0.9)
    if words[0].lower() in ("i", "my", "we", "our", "it", "that", "this"):
        return None  # "from now on I'll ...": not an order to the assistant
    return _Hit("instruction", f"User wants the assistant to {_order(value)} from now on",
                0.9)


def _apply(rule: _Rule, body: str, m: re.Match[str]) -> list[_Hit]:
    """What ``rule`` makes of ``body`` given its lead-in match ``m``; [] if it does not fit."""
    value, after, corrected, negated = _value_of(rule, body, m)
    if not _fits(rule, value, after, negated):
        return []
    groups = {k: " ".join(g.split()).lower() for k, g in m.groupdict().items() if g and k != "v"}
    keyed = _fact_of(rule, value, groups.get("noun", ""), bool(groups.get("fav")), negated,
                     lower=not any(c.isupper() for c in body))
    if keyed is None:
        return []
    key, fact_value = keyed
    category = rule.category or ("identity" if key in _IDENTITY_KEYS else "preference")
    kind = rule.kind if rule.kind != "auto" else (
        "identity" if category == "identity" else "preference")
    shown = _order(value) if rule.kind == "instruction" else _third_person(value)
    modal = groups.get("modal", "").replace("’", "'")
    fields = {**groups, "adv": groups.get("adv", ""), "fav": groups.get("fav", ""),
              "verb3": _third_verb(groups.get("verb", "")),
              "who": "User's team" if groups.get("who") == "we" else "User",
              "modal": _TEAM_MODALS.get(modal, modal), "v": shown, "v3": _third_verb(shown)}
    text = rule.template.format_map(fields)
    hits = [_Hit(kind, text, rule.confidence, key, fact_value, category,
                 corrected or rule.corrects, rule.importance)]
    at = _AT_ORG.match(after) if rule.read == "role" else None
    if at is not None:  # "I'm a developer at Acme"
        org, _ = _read(after[at.end():], _STRICT_STOPS, 5, _CUT)
        if org[:1].isupper() and not _is_tech(org):
            hits.append(_Hit("identity", f"User works at {org}", 0.8, "employer", org,
                             "identity", corrected))
    return hits


def _value_of(rule: _Rule, body: str, m: re.Match[str]) -> tuple[str, str, bool, bool]:
    """The value after the lead-in, the text after the value, whether the value corrects
    ("actually X", "not X but Y") and whether it is negated ("not X")."""
    if m.groupdict().get("v"):
        return m.group("v"), body[m.end():], False, False
    rest = body[m.end():]
    corrected = False
    lead = _VALUE_LEAD.match(rest)
    if lead is not None:
        corrected = bool(lead.group("actually") or lead.group("notbut"))
        rest = rest[lead.end():]
    negated = bool(_NEGATED.match(rest))
    if negated and rule.read != "clause":  # "my name is not ..."
        return "", "", False, True
    value, end = _read_value(rule.read, rest, not any(c.isupper() for c in body))
    return value, rest[end:], corrected, negated


def _fits(rule: _Rule, value: str, after: str, negated: bool) -> bool:
    words = [w.lower() for w in _WORD.findall(value)]
    if not words or words[0] in rule.block or (negated and len(words) < 2):
        return False
    if rule.kind in ("preference", "fact", "auto") and words[0] in _VAGUE:
        return False  # "I like it", "I use this"
    if rule.kind == "preference" and words[0] in _DETERMINERS and _REFERENCES & set(words):
        return False  # "I prefer the second option": about this chat, not the user
    if rule.read == "proper_name" or (rule.read.endswith("name") and value[:1].islower()):
        return _follows_name(after)
    return True


def _fact_of(rule: _Rule, value: str, noun: str, favorite: bool, negated: bool, *,
             lower: bool) -> tuple[str | None, str] | None:
    """The fact key and value of a match, (None, "") for a memory with no fact, or None
    when the rule does not apply after all."""
    key = rule.key
    if negated:
        return (None, "") if key in (None, "*") and rule.need is None else None
    if key == "*":
        keyed = _keyed(value)
        if rule.need is not None and (keyed is None or rule.need not in ("*", keyed[0])):
            return None
        return keyed or (None, "")
    if key == "@noun":
        key = None if noun in _NOT_FAVORITES else _noun_key(noun, favorite)
        if key is None or (key in _VOCAB and not value[:1].isupper()
                           and all(t.kind != key for t in _scan(value))):
            return None  # "my editor is broken"
    if key is not None and not _plausible(key, value, lower):
        return None
    return key, value


def _finish(hit: _Hit, marks: _Markers, clause: str, renamed: bool) -> Extraction:
    provenance, tier, importance = _KINDS[hit.kind]
    if hit.importance is not None:
        importance = hit.importance
    confidence = hit.confidence
    is_correction = renamed or hit.corrected or marks.correction
    if is_correction:
        provenance = Provenance.CORRECTION
        importance = max(importance, 0.9)
    if marks.remember:
        importance = min(1.0, importance + 0.1)
    if marks.hedged:
        confidence = min(confidence, HEDGED_CONFIDENCE)
    fact = None
    if hit.key is not None and hit.value:
        fact = ExtractedFact(hit.category, hit.key, hit.value, confidence)
    text = " ".join(hit.text.split())
    return Extraction(text, provenance, tier, round(importance, 3), confidence,
                      _entities(clause), fact, is_correction)


# -- reading values ----------------------------------------------------------------------
def _read_value(mode: str, rest: str, lower: bool) -> tuple[str, int]:
    """The value at the head of ``rest`` and where it ends."""
    if mode == "loose_name":
        return _read_name(rest, lowercase_ok=True)
    if mode == "name":
        return _read_name(rest, lowercase_ok=lower)
    if mode == "proper_name":
        return _read_name(rest, lowercase_ok=False)
    if mode == "clause":
        return _read(rest, _CLAUSE_STOPS, 25, _CLAUSE_CUT)
    if mode == "role":
        value, end = _read(rest, _ROLE_STOPS, 6, _CUT)
        return (value, end) if _is_role(value) else ("", 0)
    stops, most = {"short": (_LIST_STOPS, 4), "list": (_LIST_STOPS, 8)}.get(
        mode, (_STRICT_STOPS, 6))
    return _read(rest, stops, most, _CUT)


def _read(s: str, stops: frozenset[str], most: int, cut: str) -> tuple[str, int]:
    """Words at the head of ``s`` up to a stop word (not the first), a word followed by
    one of ``cut`` (included) or ``most`` words: the slice of ``s`` and its end."""
    start = end = 0
    for i, m in enumerate(_WS_TOKEN.finditer(s)):
        token = m.group()
        body = token.lstrip("\"'“‘([")
        word = body.rstrip(".,;:!?)]}\"'”’")
        if not word.strip("-–—") or (i and word.lower() in stops):
            break
        offset = m.start() + len(token) - len(body)
        if i == 0:
            start = offset
        end = offset + len(word)
        if i + 1 >= most or any(c in cut for c in body[len(word):]):
            break
    return s[start:end], end


def _read_name(s: str, *, lowercase_ok: bool) -> tuple[str, int]:
    """One to three name-like words: capitalised, or a lowercase first one if allowed."""
    start = end = 0
    for i, m in enumerate(_WS_TOKEN.finditer(s)):
        token = m.group()
        word = token.rstrip(".,;:!?)\"'”’")
        ok = bool(_NAME_WORD.fullmatch(word)) and word.lower() not in _NOT_NAMES
        ok = ok and not _is_tech(word)
        if ok and not word[0].isupper():
            ok = i == 0 and lowercase_ok
        if ok and len(word) > 1 and word.isupper() and not lowercase_ok:
            ok = False  # "I'M TIRED"
        if not ok:
            break
        if i == 0:
            start = m.start()
        end = m.start() + len(word)
        if i == 2 or (len(word) < len(token) and word.lower() not in _TITLES):
            break
    return ("", 0) if s[start:end].lower() in _TITLES else (s[start:end], end)


def _follows_name(after: str) -> bool:
    """Whether the words after "I'm <Name>" leave it a name ("I'm Alex from ...")."""
    after = after.lstrip(" \t")
    if not after or not after[0].isalnum():
        return True
    first = after.split(None, 1)[0].lower()
    return first in _NAME_FOLLOWERS


def _is_role(value: str) -> bool:
    words = value.lower().split()
    if not words:
        return False
    last = words[-1]
    if last in _ROLE_NOUNS:
        return True
    return (len(last) >= 5 and last not in _NOT_ROLES and last.isalpha()
            and last.endswith(("er", "or", "ist", "ian", "ant", "ent")))


def _plausible(key: str, value: str, lower: bool) -> bool:
    first = value.split(None, 1)[0].lower()
    if key == "timezone":
        return any(c.isupper() or c.isdigit() or c == "/" for c in value)
    if key == "role":
        return _is_role(value)
    if key in ("employer", "location", "company_location"):  # not "I work at night"
        return (value[:1].isupper() or first in _DETERMINERS
                or (lower and first not in _NOT_NAMES and first not in _NOT_PLACES))
    if key == "stack":
        return bool(_scan(value))
    return True


def _keyed(value: str) -> tuple[str, str] | None:
    """The fact key and value named by the vocabulary terms at the head of ``value``
    (before "over", "for", "than", ...): "Python and Go for scripts" is language."""
    first = _WORD.search(value)
    if first is None:
        return None
    cmp = _COMPARATOR.search(value, first.end())
    head = value[: cmp.start()] if cmp else value
    terms = [t for t in _scan(head) if t.kind]
    if not terms or terms[0].kind in _KEYLESS:
        return None
    kind, start, end = terms[0].kind, terms[0].start, terms[0].end
    for t in terms[1:]:  # "Python, Go and Rust"
        if t.kind != kind or head[end:t.start].strip(" ,/&").lower() not in ("", "and", "or"):
            break
        end = t.end
    version = _VERSION.match(head, end)
    if version is not None:
        end = version.end() - (len(version.group()) - len(version.group().rstrip(".")))
    before = head[:start].rstrip()
    number = before.rsplit(None, 1)[-1] if before else ""
    if number.isdigit():  # "2 spaces"
        start = len(before) - len(number)
    return kind, head[start:end]


def _noun_key(noun: str, favorite: bool) -> str | None:
    key = _NOUN_KEYS.get(noun)
    if key is not None or not favorite:
        return key
    slug = "_".join("".join(c for c in w if c.isalnum()) for w in noun.split())
    return f"favorite_{slug}" if slug.strip("_") else None


# -- wording -----------------------------------------------------------------------------
def _third_person(text: str) -> str:
    """The user's words as a third party's: "reply to me" -> "reply to the user"."""
    return _THIRD_PERSON.sub(
        lambda m: _PRONOUNS.get(m.group().lower().replace("’", "'"), m.group()), text)


def _order(text: str) -> str:
    """An order in third person, its sentence-initial capital gone: "Use tabs" -> "use tabs"."""
    if text[:1].isupper() and text[1:2].islower() and not _is_tech(text.split(None, 1)[0]):
        text = text[0].lower() + text[1:]
    return _third_person(text)


def _third_verb(phrase: str) -> str:
    """The phrase with its verb in the third person: "use tabs" -> "uses tabs"."""
    head, sep, tail = phrase.partition(" ")
    word = head.lower()
    if tail and (word.endswith("ly") or word in ("only", "just", "also", "still", "even")):
        return f"{head}{sep}{_third_verb(tail)}"
    if word in _MODALS or not word.isalpha():
        new = _IRREGULAR.get(word.replace("’", "'"), head)
    elif word in _IRREGULAR:
        new = _IRREGULAR[word]
    elif word.endswith(("s", "sh", "ch", "x", "z", "o")):
        new = head + "es"
    elif word.endswith("y") and len(word) > 1 and word[-2] not in "aeiou":
        new = head[:-1] + "ies"
    else:
        new = head + "s"
    return f"{new}{sep}{tail}"


# -- entities ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Tok:
    start: int
    end: int
    word: str  # without edge punctuation or a possessive 's
    initial: bool  # first word of a sentence


@dataclass(frozen=True, slots=True)
class _Term:
    start: int
    end: int
    name: str  # canonical, lowercase
    kind: str  # vocabulary kind; "" for a proper noun or hashtag


def _tokens(s: str) -> list[_Tok]:
    toks: list[_Tok] = []
    initial, last = True, 0
    for m in _TOKEN.finditer(s):
        if any(c in ".!?:\n" for c in s[last:m.start()]):
            initial = True
        raw = m.group()
        lead = 0 if raw[:4].lower() == ".net" else len(raw) - len(raw.lstrip(".'’-"))
        word = raw[lead:].rstrip(".'’-")
        if word[-2:].lower() in ("'s", "’s"):
            word = word[:-2]
        if word:
            start = m.start() + lead
            toks.append(_Tok(start, start + len(word), word, initial))
            initial = False
        initial = initial or (raw[-1] in ".!?" and word.lower() not in _TITLES)
        last = m.end()
    return toks


def _scan(s: str) -> list[_Term]:
    """Vocabulary terms, capitalised runs and hashtags in ``s``, in order."""
    toks = _tokens(s)
    out: list[_Term] = []
    i = 0
    while i < len(toks):
        found = _lookup(s, toks, i)
        if found is not None:
            out.append(found[0])
            i += found[1]
            continue
        tok = toks[i]
        if tok.word[0] == "#":
            tag = tok.word[1:].lower()
            if tag[:1].isalnum() or tag[:1] == "_":
                canon = _TERMS.get(tag)
                out.append(_Term(tok.start, tok.end, canon[0] if canon else tag,
                                 canon[1] if canon else ""))
            i += 1
            continue
        j = i
        while (j < len(toks) and j - i < 4 and _proper(toks[j])
               and (j == i or (s[toks[j - 1].end:toks[j].start].isspace()
                               and _lookup(s, toks, j) is None))):
            j += 1
        if j > i and (not tok.initial or j - i > 1):
            name = " ".join(t.word.lower() for t in toks[i:j])
            out.append(_Term(tok.start, toks[j - 1].end, name, ""))
            i = j
        else:
            i += 1
    return out


def _lookup(s: str, toks: list[_Tok], i: int) -> tuple[_Term, int] | None:
    """The vocabulary term of up to three words starting at token ``i``."""
    for n in (3, 2, 1):
        if i + n > len(toks):
            continue
        if n > 1 and not all(s[toks[k].end:toks[k + 1].start].isspace()
                             for k in range(i, i + n - 1)):
            continue
        surface = " ".join(t.word.lower() for t in toks[i:i + n])
        hit = _TERMS.get(surface)
        if hit is None:
            continue
        if n == 1 and surface in _CAPITALIZED_ONLY and not toks[i].word[0].isupper():
            return None
        return _Term(toks[i].start, toks[i + n - 1].end, hit[0], hit[1]), n
    return None


def _proper(tok: _Tok) -> bool:
    w = tok.word
    return w[0].isupper() and w.lower() not in _CAP_STOP and any(c.isalpha() for c in w)


def _is_tech(word: str) -> bool:
    low = word.lower()
    return low in _TERMS and low not in _CAPITALIZED_ONLY


def _entities(text: str) -> tuple[str, ...]:
    return tuple(sorted({t.name for t in _scan(text)}))
