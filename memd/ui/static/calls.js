// Calls: what the proxy did on each chat call, newest first, polled while shown.
import { api, badge, empty, h, short, table, when } from "./dom.js";

const POLL_MS = 2000;

function sections(report) {
  const tokens = report.tokens || {};
  const room = report.room || {};
  return { request: tokens.request || 0, memory: tokens.memory || 0,
           reserve: room.reserve || 0, window: (report.window || {}).tokens || null };
}

function bar(report) {
  const s = sections(report);
  const whole = Math.max(s.window || 0, s.request + s.memory + s.reserve, 1);
  const part = (name, n) => n > 0
    ? h("span", { class: name, style: { width: `${(100 * n / whole).toFixed(2)}%` },
                  title: `${name}: ${n} tokens` }) : null;
  return h("div", { class: "bar", title: `window ${s.window ?? "unknown"}` },
    part("request", s.request), part("memory", s.memory), part("reserve", s.reserve));
}

function windowCell(report) {
  const w = report.window || {};
  if (!w.tokens) return h("span", { class: "muted" }, "unknown");
  return h("span", {}, w.tokens.toLocaleString(),
    h("span", { class: "muted" }, ` ${w.source || ""}`));
}

function clientOf(call) {
  const meta = call.metadata || {};
  const report = call.report || {};
  return meta.client || report.client || "";
}

function doorOf(call) {
  const meta = call.metadata || {};
  const report = call.report || {};
  return meta.door || report.door || "";
}

function cacheFigures(usage) {
  if (!usage) return null;
  const details = usage.prompt_tokens_details || {};
  const read = usage.cache_read_input_tokens ?? details.cached_tokens;
  const written = usage.cache_creation_input_tokens;
  if (read === undefined && written === undefined) return null;
  return { read, written };
}

function detail(call) {
  const report = call.report || {};
  const meta = call.metadata || {};
  const s = sections(report);
  const cache = cacheFigures(meta.usage);
  const missed = report.near_misses || [];
  const facts = h("dl", { class: "kv" },
    h("dt", {}, "Call"), h("dd", { class: "mono" }, call.id),
    h("dt", {}, "Model"), h("dd", {}, call.model || "—"),
    h("dt", {}, "Session"), h("dd", { class: "mono" }, call.session_id || "— (none)"),
    h("dt", {}, "Workspace"), h("dd", {}, call.workspace || "—"),
    h("dt", {}, "Mode"), h("dd", {}, report.mode || "—",
      report.reason ? h("span", { class: "muted" }, ` · ${report.reason}`) : null),
    h("dt", {}, "Window"), h("dd", {}, windowCell(report)),
    h("dt", {}, "Tokens"), h("dd", {},
      `request ${s.request} · memory ${s.memory} · response reserve ${s.reserve}`),
    h("dt", {}, "Prompt cache"), h("dd", {}, cache
      ? `read ${cache.read ?? 0} · written ${cache.written ?? 0}`
      : h("span", { class: "muted" }, "the upstream said nothing")),
    h("dt", {}, "Status"), h("dd", {}, `${call.status ?? ""}`,
      meta.latency_ms !== undefined ? ` · ${meta.latency_ms} ms` : "",
      meta.retried ? " · retried" : ""));
  const items = report.items || [];
  return h("div", { class: "card", id: "call-detail" },
    h("h2", {}, "Call"), facts,
    h("h2", {}, "Injected block, exactly as sent"),
    report.injected
      ? h("pre", { class: "block", id: "injected" }, report.injected)
      : h("p", { class: "muted" }, report.mode === "side"
        ? "A side request: forwarded as sent, no memory." : "Nothing was injected."),
    h("h2", {}, `Lines (${items.length})`),
    items.length ? table([
      ["Kind", (i) => badge(i.kind, i.kind)],
      ["Score", (i) => (i.score ?? 0).toFixed(3), "num"],
      ["Tokens", (i) => i.tokens, "num"],
      ["Source", (i) => h("span", { class: "mono", title: i.id }, `${i.section} ${short(i.id)}`)],
      ["Text", (i) => i.text],
    ], items) : h("p", { class: "muted" }, "No lines."),
    h("h2", {}, `Near misses (${missed.length}) `,
      h("span", { class: "muted" }, "· the best that did not fit the block")),
    missed.length ? h("div", { id: "near-misses" }, table([
      ["Kind", (i) => badge(i.kind || "memory", i.kind || "memory")],
      ["Score", (i) => (i.score ?? 0).toFixed(3), "num"],
      ["Tokens", (i) => i.tokens ?? "", "num"],
      ["Source", (i) => h("span", { class: "mono", title: i.id || "" }, short(i.id))],
      ["Text", (i) => i.text],
    ], missed)) : h("p", { class: "muted" }, "None: everything relevant fit."));
}

export async function callsPage(root) {
  let selected = null;
  let timer = null;
  const list = h("div", { class: "list" });
  const side = h("div", {}, empty("Open a call to see what memd injected."));
  root.replaceChildren(
    h("h1", {}, "Calls ", h("span", { class: "muted" }, "· newest first, live")),
    h("div", { class: "legend card" },
      h("span", {}, h("i", { class: "request" }), "client's request"),
      h("span", {}, h("i", { class: "memory" }), "memory block"),
      h("span", {}, h("i", { class: "reserve" }), "response reserve"),
      h("span", {}, "bar length: the model's window")),
    h("div", { class: "split" }, list, side));

  let shown = null; // the calls listed: a poll that finds the same redraws nothing
  async function refresh() {
    const { data } = await api("GET", "/v1/calls?limit=100");
    const ids = data.map((c) => `${c.id}:${c.status}`).join(" "); // a reply sets status
    if (ids === shown) return;
    shown = ids;
    if (!data.length) {
      list.replaceChildren(empty("No calls yet: point a client's base URL at memd."));
      return;
    }
    // the client and door show only where the proxy recorded them
    const clients = data.some((c) => clientOf(c) || doorOf(c));
    list.replaceChildren(table([
      ["Time", (c) => when(c.created_at)],
      ["Model", (c) => h("span", {}, c.model || "—",
        (c.report || {}).mode === "side" ? h("span", {}, " ", badge("side", "side")) : null)],
      clients && ["Client", (c) => [clientOf(c), doorOf(c)].filter(Boolean).join(" · ") || "—"],
      ["Session", (c) => h("span", { class: "mono", title: c.session_id || "" },
        short(c.session_id) || "—")],
      ["Window", (c) => windowCell(c.report || {})],
      ["Tokens", (c) => bar(c.report || {})],
      ["", (c) => badge(String(c.status ?? ""), c.status === 200 ? "ok" : "bad")],
    ].filter(Boolean), data, (call, tr) => {
      selected = call.id;
      for (const row of list.querySelectorAll("tr")) row.classList.remove("selected");
      tr.classList.add("selected");
      side.replaceChildren(detail(call));
    }, (call, tr) => {
      tr.dataset.call = call.id;
      if (call.id === selected) tr.classList.add("selected");
    }));
  }

  async function poll() {
    try { await refresh(); } catch { /* the daemon restarting: try again */ }
    timer = setTimeout(poll, POLL_MS);
  }
  await refresh();
  timer = setTimeout(poll, POLL_MS);
  return () => clearTimeout(timer);
}
