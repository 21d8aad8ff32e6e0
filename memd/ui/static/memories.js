// Memories and facts: search (the API's hybrid search), filter, edit, pin, forget.
import { api, badge, empty, h, notify, short, table, when } from "./dom.js";

const TIERS = ["L0 working", "L1 session", "L2 episodic", "L3 semantic", "L4 procedural"];
const PINNED = 1.0; // a pinned memory has the highest importance, so it ranks first

function tierBadge(tier) {
  return tier === undefined || tier === null ? null
    : badge(`L${tier}`, tier >= 3 ? "tier3" : "tier");
}

/** Where a memory came from: the client that wrote it where recorded, else how. */
function clientOf(row) {
  const meta = row.metadata || {};
  return meta.client || meta.source_client || (row.provenance || "").replaceAll("_", " ");
}

/** The rows a filter keeps: what the API cannot filter is filtered here. */
function keep(row, f) {
  if (f.kind && row.kind !== f.kind) return false;
  if (f.tier !== "" && row.tier !== undefined && String(row.tier) !== f.tier) return false;
  if (f.client && !clientOf(row).toLowerCase().includes(f.client.toLowerCase())) return false;
  return true;
}

function factRow(fact) {
  return { kind: "fact", id: fact.id, text: `${fact.category} · ${fact.key}: ${fact.value}`,
           fact, workspace: fact.workspace, created_at: fact.updated_at,
           metadata: fact.metadata, score: undefined };
}

async function load(f) {
  const ws = f.workspace ? `&workspace=${encodeURIComponent(f.workspace)}` : "";
  if (f.query) {
    const body = { query: f.query, k: 50 };
    if (f.workspace) body.workspace = f.workspace;
    if (f.kind) body.kinds = [f.kind];
    if (f.tier !== "") body.filters = { tiers: [Number(f.tier)] };
    const { hits } = await api("POST", "/v1/search", body);
    return hits.map((hit) => ({ ...hit, tier: (hit.metadata || {}).tier }));
  }
  // both reads at once: the page waits for the slower, not their sum
  const [mems, facts] = await Promise.all([
    f.kind !== "fact" ? api("GET", `/v1/memories?limit=200${ws}`) : { memories: [] },
    !f.kind || f.kind === "fact" ? api("GET", `/v1/facts${ws.replace("&", "?")}`)
      : { facts: [] }]);
  return [...mems.memories, ...facts.facts.map(factRow)];
}

/** The address the forget of ``row`` acts on, and its query (a fact's workspace). */
function forgetTarget(row) {
  if (row.kind !== "fact") return [`/v1/memories/${encodeURIComponent(row.id)}`, ""];
  const f = row.fact;
  return [`/v1/facts/${encodeURIComponent(f.category)}/${encodeURIComponent(f.key)}`,
          f.workspace ? `?workspace=${encodeURIComponent(f.workspace)}` : ""];
}

/** What the forget removes, as the lines the confirmation lists (from the API's
 * preview: the forget itself decides, the page only reads it out). */
function forgetLines(seen) {
  const quote = (text, n = 90) => (text.length > n ? `${text.slice(0, n - 1)}…` : text);
  const lines = [];
  for (const m of seen.memories) {
    const links = m.entities.length ? `, entity links (${m.entities.join(", ")})` : "";
    lines.push(`• memory "${quote(m.text)}": its vector, keyword-index row${links}`);
  }
  for (const f of seen.facts) lines.push(`• fact ${f.category} · ${f.key} = "${quote(f.value)}"`);
  for (const p of seen.pruned) {
    lines.push(`• ${p.role} message in session ${short(p.session_id)} pruned ` +
      `(kept for you, never recalled again): "${quote(p.text, 70)}"`);
  }
  for (const id of seen.summaries) lines.push(`• the compaction summary ${short(id)}`);
  for (const t of seen.titles) lines.push(`• the title "${quote(t.title, 60)}" is cleared`);
  lines.push("• your cached memory blocks are rebuilt");
  return lines;
}

async function forget(row) {
  const [path, query] = forgetTarget(row);
  const seen = await api("GET", `${path}/forget-preview${query}`);
  const what = row.kind === "fact" ? `the fact "${row.text}"` : `"${row.text}"`;
  if (!confirm(`Forget ${what}?\n\nThis removes:\n${forgetLines(seen).join("\n")}`)) {
    return false;
  }
  const gone = await api("DELETE", `${path}${query}`);
  const pruned = (gone.pruned || []).length;
  notify(`Forgotten${pruned ? `; ${pruned} source message(s) pruned` : ""}.`);
  return true;
}

function editor(row, done) {
  const fact = row.kind === "fact";
  const area = h("textarea", { "aria-label": "text" }, fact ? row.fact.value : row.text);
  const save = async () => {
    const text = area.value.trim();
    if (!text) { notify("The text cannot be empty."); return; }
    try {
      if (fact) {
        const f = row.fact;
        await api("PUT", "/v1/facts", { category: f.category, key: f.key, value: text,
                                         workspace: f.workspace || undefined });
      } else {
        await api("PATCH", `/v1/memories/${encodeURIComponent(row.id)}`, { text });
      }
      notify("Saved.");
      done(true);
    } catch (err) { notify(`Not saved: ${err.message}`); }
  };
  return h("div", {}, area, h("div", { class: "toolbar" },
    h("button", { class: "primary", onclick: save }, "Save"),
    h("button", { onclick: () => done(false) }, "Cancel")));
}

export async function memoriesPage(root) {
  const f = { query: "", tier: "", workspace: "", kind: "", client: "" };
  const results = h("div", {});
  const query = h("input", { type: "search", placeholder: "Search memories and facts…",
                             "aria-label": "search" });
  const tier = h("select", { "aria-label": "tier" }, h("option", { value: "" }, "Any tier"),
    TIERS.map((name, i) => h("option", { value: String(i) }, name)));
  const kind = h("select", { "aria-label": "kind" }, h("option", { value: "" }, "Any kind"),
    ["memory", "fact", "summary"].map((k) => h("option", { value: k }, k)));
  const workspace = h("input", { placeholder: "Workspace", "aria-label": "workspace" });
  const client = h("input", { placeholder: "Source or client", "aria-label": "client" });

  async function refresh() {
    Object.assign(f, { query: query.value.trim(), tier: tier.value, kind: kind.value,
                       workspace: workspace.value.trim(), client: client.value.trim() });
    let rows;
    try { rows = (await load(f)).filter((r) => keep(r, f)); } catch (err) {
      results.replaceChildren(empty(err.message)); return;
    }
    if (!rows.length) {
      results.replaceChildren(empty(f.query ? "Nothing found." : "Nothing remembered yet."));
      return;
    }
    results.replaceChildren(table([
      ["Kind", (r) => [badge(r.kind, r.kind), tierBadge(r.tier),
        (r.importance ?? 0) >= PINNED ? badge("pinned", "tier3") : null]],
      ["Text", (r) => h("div", { class: "text", "data-id": r.id }, r.text)],
      ["Workspace", (r) => r.workspace || h("span", { class: "muted" }, "global")],
      ["Source", (r) => clientOf(r)],
      [f.query ? "Score" : "Updated", (r) => f.query ? (r.score ?? 0).toFixed(3)
        : when(r.updated_at || r.created_at), f.query ? "num" : null],
      ["", (r) => actions(r)],
    ], rows));
  }

  function actions(row) {
    const cell = h("span", { class: "actions" });
    const editable = row.kind === "memory" || row.kind === "fact";
    const edit = h("button", { onclick: () => {
      const td = cell.closest("tr").children[1];
      const before = [...td.childNodes];
      td.replaceChildren(editor(row, (saved) => saved ? refresh() : td.replaceChildren(...before)));
    } }, "Edit");
    const pinned = (row.importance ?? 0) >= PINNED;
    const pin = h("button", { onclick: async () => {
      try {
        await api("PATCH", `/v1/memories/${encodeURIComponent(row.id)}`,
          pinned ? { importance: 0.5 } : { importance: PINNED, tier: Math.max(row.tier ?? 3, 3) });
        notify(pinned ? "Unpinned." : "Pinned: kept and ranked first.");
        refresh();
      } catch (err) { notify(err.message); }
    } }, pinned ? "Unpin" : "Pin");
    const drop = h("button", { class: "danger", onclick: async () => {
      try { if (await forget(row)) refresh(); } catch (err) { notify(err.message); }
    } }, "Forget");
    if (editable) cell.append(edit, " ");
    if (row.kind === "memory" && row.importance !== undefined) cell.append(pin, " ");
    if (editable) cell.append(drop);
    return cell;
  }

  const go = (e) => { e.preventDefault(); refresh(); };
  root.replaceChildren(
    h("h1", {}, "Memories & facts"),
    h("form", { class: "toolbar", onsubmit: go }, query, tier, kind, workspace, client,
      h("button", { class: "primary", type: "submit" }, "Search")),
    results);
  for (const el of [tier, kind]) el.addEventListener("change", refresh);
  await refresh();
  return null;
}
