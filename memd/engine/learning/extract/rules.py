"""The extractor's regular expressions and its rule table, ``RULES``, first match wins.

Every lead-in the extractor knows is here, in one place, so the order of the rules and
the linearity of the patterns (tests/test_extract.py checks it) can be read at a glance.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from memd.types import Provenance, Tier

# -- patterns ----------------------------------------------------------------------------
# No pattern nests one unbounded repeat in another, and every one that scans a whole
# message or sentence can only start a match at a word edge, so all of them stay linear.
_A = "['’]"
_IM = rf"i(?:{_A}?m|\s+am)"
_DONT = rf"(?:don{_A}?t|do\s+not)"
_CANT = rf"(?:can{_A}?t|cannot|can\s+not)"
#: "should not have reacted", "shouldn't have to": regret or complaint, not a rule.
_REGRET = (r"(?!have\s+(?:to|been|done|gone|said|seen|known|got|gotten|told|made|eaten|taken"
           r"|given|written|spoken|chosen|broken|forgotten|\w+ed)\b)")
_ADV = (r"(?:(?P<adv>really|much|strongly|generally|usually|definitely|actually|personally|"
        r"mostly|also|still|just|honestly|totally|absolutely|now|typically|normally|mainly|"
        r"always|kinda|probably|might|may)\s+)?")
_SUBJECT = (rf"(?:i|my|we|our|please|always|never|{_DONT}|call\s+me|from\s+now\s+on|"
            r"actually|remember)\b")
_CONJ = r"(?:and|but|so|plus|also|although|though|because|since|while|whereas)"

SENT_SPLIT = re.compile(r"(?<=[.!?;])\s+")
CLAUSE_SPLIT = re.compile(
    rf"(?<=[\w)\"'’])(?:\s*+,\s*+(?:{_CONJ}\s++)?|\s++{_CONJ}\s++)(?={_SUBJECT})", re.I
)
WORD = re.compile(r"\w+")
WS_TOKEN = re.compile(r"\S+")
TOKEN = re.compile(r"[\w#.][\w#.+'’-]*")
NAME_WORD = re.compile(r"[^\W\d_][\w'’.-]{0,30}")
QUESTION_START = re.compile(
    r"(?:what|who|whom|whose|where|when|why|how|which|is|are|was|were|does|did|can|could|"
    r"would|should|will|shall|may|might|am|have|has|had|whether|if|unless|suppose|imagine|"
    rf"(?:is|are|does|did|wo|would|should|could){_A}?n{_A}?t|do(?!\s+not\b))\b"
    rf"|i\s+wonder|{_IM}\s+(?:wondering|curious|not\s+sure)|i\s+was\s+wondering|not\s+sure"
    rf"|i\s+{_DONT}\s+know\b",
    re.I,
)
LEAD = re.compile(
    rf"(?P<corr>actually|correction|i\s+meant(?:\s+to\s+say)?|to\s+clarify)\b[\s,:;.!-]*"
    rf"|(?P<corr2>no|nope|nah|wait|sorry|oops|wrong|incorrect|not\s+quite"
    rf"|that{_A}?s\s+(?:wrong|incorrect|not\s+right|not\s+true))(?:\s*[,:;.!-]+\s*|$)"
    r"|(?P<fnow>from\s+now\s+on|going\s+forward|from\s+here\s+on(?:\s+out)?|henceforth"
    r"|in\s+the\s+future|in\s+(?:all|every|future)\s+(?:of\s+)?(?:our\s+)?(?:chats?"
    r"|conversations?|sessions?))\b[\s,:;-]*"
    rf"|(?P<rem>(?:please\s+)?(?:remember|note|keep\s+in\s+mind|{_DONT}\s+forget"
    r"|never\s+forget)(?:\s+that|(?:\s+(?:this|that|the\s+following))?"
    r"(?:\s+for\s+(?:later|now|next\s+time|the\s+future|future\s+reference))?(?=\s*:))?)"
    r"\b[\s,:;-]*"
    r"|(?P<hedge>i\s+think|i\s+guess|i\s+believe|i\s+suppose|maybe|probably|perhaps)"
    r"(?:\s+that)?\b[\s,:;-]*"
    r"|(?:so|well|also|and|but|oh|ok|okay|hey|hi|hello|btw|by\s+the\s+way|fyi|for\s+the"
    r"\s+record|just\s+so\s+you\s+know|honestly|basically|yeah|yes|sure|anyway|ps|plus|then"
    r"|hmm|um|uh|ah|one\s+more\s+thing|just"
    # asides: a fact said in passing, inside a message about something else
    r"|before\s+i\s+forget|unrelated|totally\s+unrelated|(?:on\s+a\s+)?side\s+note"
    r"|as\s+an\s+aside|random\s+thought|quick\s+(?:note|update)|fun\s+fact|for\s+context"
    r"|not\s+that\s+it\s+matters|while\s+i\s+(?:remember|think\s+of\s+it))\b[\s,:;.!-]*",
    re.I,
)
#: A clause that only asks to remember what the clause before it said ("..., remember
#: that.", "..., please keep it in mind").
_REMEMBER_IT = (
    r"(?:please\s+)?(?:remember\s+(?:that|this|it)|keep\s+(?:that|this|it)\s+in\s+mind"
    r"|(?:don'?t|do\s+not|never)\s+forget\s+(?:that|this|it)|note\s+(?:that|this|it)"
    r"\s+down)(?:\s+(?:please|for\s+later|for\s+next\s+time))?[\s.!]*$")
REMEMBER_THAT = re.compile(_REMEMBER_IT, re.I)
#: The same request closing a clause after a comma ("We deploy on Fridays, keep that in
#: mind"): cut off, and the clause read as asked to be remembered.
REMEMBER_TRAIL = re.compile(r"[,;:\s-]+" + _REMEMBER_IT, re.I)
TRAILERS = (("from now on", "fnow"), ("going forward", "fnow"), ("in the future", "fnow"),
             ("from here on", "fnow"), ("instead", "corr"), ("please", ""), ("thanks", ""),
             ("thank you", ""), ("btw", ""), ("lol", ""))
HEDGE = re.compile(
    r"\b(?:maybe|probably|perhaps|possibly|might|kinda|kind\s+of|sort\s+of|sorta|i\s+think"
    r"|i\s+guess|i\s+suppose|i\s+believe|not\s+sure)\b",
    re.I,
)
INSTEAD = re.compile(r"\binstead\b(?!\s+of\b)", re.I)
VALUE_LEAD = re.compile(
    r"(?:(?P<actually>actually)\s+|(?:now|really|just|still|also|currently|definitely"
    r"|totally|simply|usually|mostly)\s+)?"
    r"(?P<notbut>not\s+[^,;]{1,80}?,?\s+but\s+(?:rather\s+)?)?",
    re.I,
)
NEGATED = re.compile(rf"(?:not|never|n{_A}t)\b", re.I)
COMPARATOR = re.compile(
    r"\b(?:over|to|than|rather\s+than|instead\s+of|versus|vs|for|not|when|whenever|unless"
    r"|if|because|except|but)\b",
    re.I,
)
VERSION = re.compile(r"\s?v?\d[\d.x]{0,8}")
# Command-line flags after a tool: "pytest with -x", "ruff using --fix and --unsafe-fixes"
_FLAG = r"-{1,2}\w[\w=.-]{0,40}"
FLAGS = re.compile(rf"\s{{1,3}}(?:with|using)\s{{1,3}}(?:the\s{{1,3}})?{_FLAG}"
                    + rf"(?:[\s,]{{1,3}}(?:and\s{{1,3}})?{_FLAG})?" * 3
                    + r"(?:\s{1,3}(?:flags?|options?|switch(?:es)?))?", re.I)
AT_ORG = re.compile(r"[\s,]*(?:at|for|with)\s+", re.I)
THIRD_PERSON = re.compile(
    rf"\b(?:i{_A}m|i{_A}ve|i{_A}d|i{_A}ll|i|me|my|mine|myself|you{_A}re|yourself|yours|your|you)\b",
    re.I,
)
# An instruction said to hold beyond this conversation ("always", "from now on", "in all
# our chats"); one bound to this conversation ("here", "stay in character", "for now"),
# unless said to hold across conversations (EVERY_CHAT).
GENERAL = re.compile(r"\b(?:always|never|every\s+time|whenever|by\s+default|in\s+general"
                      r"|from\s+now\s+on|going\s+forward|henceforth|in\s+the\s+future)\b", re.I)
EVERY_CHAT = re.compile(r"\b(?:in|across|for)\s+(?:all|every|any|each|future|later|other)"
                         r"\s+(?:of\s+)?(?:our\s+|my\s+|the\s+)?(?:chats?|conversations?"
                         r"|sessions?|threads?|projects?)\b", re.I)
THIS_CHAT = re.compile(r"\b(?:here|for\s+now|this\s+(?:chat|conversation|session|thread|time"
                        r"|task|story|game|scene|round)|in\s+character|(?:stay|remain|keep)"
                        r"\s+in\s+(?:character|role)|pretend|role-?play|act\s+as|the\s+(?:role"
                        r"|character|persona|game|story))\b", re.I)
# A rule about the form of every answer: its language, tone, format, length, code style.
STYLE = re.compile(
    r"\b(?:(?:answer|respond|reply|write|speak|talk)\w*\s[\w\s]{0,30}?\bin\s+[A-Z][a-z]+"
    r"|english|french|german|spanish|italian|portuguese|dutch|chinese|japanese|korean"
    r"|russian|formal(?:ly)?|casual(?:ly)?|polite(?:ly)?|friendly|tone|concise(?:ly)?"
    r"|brief(?:ly)?|terse(?:ly)?|verbose|short|shorter|long|length|words|sentences"
    r"|paragraphs?|markdown|bullets?|bullet\s+points|headings?|headers|tables|emojis?"
    r"|bold|formatting|format|code\s+blocks?|tabs|spaces|indent\w*|semicolons?"
    r"|type\s+hints|docstrings?|comments|snake_case|camel\s*case|quotes|line\s+length)\b",
    re.I)
# A line that opens a prompt the user pasted, about an assistant: its orders are the
# prompt's, not the user's ("You are a helpful assistant. Always answer in JSON.").
PROMPT_OPENING = re.compile(r"\s*(?:you\s+are\s+(?:an?|the)\s|as\s+an\s+ai\b"
                             r"|the\s+(?:assistant|ai|model|agent)\s+(?:is|must|should|will"
                             r"|always|never)\b)", re.I)
# "the staging host is staging.rocket.internal", said after "remember"
NOTE_FACT = re.compile(r"(?:the|our|my)\s+(?P<noun>[a-z][\w -]{0,40}?)\s+(?:is|are)\s+"
                        r"(?P<v>[^\s,;].{0,119})", re.I)
# A clause that opens with its verb after another one in the same sentence ("I live in a
# city and don't have a car") has that one's subject, and is an order only after an order
# ("use tabs and never add comments").
ELIDED = re.compile(rf"(?:{_DONT}|{_CANT}|never|always)\b", re.I)
SUBJECT_WORD = re.compile(rf"(?P<s>i|we)(?:{_A}(?:m|ve|d|ll|re)|\s+(?:am|are|have|had|would))?\s",
                           re.I)
# An order about the reader's own good ("take care of yourself", "don't be too hard on
# yourself"): advice to a person, not an order to the assistant ("don't repeat yourself").
ADVICE = re.compile(r"\b(?:to|on|of|for|with|about)\s+yourself\b", re.I)
YOU_SHOULD = re.compile(r"you\s+(?:should|must|will|need\s+to|have\s+to)\s+", re.I)


@dataclass(frozen=True, slots=True)
class Rule:
    """A lead-in anchored at the start of a clause and what to make of the words after it.

    ``key``: a fact key, ``"*"`` for the key of the vocabulary term in the value, ``"@noun"``
    for the key named by the ``noun`` group, None for a memory with no fact. ``read``: how
    the value is read (see ``read_value``). A ``v`` group in the regex is the value itself.
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
       corrects: bool = False) -> Rule:
    return Rule(kind, re.compile(pattern, re.I), template, key, confidence, read, category,
                 need, frozenset(block.split()), importance, corrects)


_FREQ = r"(?:(?:currently|now|usually|always|mostly|typically|also)\s+)?"
RULES: tuple[Rule, ...] = (
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
    _r("identity", rf"{_IM}\s+{_FREQ}(?P<verb>based|located|living)\s+(?P<p>in|out\s+of)\s+",
       "User is {verb} {p} {v}", key="location"),
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
    # -- decisions about the work ("we decided to ...", "let's go with ..."): the design
    # choices a later session should not argue again
    _r("fact", rf"(?:i|we)(?:{_A}ve|\s+have)?\s+(?:just\s+|finally\s+)?decided\s+(?:to\s+|on\s+"
       r"|that\s+)?", "User decided: {v}", confidence=0.9, read="clause", importance=0.8),
    _r("fact", rf"(?:let{_A}s|let\s+us|we{_A}ll|we\s+will)\s+(?P<verb>go\s+with|stick\s+with"
       r"|settle\s+on|use|keep|switch\s+to)\s+", "User decided to {verb} {v}", confidence=0.85,
       read="clause", importance=0.8),
    _r("fact", r"(?:design\s+)?decision\s*:\s*", "User decided: {v}", confidence=0.9,
       read="clause", importance=0.8),
    # -- facts about the user's work
    _r("fact", r"(?P<who>i|we)\s+(?:(?:usually|always|mostly|typically|currently|now)\s+)?"
       r"deploy\s+(?:(?:everything|it|things|stuff|apps|services|code|(?:my|our)\s+\w+)\s+)?"
       r"(?P<p>with|on|to|using|via|through|onto)\s+", "{who} deploys {p} {v}",
       key="deploy_tool", read="list"),
    _r("fact", rf"we(?:{_A}re|\s+are)?\s+(?:(?:also|mostly|mainly|currently|now|primarily)\s+)?"
       r"(?:use|using)\s+", "User's team uses {v}", key="*", confidence=0.85, read="clause"),
    _r("fact", rf"(?:(?:we(?:{_A}re|\s+are)|our\s+(?P<noun>company|team|office|business"
       r"|startup|hq)\s+is)\s+)?(?:currently\s+)?(?P<verb>based|located|headquartered)\s+in\s+",
       "User's {noun} is {verb} in {v}", key="company_location", confidence=0.8),
    _r("fact", rf"we(?:{_A}re|\s+are)\s+(?P<art>an?)\s+", "User's team is {art} {v}",
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
    _r("constraint", rf"i\s+(?P<modal>must\s+not|mustn{_A}?t|should\s+not|shouldn{_A}?t)\s+"
       rf"{_REGRET}", "User {modal} {v}", confidence=0.85, read="clause"),
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
       block="worry bother mind panic know think understand get care see remember hesitate"),
    _r("instruction", r"(?:please[\s,]+)?stop\s+(?=\w+ing\b)",
       "User wants the assistant to stop {v}", confidence=0.85, read="clause"),
    # a plain order about the form of the answers ("answer in French", "use tabs")
    _r("instruction", r"(?:please[\s,]+)?(?=(?:answer|respond|reply|write|speak|talk)\s"
       r"[\w\s]{0,30}?\bin\s+(?-i:[A-Z])|use\s+(?:tabs|spaces|\d+\s+spaces|single\s+quotes"
       r"|double\s+quotes|snake_case|camel\s*case|type\s+hints|british|american|metric)\b"
       r"|(?:keep|make)\s+(?:\w+\s+)?(?:answers|responses|replies|it|them)\s+(?:short|brief"
       r"|concise|formal|casual)\b|be\s+(?:concise|brief|terse|formal|casual)\b)",
       "User wants the assistant to {v}", read="clause"),
)

KINDS = {  # kind -> provenance, tier, default importance
    "identity": (Provenance.USER_STATED, Tier.SEMANTIC, 0.9),
    "preference": (Provenance.PREFERENCE, Tier.PROCEDURAL, 0.7),
    "constraint": (Provenance.USER_STATED, Tier.PROCEDURAL, 0.85),
    "instruction": (Provenance.INSTRUCTION, Tier.PROCEDURAL, 0.9),
    "fact": (Provenance.FACT, Tier.SEMANTIC, 0.75),
    "note": (Provenance.USER_STATED, Tier.SEMANTIC, 0.9),
}
