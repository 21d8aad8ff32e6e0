"""The engine through its public face (``import memd``), on real SQLite with the fake
embedder: write path, retrieval, sessions, context, jobs, bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import memd
from memd.engine.memory import Memd
from memd.errors import InvalidInput, NotFound
from memd.types import Tier


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


def _record_calls(store: Any, method: str) -> list[tuple[str | None, str]]:
    """Wrap ``store.<method>``; each call appends (acting user, thread name) to the list
    returned."""
    import threading

    from memd.auth import current_actor

    seen: list[tuple[str | None, str]] = []
    real = getattr(store, method)

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append((current_actor(), threading.current_thread().name))
        return real(*args, **kwargs)

    setattr(store, method, spy)
    return seen


@pytest.fixture
def m(tmp_path: Path, clock: Clock) -> Any:
    engine = memd.open(tmp_path / "d", clock=clock)
    yield engine
    engine.close()


def test_open_uses_the_data_dir_from_the_environment(hermetic_env: Path) -> None:
    with memd.open() as engine:
        engine.add("remember me", "alice")
    assert (hermetic_env / "memd.db").exists()


def test_exact_duplicate_bumps_access_count(m: Memd) -> None:
    first = m.add("I prefer tabs over spaces", "alice")
    again = m.add("  i prefer TABS over spaces ", "alice")
    assert first.action == "inserted" and again.action == "duplicate"
    assert again.memory.id == first.memory.id and again.memory.access_count == 2
    assert len(m.list("alice")) == 1


def test_same_text_in_two_workspaces_is_two_memories(m: Memd) -> None:
    a = m.add("uses postgres", "alice", workspace="projA")
    b = m.add("uses postgres", "alice", workspace="projB")
    assert a.memory.id != b.memory.id


def test_near_duplicate_merges_and_more_specific_wins(m: Memd, clock: Clock) -> None:
    base = ("our team deploys the public api service with kubernetes and helm charts "
            "from the main branch every friday")
    old = m.add(base, "alice")
    clock.advance(60)
    new = m.add(base + " on gke", "alice")  # fake-embedder cosine 0.95 > 0.92
    assert new.action == "merged"
    assert new.memory.text.endswith("on gke") and new.memory.access_count == 2
    loser = m.get(old.memory.id, "alice")
    assert not loser.is_active and loser.superseded_by == new.memory.id
    clock.advance(60)
    vaguer = m.add(base, "alice")  # the vaguer text again: merges into the specific one
    assert vaguer.action == "merged" and vaguer.memory.id == new.memory.id
    assert vaguer.memory.access_count == 3
    assert [x.id for x in m.list("alice")] == [new.memory.id]
    kept = m.list("alice", include_inactive=True)
    assert len(kept) == 3  # nothing is deleted


def test_name_correction_supersedes_and_keeps_both(m: Memd, clock: Clock) -> None:
    alex = m.add("My name is Alex", "alice")
    clock.advance(10)
    sam = m.add("Actually, call me Sam", "alice")
    assert sam.action == "superseded"
    assert [r.id for r in sam.replaced] == [alex.memory.id]
    old = m.get(alex.memory.id, "alice")
    assert not old.is_active and old.superseded_by == sam.memory.id
    assert m.get(sam.memory.id, "alice").is_active
    (name,) = [f for f in m.facts("alice") if f.key == "name"]
    assert name.value == "Sam"
    history = [f.value for f in m.facts("alice", include_history=True) if f.key == "name"]
    assert sorted(history) == ["Alex", "Sam"]


def test_lower_confidence_fact_does_not_overwrite(m: Memd) -> None:
    assert m.set_fact("alice", "identity", "name", "Alex", confidence=1.0).action == "inserted"
    res = m.set_fact("alice", "identity", "name", "Al", confidence=0.6)
    assert res.action == "rejected" and res.fact.value == "Alex"
    res = m.set_fact("alice", "identity", "name", "Alexander", confidence=0.95,
                     is_correction=True)
    assert res.action == "updated" and res.previous is not None
    assert [f.value for f in m.facts("alice")] == ["Alexander"]


def test_search_is_per_user_and_explains_scores(m: Memd) -> None:
    m.add("I prefer tabs over spaces", "alice")
    m.add("likes dark roast coffee", "alice")
    hits = m.search("tabs or spaces", "alice")
    assert hits[0].text == "I prefer tabs over spaces" and hits[0].kind == "memory"
    assert sum(hits[0].breakdown.values()) == pytest.approx(hits[0].score)
    assert hits[0].breakdown["keyword"] > 0
    assert m.search("tabs or spaces", "bob") == []


def test_workspace_scoping(m: Memd) -> None:
    m.add("project A uses django", "alice", workspace="projA")
    m.add("alice writes python", "alice")
    in_b = {h.text for h in m.search("django python", "alice", workspace="projB")}
    assert in_b == {"alice writes python"}
    in_a = {h.text for h in m.search("django python", "alice", workspace="projA")}
    assert in_a == {"project A uses django", "alice writes python"}


def test_forget_removes_from_search(m: Memd) -> None:
    mem = m.add("my locker code is 1234", "alice").memory
    assert m.search("locker code", "alice")
    m.forget(mem.id)
    assert m.search("locker code", "alice") == []
    with pytest.raises(NotFound):
        m.forget(mem.id)
    with pytest.raises(NotFound):
        m.get(mem.id, "alice")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"text": ""}, "empty"),
        ({"text": "   \n\t "}, "empty"),
        ({"text": "x" * 40_000}, "too long"),
        ({"text": 42}, "must be a string"),
        ({"user_id": ""}, "invalid user_id"),
        ({"user_id": "a b"}, "invalid user_id"),
        ({"user_id": "x" * 200}, "invalid user_id"),
        ({"user_id": "../etc"}, "invalid user_id"),
        ({"workspace": "has space"}, "invalid workspace"),
        ({"tier": 9}, "invalid tier"),
        ({"confidence": 1.5}, "between 0 and 1"),
        ({"scope": "local"}, "needs a session_id"),
        ({"tags": "notalist"}, "list of strings"),
        ({"text": "bad \ud800 surrogate"}, "Unicode"),
    ],
)
def test_bad_input_is_rejected_and_writes_nothing(
    m: Memd, kwargs: dict[str, Any], message: str
) -> None:
    args: dict[str, Any] = {"text": "a fine memory", "user_id": "alice", **kwargs}
    with pytest.raises(InvalidInput, match=message):
        m.add(args.pop("text"), args.pop("user_id"), **args)
    assert m.list("alice") == []
    assert m.store.pending_jobs() == 0


def test_unknown_ids(m: Memd) -> None:
    with pytest.raises(NotFound):
        m.get("0123456789abcdef", "alice")
    with pytest.raises(NotFound):
        m.append("nosuchsession", "alice", [{"role": "user", "content": "hi"}])
    with pytest.raises(NotFound):
        m.add("x y z", "alice", session_id="nosuchsession")
    with pytest.raises(InvalidInput):
        m.get("bad id!", "alice")


# -- sessions, extraction, jobs, context ---------------------------------------------
def test_append_extracts_facts_inline_and_memories_via_jobs(m: Memd) -> None:
    s = m.create_session("priya", model="gpt-4")
    stored = m.append(s.id, "priya", [
        {"role": "user", "content": "My name is Priya and I deploy with Kubernetes"},
        {"role": "assistant", "content": "Nice to meet you, Priya."},
    ])
    assert [x.turn_index for x in stored] == [1, 2]
    assert {(f.key, f.value) for f in m.facts("priya")} >= {("name", "Priya")}
    assert m.list("priya") == []  # memories wait for the job runner
    assert m.run_jobs() >= 2
    texts = " ".join(x.text for x in m.list("priya"))
    assert "Kubernetes" in texts
    assert m.store.messages_missing_embedding("priya", 10) == []
    hits = m.search("kubernetes", "priya", kinds=["message"])
    assert hits and hits[0].kind == "message" and hits[0].session_id == s.id


def test_append_rejects_bad_messages_atomically(m: Memd) -> None:
    s = m.create_session("alice")
    bad: list[Any] = [
        [{"role": "user", "content": "ok"}, {"role": "wizard", "content": "x"}],
        [{"role": "tool", "content": "result"}],
        [{"role": "user", "content": 5}],
        [{"role": "user"}],
        [],
        {"role": "user", "content": "not a list"},
    ]
    for messages in bad:
        with pytest.raises(InvalidInput):
            m.append(s.id, "alice", messages)
    assert m.messages(s.id, "alice") == []
    assert m.store.pending_jobs() == 0


def test_context_injects_memory_into_a_new_session(m: Memd) -> None:
    s1 = m.create_session("priya")
    m.append(s1.id, "priya", [
        {"role": "user", "content": "My name is Priya and I deploy with Kubernetes"}
    ])
    m.run_jobs()
    s2 = m.create_session("priya", system_prompt="You are a helpful assistant.")
    # (the fake embedder's cosine needs the words themselves: MiniLM's would not)
    m.append(s2.id, "priya", [{"role": "user", "content": "Which tool do I deploy with?"}])
    ctx = m.context("priya", session_id=s2.id)
    assert ctx.messages[0] == {"role": "system", "content": "You are a helpful assistant."}
    memory_block = ctx.messages[1]["content"]
    assert memory_block.startswith("## Memory") and "Kubernetes" in memory_block
    assert ctx.messages[-1] == {"role": "user", "content": "Which tool do I deploy with?"}
    assert ctx.report.total_tokens <= 8192 - 1024
    sections = {i.section for i in ctx.report.items}
    assert {"history"} <= sections and ({"fact", "memory"} & sections)
    assert json.loads(json.dumps(ctx.report.to_dict()))["task_type"]


def test_context_is_deterministic_and_records_access_off_path(m: Memd) -> None:
    m.add("alice deploys with kubernetes", "alice")
    s = m.create_session("alice")
    m.append(s.id, "alice", [{"role": "user", "content": "how do I deploy with kubernetes?"}])
    m.run_jobs()
    one = m.context("alice", session_id=s.id)
    two = m.context("alice", session_id=s.id)
    assert one.messages == two.messages and one.report == two.report
    before = [x.access_count for x in m.list("alice")]
    m.run_jobs()
    after = [x.access_count for x in m.list("alice")]
    assert sum(after) > sum(before)


def test_a_compiles_query_is_redacted_once_and_embedded_without_its_secret(m: Memd) -> None:
    """The query vector a compile reads several times is redacted once, then kept per
    query, sanitizer and embedder; it is the vector of the redacted text."""
    secret = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    query = f"why does the token {secret} fail to deploy with kubernetes?"
    m.add("alice deploys with kubernetes", "alice")
    m.run_jobs()
    contexts = m.contexts
    real = contexts.sanitizer
    redacted: list[str] = []

    class Counting:
        def sanitize(self, text: str) -> Any:
            redacted.append(text)
            return real.sanitize(text)

    contexts.sanitizer = Counting()  # type: ignore[assignment]
    m.context("alice", messages=[{"role": "user", "content": query}])
    assert redacted and len(redacted) == len(set(redacted))  # no text twice
    redacted.clear()
    vec = contexts.query_vector(query)
    assert contexts.query_vector(query) is vec and redacted == [query]  # kept
    clean = real.sanitize(query).text
    assert secret not in clean
    assert np.array_equal(vec, m.embedder.embed_query(clean))
    contexts.sanitizer = real  # another sanitizer: redacted again by it
    assert np.array_equal(contexts.query_vector(query), vec) and redacted == [query]


def test_context_never_orphans_tool_results(m: Memd) -> None:
    s = m.create_session("alice", context_window=600, max_response_tokens=100)
    call = [{"id": "call_1", "type": "function",
             "function": {"name": "read_file", "arguments": "{\"p\": \"a.py\"}"}}]
    m.append(s.id, "alice", [
        {"role": "user", "content": "read the file " + "please " * 50},
        {"role": "assistant", "content": None, "tool_calls": call},
        {"role": "tool", "tool_call_id": "call_1", "content": "x = 1\n" * 120},
        {"role": "assistant", "content": "It sets x."},
        {"role": "user", "content": "thanks"},
    ])
    ctx = m.context("alice", session_id=s.id)
    roles = [msg["role"] for msg in ctx.messages]
    if "tool" in roles:
        i = roles.index("tool")
        assert roles[i - 1] == "assistant" and ctx.messages[i - 1].get("tool_calls")
    assert ctx.report.history_cut
    assert ctx.messages[-1]["content"] == "thanks"


def test_working_tier_and_tags_filters(m: Memd) -> None:
    m.add("scratch note about caching", "alice", tier="L1", tags=["tmp"])
    m.add("durable note about caching", "alice", tags=["keep"])
    only_l1 = m.search("caching note", "alice", tiers=["L1"])
    assert [h.text for h in only_l1] == ["scratch note about caching"]
    tagged = m.search("caching note", "alice", tags=["keep"])
    assert [h.text for h in tagged] == ["durable note about caching"]
    assert m.list("alice", tier=Tier.SESSION)[0].tags == ("tmp",)


def test_keyword_only_message_gets_its_true_cosine(tmp_path: Path) -> None:
    """A message the keyword channel finds but the vector channel's top k misses is scored
    with its real cosine (from the embedding cache), not 0."""
    # keyword 0.25: enough for this keyword-only message to reach the top 10 here, its
    # keyword part whole (keyword agreement would keep a share of it: its meaning is far)
    with memd.open(tmp_path / "d", embedder="fake", weights={"keyword": 0.25},
                   search_keyword_agreement=False) as m:
        s = m.create_session("u")
        fillers = [{"role": "user", "content": f"trip {i}"} for i in range(20)]
        target = ("zanzibar came up once while we were sorting out the kitchen shelves, "
                  "the paint colours and the new garden fence")
        m.append(s.id, "u", [*fillers, {"role": "user", "content": target}])
        while m.run_jobs():
            pass
        qvec = m.embedder.embed_query("zanzibar trip")
        near = {msg.content for msg, _ in m.store.nearest_messages("u", qvec, 10)}
        assert target not in near  # the vector channel's top 10 misses it
        hits = m.search("zanzibar trip", "u", k=10, kinds=["message"])
        hit = next(h for h in hits if h.text == target)
        assert hit.breakdown["keyword"] > 0
        assert hit.breakdown["similarity"] == pytest.approx(
            0.45 * max(float(np.dot(qvec, m.embedder.embed([target])[0])), 0.0), abs=1e-6)
        assert hit.breakdown["similarity"] > 0


def test_message_search_runs_keyword_channel_beside_the_embedding_as_the_same_user(
    tmp_path: Path,
) -> None:
    """The keyword channel runs in a worker thread while the query is embedded; it must
    act as the request's user (PostgreSQL's row-level security reads that context). The
    second hop's lookup, after the first round, runs on the caller's thread, as the same
    user."""

    from memd.auth import acting_as

    with memd.open(tmp_path / "d", embedder="fake") as m:
        s = m.create_session("u")
        m.append(s.id, "u", [{"role": "user", "content": "the zanzibar itinerary"}])
        while m.run_jobs():
            pass
        seen = _record_calls(m.store, "keyword_messages")
        with acting_as("u"):
            hits = m.search("zanzibar", "u", k=5, kinds=["message"])
        assert [h.text for h in hits] == ["the zanzibar itinerary"]
        assert hits[0].breakdown["keyword"] > 0
        assert seen[0][1].startswith("memd-side")
        assert [user for user, _ in seen] == ["u"] * len(seen)


@pytest.fixture
def engine_on(backend: str, tmp_path: Path) -> Any:
    """An engine with the fake embedder on each backend (a new PostgreSQL database)."""
    import pg

    engine = pg.open_engine(backend, tmp_path / "d")
    yield engine
    engine.close()


def test_context_and_search_inside_a_transaction_see_its_writes(engine_on: Memd) -> None:
    """In a caller's transaction the reads stay on this thread: another thread would not
    see the uncommitted turn (PostgreSQL) or would wait for the transaction to end while
    the transaction waits for it (SQLite, one connection)."""
    import threading

    m = engine_on
    s = m.create_session("u")
    out: dict[str, Any] = {}

    def run() -> None:
        with m.store.transaction():
            m.append(s.id, "u", [{"role": "user", "content": "the quokka census"}])
            out["ctx"] = m.context("u", session_id=s.id)
            out["hits"] = m.search("quokka", "u", k=5, kinds=["message"])

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive(), "context/search inside a transaction deadlocked"
    assert out["ctx"].messages[-1] == {"role": "user", "content": "the quokka census"}
    assert [h.text for h in out["hits"]] == ["the quokka census"]


def test_context_reads_history_beside_retrieval_as_the_same_user(engine_on: Memd) -> None:
    """The history and the facts are read in a worker thread (a connection of its own)
    while the query is embedded and memories gathered, acting as the request's user
    (PostgreSQL's row-level security reads it); with a store whose reads take turns
    (concurrent_reads false: SQLite in memory), in line."""

    from memd.auth import acting_as

    m = engine_on
    s = m.create_session("u")
    m.append(s.id, "u", [{"role": "user", "content": f"turn {i} about otters"}
                         for i in range(5)])
    m.add("otters hold hands while sleeping", "u")
    m.set_fact("u", "pets", "otters", "Pebble")  # about the query
    seen = _record_calls(m.store, "recent_messages")
    facts_seen = _record_calls(m.store, "get_facts")
    with acting_as("u"):
        ctx = m.context("u", session_id=s.id, query="otters")
    assert [msg["content"] for msg in ctx.messages if msg["role"] == "user"] \
        == [f"turn {i} about otters" for i in range(5)]
    system = [msg["content"] for msg in ctx.messages if msg["role"] == "system"]
    assert any("otters hold hands" in text for text in system)
    assert any("Pebble" in text for text in system)
    for calls in (seen, facts_seen):
        assert len(calls) == 1 and calls[0][0] == "u"
        assert calls[0][1].startswith("memd-side") == m.store.concurrent_reads


def test_recall_searches_past_messages_beside_the_memories_as_the_same_user(
        engine_on: Memd) -> None:
    """Recall's message search needs the query alone: its vector and keyword channels
    each run in a side worker (a connection of its own) while the memories are scored,
    acting as the request's user (in line where reads take turns). A compiled context
    and the proxy's memory candidates recall the same message."""
    from memd.auth import acting_as
    from memd.engine.block.compile import RECALL_KIND

    m = engine_on
    said = m.create_session("u")
    m.append(said.id, "u", [
        {"role": "user", "content": "the staging host is staging rocket internal"},
        {"role": "assistant", "content": "Noted."}])
    while m.run_jobs():
        pass
    statement = next(msg for msg in m.store.recent_messages("u", said.id, 10_000)
                     if msg.role == "user")
    asking = m.create_session("u")
    seen = _record_calls(m.store, "nearest_messages")
    keyword = _record_calls(m.store, "keyword_messages")
    query = "which staging host is it"
    with acting_as("u"):
        ctx = m.context("u", session_id=asking.id, query=query)
        _, candidates = m.memory_candidates("u", query, session=asking, sent_chains=[])
    assert [i.id for i in ctx.report.items if i.kind == RECALL_KIND] == [statement.id]
    assert [c.id for c in candidates if c.kind == RECALL_KIND] == [statement.id]
    assert len(seen) == len(keyword) == 2
    for user, thread in seen + keyword:
        assert user == "u" and thread.startswith("memd-side") == m.store.concurrent_reads


def test_recall_search_runs_its_two_channels_at_once(engine_on: Memd) -> None:
    """The vector channel waits (up to 10 s) for the keyword channel to start: the
    compile gets its context only because the two run in side workers of their own,
    at the same time (one after the other, the wait would run out first)."""
    import threading

    m = engine_on
    assert m.store.concurrent_reads
    said = m.create_session("u")
    m.append(said.id, "u", [{"role": "user", "content": "the staging host is rocket"}])
    while m.run_jobs():
        pass
    started = threading.Event()
    waited: list[bool] = []
    real_keyword, real_nearest = m.store.keyword_messages, m.store.nearest_messages

    def keyword(*args: Any, **kwargs: Any) -> Any:
        started.set()
        return real_keyword(*args, **kwargs)

    def nearest(*args: Any, **kwargs: Any) -> Any:
        waited.append(started.wait(10))
        return real_nearest(*args, **kwargs)

    m.store.keyword_messages, m.store.nearest_messages = keyword, nearest  # type: ignore[method-assign]
    m.context("u", session_id=m.create_session("u").id, query="which staging host")
    assert waited == [True]


def test_context_reads_history_only_as_far_back_as_any_split_could_keep(
    engine_on: Memd, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The history read stops at the first message past the most tokens any task type's
    split could give the history (85 % of what the window leaves after the reply's
    reserve), not at the whole window: the compiled context is the same as with a
    whole-window read, from fewer messages."""
    from memd.engine.block import context

    m = engine_on
    s = m.create_session("u", context_window=2000, max_response_tokens=400)
    m.append(s.id, "u", [{"role": "user" if i % 2 == 0 else "assistant",
                          "content": f"turn {i} about the otter census and its counters"}
                         for i in range(120)])
    read: list[Any] = []
    real = m.store.recent_messages

    def spy(*args: Any, **kwargs: Any) -> Any:
        page = real(*args, **kwargs)
        read.extend(page)
        return page

    monkeypatch.setattr(m.store, "recent_messages", spy)
    ctx = m.context("u", session_id=s.id, query="otters")
    bounded = list(read)
    read.clear()
    monkeypatch.setattr(context, "history_budget_bound", lambda window, *_: window)
    whole = m.context("u", session_id=s.id, query="otters")
    assert ctx.messages == whole.messages and ctx.report == whole.report
    assert ctx.report.history_cut and len(bounded) < len(read)
    reach = (2000 - 400) * 85 // 100
    tokens = [msg.token_count for msg in bounded]
    assert sum(tokens[:-1]) <= reach < sum(tokens)


def test_access_statistics_are_gathered_then_enqueued_beside_the_reply(
    engine_on: Memd, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A compile's access statistics are gathered per user: compiles within the window
    enqueue nothing; running the jobs writes one job with all of them. The compile that
    closes the window enqueues the job in a side thread on PostgreSQL (as the same user),
    in line on SQLite; running the jobs waits for an enqueue still in flight, so no
    access is lost or counted late. Inside a caller's transaction the job is enqueued in
    line, in that transaction."""
    import threading

    import memd.engine.background.jobs as jobs_module
    from memd.auth import acting_as

    m = engine_on
    s = m.create_session("u")
    m.append(s.id, "u", [{"role": "user", "content": "tell me about otters"}])
    mem = m.add("otters hold hands while sleeping", "u").memory
    m.run_jobs()
    seen: list[tuple[str | None, str]] = _record_calls(m.store, "enqueue_job")
    real = m.store.enqueue_job
    here = threading.current_thread().name
    # An enqueue in a side thread is held until the job runner waits for the enqueues
    # in flight: it is still in flight when the runner starts, and the runner must wait.
    in_flight, runner_waits = threading.Event(), threading.Event()
    released: list[bool] = []

    def slow(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name.startswith("memd-side"):
            in_flight.set()
            released.append(runner_waits.wait(timeout=30))
        return real(*args, **kwargs)

    real_wait = jobs_module.wait

    def waiting(futures: Any, *args: Any, **kwargs: Any) -> Any:
        if futures:
            runner_waits.set()
        return real_wait(futures, *args, **kwargs)

    monkeypatch.setattr(jobs_module, "wait", waiting)

    def compile_as_u() -> None:
        with acting_as("u"):
            m.context("u", session_id=s.id, query="otters")

    m.store.enqueue_job = slow  # type: ignore[method-assign]
    m.jobs.access_window = 3600.0  # does not close during the test
    compile_as_u()
    compile_as_u()
    assert seen == []
    m.run_jobs()
    assert m.get(mem.id, "u").access_count == mem.access_count + 2
    assert seen == [("u", here)]  # one job for both compiles, as their user
    m.jobs.access_window = 0.0  # every compile closes it
    compile_as_u()
    if m.store.concurrent_writes:  # PostgreSQL: enqueued aside, and held there
        assert in_flight.wait(timeout=30)
    else:
        assert not in_flight.is_set()
    m.run_jobs()
    assert released == ([True] if m.store.concurrent_writes else [])
    assert m.get(mem.id, "u").access_count == mem.access_count + 3
    assert len(seen) == 2 and seen[1][0] == "u"
    assert seen[1][1].startswith("memd-side") == m.store.concurrent_writes
    with m.store.transaction():
        m.context("u", session_id=s.id, query="otters")
    assert seen[2][1] == here
    m.run_jobs()
    assert m.get(mem.id, "u").access_count == mem.access_count + 4
