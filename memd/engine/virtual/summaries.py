"""The helper model's detailed (L1) and compact (L2) texts of a context object, made in a
background job, each with its declared losses.

When virtualization first sees an object worth it (``MIN_TOKENS`` or more), and a helper
model is on, a ``summarize_object`` job asks the helper, once, for two summaries of the
object's full text: a detailed one of about 30 % of it that keeps every identifier, and
a compact one of about 5 %, and for each what it dropped and what it can still answer.
The answer is kept only if it holds: both texts present, each sharing words with the
full text (a small model may answer with anything), each within its share of the full
text (with slack; the schema caps their lengths too), the compact one shorter. A kept
answer replaces the extractive excerpts the object was made with
(:mod:`memd.engine.virtual.fidelity`), and only while the object is still held whole: a
text once sent at a lower fidelity stays the text sent, so the prompt's prefix holds.
Anything else (no helper, a model error twice, an answer
that does not hold) leaves the extractive excerpts in place, flagged as extractive in the
object and in the call report.

The helper reads at most ``SOURCE_CHARS`` of the text (a small model's context): what it
did not read is declared dropped by both summaries.
"""

from __future__ import annotations

import json
import logging
import re
from typing import TYPE_CHECKING, Any

from memd.context_objects import ContextObject, ObjectSummaries
from memd.engine.virtual.fidelity import COMPACT, DETAILED, DETAILED_SHARE, NAMES
from memd.models.tokens import count_text

if TYPE_CHECKING:
    from memd.backends.base import Store
    from memd.models.helper import ChatMessage, HelperModel

log = logging.getLogger(__name__)

JOB = "summarize_object"
MIN_TOKENS = 200  # a smaller output is not worth a model call: its excerpt is most of it
SOURCE_CHARS = 6000
COMPACT_SHARE = 0.05
SLACK = 1.5  # how far past its share a summary may go
COMPACT_FLOOR = 60  # tokens a compact summary may always take (a short output's gist)
MAX_ITEMS = 5
_WORD = re.compile(r"\w+")

REQUIRED = ("detailed", "compact", "detailed_dropped", "detailed_answers",
            "compact_dropped", "compact_answers")
CHARS_PER_TOKEN = 4  # what a summary's length limit in the schema assumes


def schema(o: ContextObject) -> dict[str, Any]:
    """The answer's JSON schema, its texts' lengths capped at their shares of ``o``: a
    small model under a grammar then cannot go past them."""
    longest = int(SLACK * DETAILED_SHARE * o.tokens_l0) * CHARS_PER_TOKEN
    shortest = int(max(COMPACT_FLOOR, SLACK * COMPACT_SHARE * o.tokens_l0)) * CHARS_PER_TOKEN
    return {
        "type": "object",
        "properties": {
            "detailed": {"type": "string", "minLength": 1, "maxLength": longest},
            "compact": {"type": "string", "minLength": 1, "maxLength": shortest},
            **{f"{level}_{what}": {"type": "array", "maxItems": MAX_ITEMS,
                                   "items": {"type": "string", "maxLength": 200}}
               for level in ("detailed", "compact") for what in ("dropped", "answers")},
        },
        "required": list(REQUIRED), "additionalProperties": False,
    }


def enqueue(store: Store, user_id: str, session_id: str, object_ids: list[str],
            model: str | None, now: float) -> int:
    """A job per object (once: a resent history brings the same ids); how many were
    queued."""
    queued = 0
    for oid in object_ids:
        queued += store.enqueue_job_once(
            f"{JOB}-{user_id}-{oid}", JOB,
            {"session_id": session_id, "object_id": oid, "model": model}, user_id, now)
    return queued


def prompt(o: ContextObject, chars: int = SOURCE_CHARS) -> list[ChatMessage]:
    """The one message the helper is asked, with the first ``chars`` of the text."""
    what = f"{o.source_tool or 'a tool'} {o.source_key or ''}".strip()
    words = max(20, int(o.tokens_l0 * DETAILED_SHARE * 0.75))
    gist = max(10, int(o.tokens_l0 * COMPACT_SHARE * 0.75))
    text = o.content[:chars]
    return [{"role": "user", "content": (
        f"This is the output of {what} in a coding session:\n<<<\n{text}\n>>>\n"
        f"Summarize it twice. \"detailed\": about {words} words, keeping every identifier "
        "(paths, names, numbers, error codes) exactly and what each part is. \"compact\": "
        f"about {gist} words, the gist. For each, list what it dropped "
        "(\"detailed_dropped\", \"compact_dropped\") and the questions it can still "
        "answer (\"detailed_answers\", \"compact_answers\"). Answer in JSON.")}]


def check(o: ContextObject, answer: Any, model: str | None) -> tuple[dict[str, Any], str]:
    """The answer's fields when it holds (see the module docstring), and "" ; else
    ({}, why not)."""
    if not isinstance(answer, dict):
        return {}, "malformed"
    detailed, compact = answer.get("detailed"), answer.get("compact")
    if not isinstance(detailed, str) or not isinstance(compact, str) \
            or not detailed.strip() or not compact.strip():
        return {}, "empty"
    lists = {k: answer.get(k) for k in REQUIRED[2:]}
    if not all(isinstance(v, list) and all(isinstance(x, str) for x in v)
               for v in lists.values()):
        return {}, "malformed"
    seen = _words(o.content)
    if not (_words(detailed) & seen and _words(compact) & seen):
        return {}, "ungrounded"
    long, short = count_text(detailed, model), count_text(compact, model)
    if long > SLACK * DETAILED_SHARE * o.tokens_l0:
        return {}, "detailed_too_long"
    if short > max(COMPACT_FLOOR, SLACK * COMPACT_SHARE * o.tokens_l0) or short >= long:
        return {}, "compact_too_long"
    return {"detailed": detailed.strip(), "compact": compact.strip(), **lists}, ""


def _words(text: str) -> set[str]:
    """The words of four characters or more of ``text``, lowercased: a summary that
    shares none with the text it summarizes is about something else."""
    return {w.lower() for w in _WORD.findall(text) if len(w) >= 4}


def _text(o: ContextObject, level: int, helper: str, summary: str,
          loss: dict[str, list[str]]) -> str:
    """A summary as the model reads it: a header naming the object, who made it, what
    it dropped and what it can still answer, then the summary."""
    what = f"{o.source_tool or 'tool'} {o.source_key or ''}".strip()
    dropped = "; ".join(loss["dropped"]) or "not said"
    answers = "; ".join(loss["answers"]) or "not said"
    return (f"[memd: {NAMES[level]} summary by the helper model {helper} of the output of "
            f"{what}, object {o.object_id} ({o.tokens_l0} tokens whole). It dropped: "
            f"{dropped}. It can still answer: {answers}. To see it whole: "
            f"memory_restore with its id where offered, else run the tool again.]\n{summary}")


def summaries(o: ContextObject, fields: dict[str, Any], helper: str,
              model: str | None, chars: int = SOURCE_CHARS) -> ObjectSummaries:
    """The object's texts at L1 and L2 from a checked answer of a helper that read the
    first ``chars`` of the text."""
    unread = ([f"everything after its first {chars} characters (not read by the "
               "helper)"] if len(o.content) > chars else [])
    losses = {NAMES[level]: {
        "dropped": [*unread, *fields[f"{NAMES[level]}_dropped"]][:MAX_ITEMS + 1],
        "answers": fields[f"{NAMES[level]}_answers"][:MAX_ITEMS]}
        for level in (DETAILED, COMPACT)}
    detailed = _text(o, DETAILED, helper, fields["detailed"], losses["detailed"])
    compact = _text(o, COMPACT, helper, fields["compact"], losses["compact"])
    return ObjectSummaries(detailed, count_text(detailed, model), compact,
                           count_text(compact, model), helper, losses)


def summarize_object(store: Store, helper: HelperModel | None, user_id: str,
                     session_id: str, object_id: str, model: str | None,
                     now: float) -> str:
    """Ask the helper for the object's L1 and L2 and keep them if they hold; what
    happened: "kept", "rejected_<why>", "held" (no longer whole), "skipped" (gone, too
    small, or no helper). A model error raises: the job is retried, then parked."""
    o = next((x for x in store.context_objects(user_id, session_id)
              if x.object_id == object_id), None)
    if helper is None or o is None or o.tokens_l0 < MIN_TOKENS:
        return "skipped"
    if o.fidelity != 0:
        return "held"
    reply = int(o.tokens_l0 * (DETAILED_SHARE + COMPACT_SHARE) * SLACK) + 200
    chars = SOURCE_CHARS
    if helper.context_length:  # a small model's context holds the prompt and the reply
        reply = min(reply, helper.context_length // 2)
        chars = min(chars, max(0, helper.context_length - reply - 300) * 3)
    raw = helper.complete(prompt(o, chars), max_tokens=reply, json_schema=schema(o))
    try:
        answer = json.loads(raw)
    except json.JSONDecodeError:
        answer = None
    fields, why = check(o, answer, model)
    if why:
        log.info("object %s: the helper's summaries were rejected (%s); the extractive "
                 "excerpts stand", object_id, why)
        return f"rejected_{why}"
    kept = store.set_object_summaries(user_id, session_id, object_id,
                                      summaries(o, fields, helper.model, model, chars), now)
    return "kept" if kept else "held"

