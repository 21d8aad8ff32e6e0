"""Context virtualization, piece by piece: modes, segmentation, fidelities, pressure, and
one call's rewrite over a real store (the replayed session through the proxy is in
test_virtual_replay.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from memd.config import VirtualZones, load_settings
from memd.engine.conversation.chat import WindowInfo
from memd.engine.memory import Memd
from memd.engine.virtual import Budget, call_mode, header_mode, virtualize
from memd.engine.virtual.call import for_call
from memd.engine.virtual.fidelity import (
    COMPACT,
    EVICTED,
    FULL,
    STUB,
    extractive,
    key_entities,
    stub,
)
from memd.engine.virtual.pressure import Held, fit_line, plan, zone
from memd.engine.virtual.segment import segment, source_key
from memd.errors import InvalidInput
from memd.models.tokens import count_text

ZONES = VirtualZones(caution=0.7, warning=0.8, critical=0.9, emergency=0.95, degrade=0.7,
                     target=0.5, evict_target=0.3, keep_recent=0.2)


def call(cid: str, name: str, **args: Any) -> dict[str, Any]:
    return {"id": cid, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}


def file_text(n: int, tag: str = "") -> str:
    return "\n".join(f"line {k} of the file{tag}: value = {k * 7}" for k in range(n))


def history() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Read the app and run the tests."},
        {"role": "assistant", "content": None, "tool_calls": [
            call("c1", "read", path="src/app.py"), call("c2", "bash", command=["pytest", "-q"])]},
        {"role": "tool", "tool_call_id": "c1", "content": file_text(300)},
        {"role": "tool", "tool_call_id": "c2",
         "content": "Traceback (most recent call last):\n  boom\nFAILED 1 test"},
        {"role": "user", "content": "Correction: the port is 8443, not 8080."},
        {"role": "assistant", "content": "Reading it again.", "tool_calls": [
            call("c3", "read", path="src/app.py")]},
        {"role": "tool", "tool_call_id": "c3", "content": file_text(300, " (edited)")},
    ]


# -- modes -----------------------------------------------------------------------------

def test_the_header_names_a_mode_or_is_refused() -> None:
    assert header_mode(None) is None
    assert header_mode(" Off ") == "off" and header_mode("AUTO") == "auto"
    with pytest.raises(InvalidInput, match="X-Memd-Virtualize must be one of auto, on, off"):
        header_mode("yes")


def test_the_header_wins_over_the_workspace_which_wins_over_the_config() -> None:
    settings = replace(load_settings(), virtualize="on", virtualize_workspaces={"w": "off"})
    assert call_mode(settings, None, None) == "on"
    assert call_mode(settings, "w", None) == "off"
    assert call_mode(settings, "other", None) == "on"
    assert call_mode(settings, "w", "auto") == "auto"
    assert load_settings().virtualize == "auto"  # the default


def test_config_refuses_bad_modes_and_zones(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    for text, words in (
        ('virtualize = "always"', "virtualize must be one of auto, on, off"),
        ('[virtualize_workspaces]\nw = "sometimes"', "[virtualize_workspaces]"),
        ("[virtual_zones]\ncaution = 1.5", "fractions of the window"),
        ("[virtual_zones]\ntarget = 0.8", "target < caution"),
        ("[virtual_zones]\nloose = 0.8", "unknown [virtual_zones]"),
    ):
        cfg.write_text(text)
        with pytest.raises(InvalidInput, match=words.replace("[", r"\[")):
            load_settings(cfg)
    cfg.write_text('virtualize = "off"\n[virtual_zones]\ncaution = 0.6\ntarget = 0.4\n'
                   '[virtualize_workspaces]\nbig = "on"')
    settings = load_settings(cfg)
    assert settings.virtualize == "off" and settings.virtualize_workspaces == {"big": "on"}
    assert (settings.virtual_zones.caution, settings.virtual_zones.target,
            settings.virtual_zones.warning) == (0.6, 0.4, 0.8)


# -- segmentation ----------------------------------------------------------------------

def test_tool_results_become_objects_of_their_call() -> None:
    segs = segment("s1", history())
    assert [(s.index, s.source_tool, s.source_key, s.object_type, s.tool_call_id, s.turn)
            for s in segs] == [
        (3, "read", "src/app.py", "file_context", "c1", 1),
        (4, "bash", "pytest -q", "error_context", "c2", 1),
        (7, "read", "src/app.py", "file_context", "c3", 2)]
    again = segment("s1", history())
    assert [s.object_id for s in again] == [s.object_id for s in segs]  # a resent history
    assert len({s.object_id for s in segs}) == 3
    assert {s.object_id for s in segment("s2", history())}.isdisjoint(
        {s.object_id for s in segs})  # per session
    assert segs[0].text == history()[3]["content"]


def test_a_resent_tool_result_is_hashed_and_scanned_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from memd.engine.virtual import segment as seg
    seg._read.cache_clear()
    first = segment("s1", history())
    seen: list[str] = []
    real_kind = seg.kind
    monkeypatch.setattr(seg, "kind", lambda tool, text: seen.append(text) or real_kind(tool, text))
    again = segment("s1", history())  # equal strings, not the same objects
    assert again == first and seen == []
    seg._read.cache_clear()
    assert segment("s1", history()) == first  # worked out anew: the same
    assert len(seen) == 3


def test_what_a_call_is_of_comes_from_its_arguments() -> None:
    assert source_key('{"file_path": "/a/b.py", "limit": 10}') == "/a/b.py"
    assert source_key({"cmd": ["git", "status"]}) == "git status"
    assert source_key({"pattern": "  TODO "}) == "TODO"
    assert source_key("not json") is None and source_key({"n": 3}) is None
    image = {"role": "tool", "tool_call_id": "x", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}
    parts = {"role": "tool", "tool_call_id": "y", "content": [
        {"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    assert [s.text for s in segment("s", [image, parts])] == ["a\nb"]


# -- fidelities ------------------------------------------------------------------------

def test_a_stub_names_the_object_its_source_its_size_and_the_way_back() -> None:
    line = stub("ctx-1", "read", "src/app.py", 300, 4100)
    assert "\n" not in line
    for words in ("ctx-1", "read src/app.py", "300 lines", "4100 tokens", "memory_restore"):
        assert words in line
    assert "names" not in line
    named = stub("ctx-1", "read", "src/app.py", 300, 4100, ("GATEWAY_PORT", "E4091"))
    assert "It names GATEWAY_PORT, E4091." in named and "\n" not in named


def test_key_entities_are_the_identifiers_named_most_but_not_the_source_or_error() -> None:
    text = "\n".join([
        "Traceback (most recent call last):", "  File billing/webhooks.py, line 12",
        "ERROR E4091: duplicate webhook for GATEWAY_PORT", "see billing/webhooks.py",
        "plain words here", "FAILED tests/test_hooks.py::test_retry", "listen on :8443",
        "GATEWAY_PORT again and billing/webhooks.py"])
    found = key_entities(text, key="src/app.py")
    assert found[:2] == ("billing/webhooks.py", "GATEWAY_PORT")
    assert found[2:] == ("E4091", "tests/test_hooks.py", "test_retry", ":8443")
    assert not {"Traceback", "ERROR", "FAILED", "error"} & set(found)
    assert "src/app.py" not in key_entities("open src/app.py then src/app.py", "src/app.py")
    assert len(key_entities(" ".join(f"name_{k}" for k in range(30)))) == 8


def test_an_extractive_excerpt_keeps_ends_and_identifier_lines_and_says_so() -> None:
    body = [f"plain words number {k}" for k in range(200)]
    body[90] = "raise ValueError('E4091: duplicate webhook') in billing/webhooks.py"
    body[120] = "GATEWAY_PORT = 8443"
    text = "\n".join(body)
    tokens = count_text(text)
    out = extractive("ctx-9", "read", "a.py", text, tokens, count_text)
    lines = out.splitlines()
    assert lines[0].startswith("[memd: extractive excerpt") and "ctx-9" in lines[0]
    assert body[0] in lines and body[-1] in lines
    assert body[90] in lines and body[120] in lines
    assert body[50] not in lines
    assert count_text(out) < tokens * 0.25
    assert out == extractive("ctx-9", "read", "a.py", text, tokens, count_text)


# -- pressure --------------------------------------------------------------------------

def test_zones_are_fractions_of_the_window() -> None:
    assert [zone(n, 1000, ZONES) for n in (700, 701, 850, 901, 951)] == [
        "normal", "caution", "warning", "critical", "emergency"]
    assert fit_line(16_384) == 16_384 - 327


def held(oid: str, full: int = 1000, **kw: Any) -> Held:
    return Held(oid, {FULL: full, COMPACT: full // 10, STUB: 30}, **kw)


def test_below_the_caution_line_nothing_degrades() -> None:
    objects = [held("a"), held("b")]
    assert plan(objects, 700, 1000, ZONES) == ([], 700)
    assert [h.fidelity for h in objects] == [FULL, FULL]


def test_between_the_caution_and_degrade_lines_nothing_changes_then_far_down() -> None:
    """Engaged past the caution line, but a step waits for the degrade line, and then
    goes down to the target: each step makes the model server re-read the prompt."""
    zones = replace(ZONES, degrade=0.9, target=0.3, evict_target=0.2, keep_recent=0.1)
    objects = [held(x) for x in "abcdefghi"]
    assert plan(objects, 9000, 10_000, zones) == ([], 9000)
    steps, after = plan(objects, 9001, 10_000, zones)
    assert steps and after <= 3000
    assert [s.object_id for s in steps][:2] == ["a", "b"]


def test_the_oldest_degrade_first_down_to_the_target_superseded_ones_first() -> None:
    objects = [held("a"), held("b"), held("c", superseded=True), held("d"), held("e")]
    steps, after = plan(objects, 7500, 10_000, ZONES)
    assert [(s.object_id, s.to_fidelity, s.trigger) for s in steps] == [
        ("c", STUB, "supersede"), ("a", COMPACT, "pressure"), ("b", COMPACT, "pressure")]
    assert after == 7500 - 970 - 2 * 900 <= ZONES.target * 10_000
    # the newest results within keep_recent of the window stay whole while the request
    # fits: short of the target, the older ones go down to stubs instead
    objects = [held(x) for x in "abcdef"]
    steps, after = plan(objects, 9000, 10_000, ZONES)
    assert [(s.object_id, s.to_fidelity) for s in steps] == [
        *[(x, COMPACT) for x in "abcd"], *[(x, STUB) for x in "abcd"]]
    assert after == 9000 - 4 * 970
    assert [h.fidelity for h in objects[-2:]] == [FULL, FULL]


def test_pinned_ones_stay_and_only_an_exchange_with_its_call_is_evicted() -> None:
    objects = [held("a", pinned=True), held("b", frame=20), held("c"), held("d", frame=20)]
    steps, after = plan(objects, 10_000, 5000, ZONES)
    assert "a" not in {s.object_id for s in steps}
    assert [h.fidelity for h in objects] == [FULL, EVICTED, STUB, EVICTED]
    # the newest one went too: the request does not fit the window otherwise
    assert after == 10_000 - 1020 - 970 - 1020


def test_evicting_goes_on_to_its_own_lower_line_and_only_when_stubs_are_not_enough() -> None:
    def exchanges() -> list[Held]:
        return [Held(f"o{k}", {FULL: 30, COMPACT: 30, STUB: 30}, 70, STUB) for k in range(60)]

    zones = replace(ZONES, keep_recent=0.01)
    objects = exchanges()
    steps, after = plan(objects, 7400, 10_000, zones)  # over the line, stubs already
    assert {s.to_fidelity for s in steps} == {EVICTED}
    assert after <= zones.evict_target * 10_000 < after + 100
    assert [s.object_id for s in steps] == [f"o{k}" for k in range(len(steps))]  # oldest
    objects = [held("big", full=3000), *exchanges()]
    steps, after = plan(objects, 7400, 10_000, zones)  # the big one's stub is enough
    assert [s.object_id for s in steps] == ["big"] and after > zones.evict_target * 10_000


# -- one call over a real store ----------------------------------------------------------

def budget_for(messages: list[dict[str, Any]], window: int) -> Budget:
    from memd.models.tokens import message_tokens

    return Budget.of(window, 100, sum(message_tokens(m) for m in messages), 1.0)


def test_a_call_degrades_stores_and_keeps_what_it_degraded(engine: Memd) -> None:
    s = engine.create_session("local")
    msgs = history()
    window = 12_000  # the request is past the caution line; its newest result is recent
    zones = replace(ZONES, keep_recent=0.45)
    first = virtualize(engine.store, "local", s.id, msgs, budget_for(msgs, window), zones,
                       mode="auto", model=None, call_id="call-1", now=10.0, restorable=True)
    out = first.messages
    assert first.report["transitions"] and first.report["fits"]
    assert [m["role"] for m in out] == [m["role"] for m in msgs]
    assert out[0] is msgs[0] and out[1] is msgs[1] and out[5] is msgs[5]  # never degraded
    assert [m.get("tool_call_id") for m in out] == [m.get("tool_call_id") for m in msgs]
    assert out[3]["content"].startswith("[memd: output of read src/app.py")  # superseded
    stored = {o.object_id: o for o in engine.store.context_objects("local", s.id)}
    # the newest result is big (a quarter of the window) and read under pressure: it is
    # admitted at its detailed excerpt, with the score that chose it in the report
    newest = next(o for o in stored.values() if o.tool_call_id == "c3")
    assert out[-1] == {**msgs[-1], "content": newest.detailed}
    admitted = {a["object_id"]: a for a in first.report["admitted"]}
    assert admitted[newest.object_id]["fidelity"] == "detailed"
    assert admitted[newest.object_id]["score"] < 0.8
    # and each decision is recorded with its object, as the report gives it
    recorded = {a.object_id: a for a in engine.store.admissions("local", s.id)}
    assert set(recorded) == set(admitted)
    kept = recorded[newest.object_id]
    assert (kept.fidelity, kept.score, kept.call_id) == (1, admitted[newest.object_id]["score"],
                                                         "call-1")
    assert set(kept.parts) == {"type", "size", "recency", "relevance"}
    assert any(t["object_id"] == newest.object_id and t["trigger"] == "admission"
               for t in first.report["transitions"])
    assert len(stored) == 3
    assert engine.store.fidelity_transitions("local", s.id)[0].call_id == "call-1"
    # the next call brings the history again and one more exchange: what degraded stays
    # degraded, so the prompt up to the new messages is the same bytes
    more = [*msgs, {"role": "assistant", "content": None, "tool_calls": [
        call("c4", "grep", pattern="PORT")]},
        {"role": "tool", "tool_call_id": "c4", "content": "src/app.py:3: PORT = 8080"}]
    second = virtualize(engine.store, "local", s.id, more, budget_for(more, window), zones,
                        mode="auto", model=None, call_id="call-2", now=11.0)
    assert second.messages[:len(out)] == out
    assert second.report["objects"]["new"] == 1
    assert len(engine.store.context_objects("local", s.id)) == 4


def test_an_evicted_exchange_leaves_with_its_call(engine: Memd) -> None:
    s = engine.create_session("local")
    msgs = history()
    done = virtualize(engine.store, "local", s.id, msgs, budget_for(msgs, 700), ZONES,
                      mode="on", model=None, call_id="c", now=1.0)
    roles = [(m["role"], m.get("tool_call_id"), [c["id"] for c in m.get("tool_calls") or ()])
             for m in done.messages]
    evicted = {t["object_id"] for t in done.report["transitions"] if t["to"] == "evicted"}
    assert evicted
    kept_ids = {m.get("tool_call_id") for m in done.messages if m["role"] == "tool"}
    called = {c for _, _, calls in roles for c in calls}
    assert kept_ids == called  # no result without its call, no call without its result
    assert [m["content"] for m in done.messages if m["role"] in ("user", "system")] == [
        m["content"] for m in msgs if m["role"] in ("user", "system")]
    assert len(done.kept) == len(done.messages) < len(msgs)
    for i, m in zip(done.kept, done.messages, strict=True):
        assert (msgs[i]["role"], msgs[i].get("tool_call_id")) == (m["role"],
                                                                  m.get("tool_call_id"))


def test_a_call_engages_only_as_its_mode_says(engine: Memd) -> None:
    s = engine.create_session("local")
    msgs = history()
    small = WindowInfo(100_000, "test")
    deps = (engine.store, engine.settings, engine.now, engine.jobs.llm_enabled)
    args = (*deps, s, msgs, 900, small, 100)
    assert for_call(*args, None, None, "x") is None  # auto, far below the line
    assert for_call(*args, "on", None, "x") is not None
    assert for_call(*deps, s, msgs, 90_000, small, 100, "off", None, "x") is None
    assert for_call(*deps, s, msgs, 90_000, small, 100, None, None, "x") is not None
    assert for_call(*deps, s, msgs, 90_000, WindowInfo(None), 100, None, None, "x") is None


def test_an_answer_limit_past_a_quarter_of_the_window_does_not_starve_the_prompt(
        engine: Memd) -> None:
    """opencode asks 32,000 tokens of answer of any model: in a 16k window the newest
    result still goes whole, and the report shows the reserve counted."""
    from memd.models.tokens import message_tokens

    s = engine.create_session("local")
    msgs = history()[:5]
    tokens = sum(message_tokens(m) for m in msgs)
    done = for_call(engine.store, engine.settings, engine.now, engine.jobs.llm_enabled, s,
                    msgs, tokens, WindowInfo(16_384, "test"), 32_000, "on", None, "x")
    assert done is not None
    assert done.report["reserve"] == 4096
    assert done.messages == msgs and done.report["fits"]


def test_the_newest_result_is_kept_from_eviction_even_past_keep_recent() -> None:
    """A read larger than ``keep_recent`` of the window is still what the model just
    asked for: it degrades only as far as the request needs to fit, not out with the
    older ones."""
    from memd.engine.virtual.fidelity import DETAILED

    older = [Held(f"o{k}", {FULL: 800, DETAILED: 240, COMPACT: 64, STUB: 20}, frame=30)
             for k in range(6)]
    newest = Held("new", {FULL: 5000, DETAILED: 1500, COMPACT: 250, STUB: 20}, frame=30)
    held = [*older, newest]
    tokens = 2000 + sum(h.cost(FULL) for h in held)
    steps, after = plan(held, tokens, 10_000, ZONES)  # keep_recent: 2,000 tokens
    assert newest.fidelity in (FULL, DETAILED) and after <= fit_line(10_000)
    assert all(h.fidelity == EVICTED for h in older)
    assert "new" not in {s.object_id for s in steps if s.to_fidelity == EVICTED}


def test_admission_weighs_size_kind_recency_and_the_task() -> None:
    from memd.engine.virtual.admission import admit, task_terms
    from memd.engine.virtual.fidelity import COMPACT, DETAILED, FULL

    sizes = {FULL: 3_000, DETAILED: 900, COMPACT: 150}
    terms = task_terms("Fix the rounding in billing/money.py::round_cents")
    listing = "\n".join(f"file_{k}.txt" for k in range(300))
    # a big listing the model just asked for, of no use to the task: its excerpt, where
    # the model can restore it
    assert admit("tool_result", listing, sizes, 16_000, 0, True, terms,
                 restorable=True).fidelity == DETAILED
    # the same deep in a resent history: compact
    assert admit("tool_result", listing, sizes, 16_000, 15_000, False, terms).fidelity \
        == COMPACT
    # a small newest result comes in whole whatever it scores
    small = {FULL: 500, DETAILED: 150, COMPACT: 60}
    assert admit("tool_result", listing, small, 16_000, 0, True, terms,
                 restorable=True).fidelity == FULL
    # an error report on the task's own code, just read: whole
    error = "Traceback in billing/money.py round_cents: rounding mismatch\n" * 50
    got = admit("error_context", error, {FULL: 1_500, DETAILED: 450, COMPACT: 75}, 16_000,
                0, True, terms, restorable=True)
    assert got.fidelity == FULL and got.parts["relevance"] == 1.0


def test_the_newest_result_stays_whole_unless_the_model_can_restore_it() -> None:
    """A big result the model just asked for is admitted as an excerpt only where the
    call offers memory_restore; elsewhere the model sees what it asked for."""
    from memd.engine.virtual.admission import admit
    from memd.engine.virtual.fidelity import DETAILED, FULL

    text = "\n".join(f"line {i} of a long listing" for i in range(400))
    sizes = {FULL: 3000, DETAILED: 900}
    args = ("tool_result", text, sizes, 16_384, 0, True, frozenset())
    assert admit(*args).fidelity == FULL
    assert admit(*args, restorable=True).fidelity == DETAILED
