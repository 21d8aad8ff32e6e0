"""Episodic recall: what the user said in earlier conversations, for the memory block.

Memories and facts hold what the extraction rules recognised; everything else a user said
is stored as messages, searchable, and would never reach the model again. Recall finds
the past messages nearest to the query (the vector channel of search, scored with the same
formula; with ``recall_keyword`` its keyword channel too), keeps those that are about the
query (:mod:`memd.engine.retrieval.relevance`: a cosine over ``recall_min_similarity`` and shared
content words, or a cosine over ``sure_similarity``), or whose closest passage is
(:mod:`memd.engine.retrieval.passages`: a thing said in passing inside a message about something
else), and leaves out what the model has anyway:

- messages the client sent in this request (by chain hash, so a branch or a resent copy
  of the same conversation is left out too);
- messages that a memory among the block's candidates says word for word (a message a
  fact or a shorter memory was extracted from usually says more, and stays);
- messages of sessions outside the call's visible workspaces;
- messages a forget pruned (:mod:`memd.engine.learning.forget`): the search channels skip them
  already, and neither a reply nor its question brings the other back when it is pruned.

A message of the call's own session that the client no longer sends (it fell out of the
client's window), or that a compiled context's history no longer reaches, is recalled like
any other. Each recalled message becomes one block item: its date and its session's title
when known, who said it, a bounded excerpt (files and logs are stored whole), and the
assistant's reply to it, so a question and its answer come together; a message
recalled for a passage shows the part around that passage when it is longer than its
excerpt.

**Anchored on the user's words.** Only a user message is recalled: what the user said is
what memd knows. The assistant's reply comes with it, marked as an earlier reply and never
as a fact (a small model's wrong answer is not knowledge). A reply close to the query
brings back the user message it answers, judged on that message's own cosine: an
assistant message is never recalled on its own, however close it is to the query. A user
message that only asks something (:func:`only_asks`) says less than one that states
something, so its score is weighed down by ``QUESTION_WEIGHT``; one whose reply was not
text (an agent's tool call) is not recalled at all: it only says the question was asked.

A title costs tokens of the memory budget like the rest of the item, so it is short
(memd.engine.conversation.titles).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from memd.engine import validate as v
from memd.engine.block.compile import RECALL_KIND, Candidate
from memd.engine.learning.templates import user_words
from memd.engine.retrieval.answers import advice_object, likelihood
from memd.engine.retrieval.passages import closest, only_asks
from memd.engine.retrieval.relevance import content_words, related, text_stems
from memd.engine.retrieval.retrieve import aside, keyword_messages, score_messages
from memd.models.tokens import count_text
from memd.types import Message, ScoredMessages

if TYPE_CHECKING:
    from memd.backends.base import MessageStore, Store
    from memd.config import Weights
    from memd.models.embedder import CachedEmbedder

RECALL_K = 12  # past messages retrieved per query, before the floor and the exclusions
RECALL_CHARS = 600  # the excerpt of a recalled message
NEIGHBOUR_CHARS = 300  # the excerpt of the reply that comes with it
#: A message recalled for one of its passages: the share of the query's content words
#: the passage must say (a sentence reaches a high cosine with a question more easily
#: than a whole message, on a word or two of its topic), and its cosine alone is never
#: enough.
PASSAGE_SHARE = 0.5
QUESTION_WEIGHT = 0.75  # the score of a user message that only asks, against a statement
_SPEAKERS = {"user": "User", "assistant": "Assistant (earlier reply)"}


@dataclass(frozen=True, slots=True)
class RecallScope:
    """What a call's recall may not return: the chain hashes of the messages the client
    sent, the texts the memories among the candidates say already (as :func:`same_text`
    reads them), which workspaces' sessions it may read ("" for sessions outside any
    workspace), and the ids of the messages a compiled context's history may hold (its
    session's turns beyond that reach are recalled like any other)."""

    sent_chains: frozenset[str]
    known_texts: frozenset[str]
    workspaces: tuple[str, ...]
    history: frozenset[str] = frozenset()


def recall_candidates(
    store: Store, embedder: CachedEmbedder, user_id: str, query: str, qvec: np.ndarray,
    weights: Weights, floor: float, now: float, scope: RecallScope, model: str | None = None,
    keyword: bool = False, sure: float = 1.0, answer_floor: float = 0.0,
    question_floor: float = 0.0, hits: ScoredMessages | None = None,
) -> list[Candidate]:
    """Past user messages for ``query`` as block candidates (kind ``"recall"``), each with
    the reply it got, best first; with ``keyword``, the keyword channel finds candidates
    too (better recall, but a full-text ranking over all the user's messages on every new
    question). A message is recalled when it is about the query (``floor`` and ``sure``:
    :func:`memd.engine.retrieval.relevance.related`) and, with ``answer_floor``, the line the block
    shows may answer it (:func:`memd.engine.retrieval.answers.likelihood` reaches the floor). With
    ``question_floor``, nothing is recalled unless the likeliest answer among the lines
    that are about the query reaches that floor: one decision for the whole question,
    since a block that holds any line about a question it cannot answer misleads.
    ``hits``: :func:`recall_hits`' result, when the caller searched already."""
    if weights.similarity <= 0:
        return []  # the floor is a cosine: without the similarity signal nothing passes
    if hits is None:
        hits = recall_hits(store, embedder, user_id, query, qvec, weights, now, keyword)
    hits = [(hit, total, parts) for hit, total, parts in hits
            if hit.role in _SPEAKERS and not hit.is_pruned and (hit.safe_text or "").strip()]
    around = neighbours(store, user_id, [hit for hit, _, _ in hits])
    # a reply found is recalled through the user message it answers
    asked = {hit.id: around[hit.id] for hit, _, _ in hits
             if hit.role != "user" and hit.id in around}
    cosine = dict(zip(asked, _cosines(store, user_id, list(asked.values()), qvec), strict=True))
    found = [  # hit, score, message, cosine
        (hit, total, hit, parts["similarity"] / weights.similarity) if hit.role == "user"
        else (hit, total, asked[hit.id], cosine[hit.id])
        for hit, total, parts in hits if hit.role == "user" or hit.id in asked]
    near = closest(embedder, [msg.safe_text or "" for _, _, msg, _ in found], qvec)
    sessions = {s.id: s for s in store.get_sessions(
        user_id, [msg.session_id for _, _, msg, _ in found])}
    used: set[str] = set()
    out: list[Candidate] = []
    words = content_words(query)
    mine = advice_object(query)
    best = 0.0  # the likeliest answer among the lines about the query
    for (hit, total, msg, similarity), passage in zip(found, near, strict=True):
        if hit.id in used or msg.id in used or _excluded(msg, scope):
            continue
        by_passage = related(passage.similarity, words, passage.text, floor, 1.0,
                             PASSAGE_SHARE)
        if not by_passage and not related(similarity, words, msg.safe_text or "", floor,
                                          sure):
            continue
        # what the user typed, without the client's text around it (an agent's environment
        # block, a file it added); a message that is all client text is not recalled
        said = user_words(v.excerpt(msg.safe_text or "", v.QUERY_CHARS * 4)).strip()
        if not said:
            continue
        msg = replace(msg, content=said, sanitized=said)
        session = sessions.get(msg.session_id)
        if session is None or (session.workspace or "") not in scope.workspaces:
            continue
        reply = hit if hit.role != "user" else around.get(msg.id)
        if reply is not None and _excluded(reply, scope):
            reply = None
        asks = only_asks(msg.safe_text or "")
        if asks and reply is None:
            continue  # a question without its answer only says that it was asked
        used.add(msg.id)
        if reply is not None:
            used.add(reply.id)
        if by_passage and passage.similarity > similarity:  # judged as its passage
            total += weights.similarity * (passage.similarity - similarity)
            similarity = passage.similarity
        shown = passage.text if by_passage else None
        if answer_floor > 0 or question_floor > 0:
            answer = likelihood(similarity, query, hit_excerpt(msg, shown))
            best = max(best, answer)
            if (mine and not asks and similarity >= sure
                    and mine & text_stems(msg.safe_text or "")):
                best = max(best, question_floor)  # the user's words on their own thing
            if answer < answer_floor:
                continue
        text = render((msg, reply), msg, session.title, shown)
        if asks:
            total *= QUESTION_WEIGHT
        out.append(Candidate(RECALL_KIND, msg.id, text, count_text(text, model), total,
                             similarity))
    return out if best >= question_floor else []


def recall_hits(
    store: Store, embedder: CachedEmbedder, user_id: str, query: str, qvec: np.ndarray,
    weights: Weights, now: float, keyword: bool = False,
) -> ScoredMessages:
    """The past messages recall judges: the RECALL_K best of the search channels (the
    keyword one only with ``keyword``), scored. Depends on the query alone, so a compile
    may run it while it scores the memories (memd.engine.block.context)."""
    return score_messages(store, user_id, query, qvec, weights, now, RECALL_K,
                          embedder=embedder, keyword_hits=None if keyword else [])


def recall_hits_aside(
    store: Store, embedder: CachedEmbedder, user_id: str, query: str, qvec: np.ndarray,
    weights: Weights, now: float, keyword: bool = False,
) -> Callable[[], ScoredMessages]:
    """:func:`recall_hits` with its channels started at once, each in a side worker of
    its own (:func:`memd.engine.retrieval.retrieve.aside`: a connection of its own, as
    the same user), for a store of concurrent reads; the function returned waits for
    both and scores what they found."""
    nearest = aside(store, store.nearest_messages, user_id, qvec, RECALL_K)
    found = (aside(store, keyword_messages, store, user_id, query, RECALL_K, None, True)
             if keyword else None)

    def hits() -> ScoredMessages:
        return score_messages(store, user_id, query, qvec, weights, now, RECALL_K,
                              embedder=embedder, nearest=nearest.result(),
                              keyword_hits=[] if found is None else found.result())

    return hits


def _excluded(msg: Message, scope: RecallScope) -> bool:
    """Whether the model has ``msg`` already (see :class:`RecallScope`)."""
    return (same_text(msg.safe_text or "") in scope.known_texts
            or msg.chain_hash in scope.sent_chains or msg.id in scope.history)


def _cosines(store: Store, user_id: str, msgs: Sequence[Message], qvec: np.ndarray
             ) -> list[float]:
    """Each of ``msgs``' cosine with the query, from its stored vector, in one read (0.0
    before its embedding job has run: it is not recalled yet)."""
    found = store.get_message_vectors(user_id, [m.id for m in msgs]) if msgs else {}
    return [float(np.dot(qvec, found[m.id])) if m.id in found else 0.0 for m in msgs]


def same_text(text: str) -> str:
    """``text`` as compared with a memory's: lower case, whitespace collapsed."""
    return " ".join(text.lower().split())


def neighbour(store: MessageStore, user_id: str, msg: Message) -> Message | None:
    """The assistant's answer to a user message, or the user message an answer answers."""
    return neighbours(store, user_id, [msg]).get(msg.id)


def neighbours(store: MessageStore, user_id: str, msgs: Sequence[Message]
               ) -> dict[str, Message]:
    """:func:`neighbour` of each of ``msgs`` that has one, by the message's id, in one
    read: a user message's next turn if it is the assistant's, an answer's previous turn
    if it is the user's (each append numbers its messages on from the session's turn
    count; a message erased on its own leaves its turn empty, and the message beside it
    without a neighbour)."""
    want = {m.id: ((m.session_id, m.turn_index + 1), "assistant") if m.role == "user"
            else ((m.session_id, m.turn_index - 1), "user") for m in msgs}
    if not want:
        return {}
    at = {(m.session_id, m.turn_index): m
          for m in store.messages_at(user_id, [place for place, _ in want.values()])}
    out: dict[str, Message] = {}
    for mid, (place, role) in want.items():
        found = at.get(place)
        if (found is not None and found.role == role and not found.is_pruned
                and (found.content or "").strip()):
            out[mid] = found
    return out


def render(pair: Sequence[Message | None], hit: Message, title: str | None = None,
           passage: str | None = None) -> str:
    """``[date, "title"] User: ... / Assistant (earlier reply): ...``: the hit in full
    excerpt, its neighbour shorter, each in its sanitized text (a memory block holds no
    secret); the title of the hit's session when it has one (memd.engine.conversation.titles). A hit
    too long for its excerpt and recalled for one of its passages shows the part around
    that passage (:func:`around`)."""
    day = time.strftime("%Y-%m-%d", time.gmtime(hit.created_at))
    if title:
        day += ', "' + title.replace('"', "'") + '"'
    lines = []
    for msg in pair:
        if msg is None:
            continue
        if msg.id == hit.id:
            text = hit_excerpt(msg, passage)
        else:
            text = " ".join(v.excerpt((msg.safe_text or "").strip(), NEIGHBOUR_CHARS).split())
        lines.append(f"{_SPEAKERS[msg.role]}: {text}")
    return f"[{day}] " + "\n".join(lines)


def hit_excerpt(msg: Message, passage: str | None = None) -> str:
    """What a recalled item shows of the message it recalls: its excerpt, or the part
    around ``passage`` when it was recalled for that passage (:func:`around`)."""
    if passage:
        return around(" ".join((msg.safe_text or "").split()), passage, RECALL_CHARS)
    return " ".join(v.excerpt((msg.safe_text or "").strip(), RECALL_CHARS).split())


def around(text: str, passage: str, limit: int) -> str:
    """``text`` (whitespace collapsed) if it has at most ``limit`` characters, else the
    ``limit`` characters around ``passage`` in it, cut at word boundaries and marked
    with "..." where cut (the head and tail excerpt when ``passage`` is not found)."""
    if len(text) <= limit:
        return text
    at = text.find(passage[:limit // 2])
    if at < 0:
        return " ".join(v.excerpt(text, limit).split())
    span = min(len(passage), limit)
    start = max(0, min(at - (limit - span) // 2, len(text) - limit))
    end = min(len(text), start + limit)
    if start > 0:  # at a word's start, never past the passage's
        space = text.find(" ", start, at + 1)
        start = space + 1 if space >= 0 else start
    if end < len(text):  # at a word's end
        space = text.rfind(" ", at + 1, end)
        end = space if space >= 0 else end
    return ("... " if start > 0 else "") + text[start:end] + (
        " ..." if end < len(text) else "")
