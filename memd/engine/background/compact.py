"""History compaction: a session's oldest turns become an episodic summary.

A session's stored history grows with every turn; the compiler can only send what fits
the model's window, and the turns it drops would otherwise be lost to it. Compaction
folds the oldest window of whole turns into a summary:

1. **When.** A session needs compaction when its active (uncompressed) history passes a
   threshold: more than ``compact_after_tokens`` tokens (by default twice the session's
   context window; 0 turns this trigger off), or at least ``compact_every_turns`` turns
   (a turn is a user message and what follows it; 0, the default, turns it off). The
   append enqueues a ``compact`` job for the session (one per session at a time, by a
   fixed job id) once the session holds more messages than the turns kept, every
   ``CHECK_EVERY`` messages, and the job's worker makes the check: the chat path never
   reads the history for it, nor waits for a model.
2. **Which turns.** The oldest whole turns, never the ``compact_keep_turns`` most recent:
   all of the older ones for the turn trigger, and for the token trigger as many as
   bring the rest down to half the threshold (with the default threshold, to the
   session's context window).
3. **Summary.** From the window's sanitized text only. With a helper model: asked for a
   JSON summary of at most a fifth of the window's tokens. Without one, or when the model
   fails, or when its answer fails :func:`check_summary` (empty, not shorter than the
   window, naming a name or number the window does not hold, or about something else):
   :func:`extractive_summary`, the user's key sentences word for word within that
   budget, flagged ``extractive`` in its memory's metadata with the reason the helper's
   answer was rejected, if it was asked.
4. **Stored**, in one transaction that also deletes the job (a job run again after a
   crash does nothing, as ``ingest`` does in memd.engine.background.jobs): an L2 episodic memory of
   provenance ``summary`` (metadata: the session, the first and last turn index, source
   and summary tokens, their ratio, ``extractive``), the window's messages marked
   compressed into it (``Store.mark_compressed``), and the session's summary rolled: the
   new piece appended, the oldest pieces dropped past ``SESSION_SUMMARY_TOKENS`` (their
   memories stay retrievable). A summary already stored for the same window is reused
   rather than stored twice.

**A session that ended** (expired after a day without activity, or closed) becomes an
episode as a whole: the scheduler's compaction sweep queues a closing ``compact`` job for
it (payload ``closing``), which folds every turn not yet compacted into one summary when
there are at least ``CLOSE_MIN_TURNS`` of them, as above, and marks the session
(``metadata["episode"]``) so that it is done once. Its summaries are the episodes that
consolidation (memd.engine.background.consolidate) reads.

The compression ratio (window tokens / summary tokens; the target is at least
``TARGET_RATIO``) is in the memory's metadata and in one log line per compaction, which
holds counts and ids, never text.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memd.engine.learning.extract.llm import STOP_WORDS
from memd.engine.learning.templates import user_words
from memd.engine.learning.write import content_hash
from memd.engine.validate import excerpt
from memd.errors import ModelError
from memd.models.helper import MAX_SCHEMA_STRING
from memd.models.tokens import count_text
from memd.privacy.sanitizer import PLACEHOLDER as _PLACEHOLDER
from memd.types import Memory, MemoryFilter, Message, Provenance, Scope, Session, Tier

if TYPE_CHECKING:
    from memd.backends.base import JobQueue, MemoryStore, Store
    from memd.config import Settings
    from memd.models.embedder import CachedEmbedder
    from memd.models.helper import ChatMessage, HelperModel

log = logging.getLogger(__name__)

JOB = "compact"  # the job kind
TAG = "compaction"  # every summary's tag, beside "session:<id>"
TARGET_RATIO = 5  # a summary is at most a fifth of its window's tokens
MAX_SUMMARY_TOKENS = 300
SESSION_SUMMARY_TOKENS = 800  # the rolled session summary keeps its newest pieces
MESSAGE_CHARS = 4000  # the part of one message a summary reads
SOURCE_CHARS = 3000  # the part of a window the helper reads (a small model's context)
SENTENCE_WORDS = 30  # an extractive sentence is cut to this many words
IMPORTANCE = 0.5
MIN_SUMMARY_WORDS = 6  # a helper's answer of fewer words is a fragment, not a summary
CHECK_EVERY = 8  # messages: how often an append queues the compaction check
CLOSE_MIN_TURNS = 2  # an ended session of fewer turns is no episode
EPISODE_KEY = "episode"  # a session's metadata key once its closing job ran

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD = re.compile(r"[^\W_][\w'’.+#-]*[^\W_]|[^\W_]")
_NAME = re.compile(r"[^\W\d_]*[A-Z][\w'’-]*|\w*\d[\w.,:/-]*\w|\d")
# Words a summary may use that its window need not hold: capitalized, they open a
# sentence or name a speaker; they are not what the conversation was about.
_SUMMARY_WORDS = STOP_WORDS | frozenset(
    "user users assistant assistants conversation segment summary they he she then also "
    "later first next finally after before both there here asked asks discussed explained "
    "mentioned said says talked wanted wants suggested noted agreed decided described "
    "shared provided requested helped gave gives answered replied".split())

PROMPT = (
    "Write a short summary of what the user and the assistant talked about in this "
    "conversation, in at most {words} words.\n\n{text}\n\n"
    'Answer in JSON: {{"summary": "..."}}'
)


def schema(max_chars: int) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"summary": {"type": "string", "minLength": 1,
                                   "maxLength": max_chars}},
        "required": ["summary"], "additionalProperties": False,
    }


@dataclass(frozen=True, slots=True)
class Window:
    """The oldest turns of a session to fold into one summary."""

    messages: tuple[Message, ...]
    source_tokens: int  # their stored token counts, summed

    @property
    def first_turn(self) -> int:
        return self.messages[0].turn_index

    @property
    def last_turn(self) -> int:
        return self.messages[-1].turn_index


@dataclass(frozen=True, slots=True)
class Summary:
    """A window's summary: its text, whether it is extractive, which summarizer was asked
    (``rules`` or the helper's name) and why a helper's answer was rejected, if it was."""

    text: str
    extractive: bool
    summarizer: str
    rejected: str | None = None


def enabled(settings: Settings) -> bool:
    """Whether any compaction trigger is on."""
    return settings.compact_after_tokens != 0 or settings.compact_every_turns > 0


def token_threshold(settings: Settings, session: Session) -> int:
    """Active history tokens above which ``session`` is compacted; 0 when that trigger is
    off. By default twice the session's context window."""
    if settings.compact_after_tokens is None:
        return 2 * max(1, session.context_window)
    return max(0, settings.compact_after_tokens)


def may_need(settings: Settings, session: Session) -> bool:
    """The append's cheap check, without reading history: whether ``session`` (its
    counters after the append) holds enough messages to have a window beside the turns
    kept."""
    return enabled(settings) and session.turn_count > settings.compact_keep_turns


def check_due(before: int, after: int) -> bool:
    """Whether an append that took a session from ``before`` to ``after`` messages should
    have its compaction checked: once every ``CHECK_EVERY`` messages, so that most
    appends add no statement for it (the job decides whether anything is due)."""
    return before // CHECK_EVERY != after // CHECK_EVERY


def enqueue(store: JobQueue, user_id: str, session_id: str, now: float,
            closing: bool = False) -> bool:
    """Queue the session's ``compact`` job (a ``closing`` one for a session that ended)
    unless one is queued already (a fixed id per session); whether it was queued."""
    payload: dict[str, Any] = {"session_id": session_id}
    if closing:
        payload["closing"] = True
    return store.enqueue_job_once(f"{JOB}-{user_id}-{session_id}", JOB, payload, user_id, now)


def turns(messages: Sequence[Message]) -> list[list[Message]]:
    """``messages`` grouped into turns: each user message opens one (what precedes the
    first user message belongs to the first turn)."""
    out: list[list[Message]] = []
    for msg in messages:
        if msg.role == "user" or not out:
            out.append([msg])
        else:
            out[-1].append(msg)
    return out


def choose_window(settings: Settings, session: Session,
                  active: Sequence[Message], closing: bool = False) -> Window | None:
    """The window to compact among ``session``'s ``active`` messages (oldest first), or
    None when no trigger fires or every turn is among those kept. ``closing``: the
    session ended, every turn goes (if there are ``CLOSE_MIN_TURNS``)."""
    grouped = turns(active)
    if closing:
        if len(grouped) < CLOSE_MIN_TURNS:
            return None
        return Window(tuple(active), sum(max(0, m.token_count) for m in active))
    cap = len(grouped) - max(1, settings.compact_keep_turns)  # turns that may go
    if cap <= 0:
        return None
    tokens = [sum(max(0, m.token_count) for m in t) for t in grouped]
    total = sum(tokens)
    take = 0
    every = settings.compact_every_turns
    if every > 0 and len(grouped) >= every:
        take = cap
    threshold = token_threshold(settings, session)
    if threshold > 0 and total > threshold:
        left, n = total, 0
        while n < cap and left > threshold // 2:
            left -= tokens[n]
            n += 1
        take = max(take, n)
    if take == 0:
        return None
    return Window(tuple(m for t in grouped[:take] for m in t), sum(tokens[:take]))


def _speaker(msg: Message) -> str:
    return {"user": "User", "assistant": "Assistant", "tool": "Tool"}.get(msg.role, "Note")


def message_text(msg: Message) -> str:
    """What a summary reads of ``msg``: its sanitized text (a user message's user words
    only, found in the whole message: a client's template cut in two is not recognised),
    at most ``MESSAGE_CHARS``."""
    text = msg.safe_text or ""
    return excerpt(user_words(text) if msg.role == "user" else text, MESSAGE_CHARS)


def source_text(window: Window) -> str:
    """The window's text, one ``Speaker: text`` line per message with text."""
    return "\n".join(f"{_speaker(m)}: {' '.join(t.split())}"
                     for m in window.messages if (t := message_text(m)).strip())


def budget(window: Window) -> int:
    """The most tokens a summary of ``window`` may have."""
    return max(1, min(MAX_SUMMARY_TOKENS, window.source_tokens // TARGET_RATIO))


def _words(text: str) -> set[str]:
    return {w.casefold() for w in _WORD.findall(text)}


def check_summary(text: str, source: str, source_tokens: int) -> str | None:
    """Why ``text`` is no summary of a window whose text is ``source`` and which costs
    ``source_tokens``: ``empty``, ``longer`` (not shorter than the window), ``short``
    (fewer than ``MIN_SUMMARY_WORDS`` words: a fragment, "The latest news on"),
    ``ungrounded`` (it names a name, a number or a placeholder the window does not hold)
    or ``unrelated`` (less than a third of its content words are the window's: a
    sentence about summaries, not about the conversation); None when it passes."""
    if not text.strip():
        return "empty"
    if count_text(text) >= source_tokens:
        return "longer"
    if len(text.split()) < MIN_SUMMARY_WORDS:
        return "short"
    known = _words(source)
    if any(p not in source for p in _PLACEHOLDER.findall(text)):
        return "ungrounded"
    for match in _NAME.finditer(_PLACEHOLDER.sub(" ", text)):
        word = match.group().strip("'’.,:/-")
        if word and word.casefold() not in known and word.casefold() not in _SUMMARY_WORDS:
            return "ungrounded"
    content = _words(text) - _SUMMARY_WORDS
    if 3 * len(content & known) < len(content):
        return "unrelated"
    return None


def _sentences(msgs: Sequence[Message]) -> list[str]:
    out: list[str] = []
    for msg in msgs:
        for sentence in _SENTENCE.split(_PLACEHOLDER.sub(" ", message_text(msg))):
            words = sentence.split()
            if len(words) >= 2:
                out.append(" ".join(words[:SENTENCE_WORDS]))
    return list(dict.fromkeys(out))


def extractive_summary(window: Window) -> str:
    """The window's key sentences, word for word, within :func:`budget` tokens: the
    user's (the assistant's when the user said nothing), each next one the sentence that
    adds the most names, numbers and content words not said by those chosen (a window
    that repeats itself gives each thing once), given in the order they were said."""
    limit = budget(window)
    sentences = (_sentences([m for m in window.messages if m.role == "user"])
                 or _sentences([m for m in window.messages if m.role != "user"]))
    if not sentences:
        return f"{len(window.messages)} messages without text."
    names = [{n.casefold() for n in _NAME.findall(s)} - _SUMMARY_WORDS for s in sentences]
    words = [{w for w in _words(s) if w not in STOP_WORDS} | n
             for s, n in zip(sentences, names, strict=True)]
    costs = [count_text(s) + 1 for s in sentences]
    chosen: list[int] = []
    said: set[str] = set()
    used = 0
    while True:
        gains = [(len(words[i] - said) + 2 * len(names[i] - said), -i)
                 for i in range(len(sentences))
                 if i not in chosen and used + costs[i] <= limit]
        best = max(gains, default=None)
        if best is None or best[0] == 0:
            break
        chosen.append(-best[1])
        said |= words[-best[1]]
        used += costs[-best[1]]
    if not chosen:  # the first sentence alone is over: its first words
        cut = sentences[0].split()
        while len(cut) > 1 and count_text(" ".join(cut)) > limit:
            cut.pop()
        return " ".join(cut)
    return " ".join(sentences[i] for i in sorted(chosen))


def prompt(window: Window) -> list[ChatMessage]:
    """The one message the helper is asked: the window's lines, each cut so that the
    whole is at most ``SOURCE_CHARS``."""
    lines = source_text(window).splitlines()
    per_line = max(80, SOURCE_CHARS // max(1, len(lines)))
    text = "\n".join(excerpt(line, per_line) for line in lines)[:SOURCE_CHARS]
    words = max(5, budget(window) * 3 // 4)
    return [{"role": "user", "content": PROMPT.format(text=text, words=words)}]


def helper_summary(helper: HelperModel, window: Window) -> str:
    """The helper's summary of ``window``, unchecked; "" for an answer without one.
    A model error is raised."""
    limit = budget(window)
    answer = helper.complete(prompt(window), max_tokens=limit + 20,
                             json_schema=schema(min(4 * limit, MAX_SCHEMA_STRING)))
    try:
        data = json.loads(answer)
    except ValueError:
        return ""
    text = data.get("summary") if isinstance(data, dict) else None
    return " ".join(text.split()) if isinstance(text, str) else ""


def summarize(helper: HelperModel | None, window: Window) -> Summary:
    """The window's summary: the helper's when it passes :func:`check_summary`, else the
    extractive one (flagged, with the reason)."""
    if helper is None:
        return Summary(extractive_summary(window), True, "rules")
    try:
        text = helper_summary(helper, window)
    except ModelError as exc:
        log.warning("compaction: the helper failed (%s); the summary is extractive",
                    type(exc).__name__)
        return Summary(extractive_summary(window), True, helper.name, "model_error")
    reason = check_summary(text, source_text(window), window.source_tokens)
    if reason is not None:
        return Summary(extractive_summary(window), True, helper.name, reason)
    return Summary(text, False, helper.name)


def existing_summary(store: MemoryStore, user_id: str, session_id: str,
                     window: Window) -> Memory | None:
    """The summary memory already stored for exactly this window, if any."""
    flt = MemoryFilter(tags=(TAG, f"session:{session_id}"), include_expired=True)
    for memory in store.list_memories(user_id, flt, limit=1000):
        meta = memory.metadata
        if (meta.get("session_id") == session_id and meta.get("first_turn") == window.first_turn
                and meta.get("last_turn") == window.last_turn):
            return memory
    return None


def rolled(previous: str | None, piece: str) -> str:
    """The session summary with ``piece`` appended, its oldest pieces (lines) dropped
    while it is over ``SESSION_SUMMARY_TOKENS`` (the newest piece always stays)."""
    pieces = [*(previous.splitlines() if previous else []), piece]
    while len(pieces) > 1 and count_text("\n".join(pieces)) > SESSION_SUMMARY_TOKENS:
        pieces.pop(0)
    return "\n".join(pieces)


def compact_session(store: Store, embedder: CachedEmbedder, settings: Settings,
                    helper: HelperModel | None, user_id: str, session_id: str, now: float,
                    job_id: str | None = None, closing: bool = False) -> Memory | None:
    """Compact ``session_id`` if it needs it (see the module docstring); the summary
    memory its window was folded into, or None when nothing was done. With ``job_id``,
    that job is deleted in the transaction that stores the summary, and a run that
    finds it gone (an earlier run committed) does nothing. ``closing``: the session
    ended; all its turns not compacted yet are folded, and it is marked done."""
    session = store.get_session(user_id, session_id)
    if session is None:
        return None
    window = choose_window(settings, session,
                           store.get_messages(user_id, session_id, active_only=True),
                           closing)
    if window is None:
        if closing:
            store.update_session(user_id, session_id,
                                 metadata={**session.metadata, EPISODE_KEY: True})
        return None
    found = existing_summary(store, user_id, session_id, window)
    summary: Summary | None = None
    if found is None:
        summary = summarize(helper, window)
        embedder.embed([summary.text])  # outside the transaction; ingest-style cache
    with store.transaction():
        if job_id is not None and not store.complete_job(job_id):
            return None
        found = found or existing_summary(store, user_id, session_id, window)
        if found is None:
            assert summary is not None
            found = _insert(store, embedder, session, window, summary, now)
        store.mark_compressed(user_id, session_id, [m.id for m in window.messages],
                              found.id)
        piece = f"Turns {window.first_turn}-{window.last_turn}: {found.text}"
        text = rolled(session.summary_text, piece)
        done = {"metadata": {**session.metadata, EPISODE_KEY: True}} if closing else {}
        store.update_session(user_id, session_id, summary_text=text,
                             summary_token_count=count_text(text), updated_at=now, **done)
    meta = found.metadata
    log.info("compacted session %s turns %d-%d: %d -> %d tokens, ratio %.1f%s", session_id,
             window.first_turn, window.last_turn, meta.get("source_tokens", 0),
             meta.get("summary_tokens", 0), meta.get("ratio", 0.0),
             " (extractive)" if meta.get("extractive") else "")
    return found


def _insert(store: MemoryStore, embedder: CachedEmbedder, session: Session, window: Window,
            summary: Summary, now: float) -> Memory:
    """The summary as an L2 episodic memory. Inserted as it is, not through the write
    path's merge: each window's summary is its own record of its turns."""
    tokens = count_text(summary.text)
    metadata: dict[str, Any] = {
        "session_id": session.id, "first_turn": window.first_turn,
        "last_turn": window.last_turn, "source_tokens": window.source_tokens,
        "summary_tokens": tokens, "ratio": round(window.source_tokens / max(1, tokens), 2),
        "extractive": summary.extractive, "summarizer": summary.summarizer,
    }
    if summary.rejected is not None:
        metadata["rejected"] = summary.rejected
    memory = Memory(
        id=uuid.uuid4().hex, user_id=session.user_id, text=summary.text,
        content_hash=content_hash(summary.text), token_count=tokens, created_at=now,
        updated_at=now, workspace=session.workspace, session_id=session.id,
        tier=Tier.EPISODIC, scope=Scope.GLOBAL, provenance=Provenance.SUMMARY,
        provenance_message_id=window.messages[-1].id, confidence=0.5 if summary.extractive
        else 0.6, importance=IMPORTANCE, access_count=0, is_validated=True,
        tags=(TAG, f"session:{session.id}"), metadata=metadata,
    )
    return store.insert_memory(memory, embedder.embed([summary.text])[0])
