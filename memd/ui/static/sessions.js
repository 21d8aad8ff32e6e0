// Sessions: the stored conversations, newest first, and each one as memd keeps it.
import { api, badge, empty, h, notify, short, table, unavailable, when } from "./dom.js";

/** A message's text as stored: the sanitized copy when it had secrets. */
function textOf(m) {
  const content = m.sanitized ?? m.content;
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((p) => p.text ?? `[${p.type}]`).join("\n");
  if (m.tool_calls) return m.tool_calls.map((c) => `→ ${c.function?.name ?? "tool"}`).join("\n");
  return "";
}

async function openSession(root, row, back) {
  root.replaceChildren(h("p", {}, h("a", { href: "#sessions", onclick: (e) => { e.preventDefault(); back(); } }, "← Sessions")),
    h("h1", {}, row.title || short(row.id, 12)),
    h("p", { class: "muted" }, [row.client, row.workspace, when(row.created_at)].filter(Boolean).join(" · ")));
  const { messages } = await api("GET", `/v1/sessions/${row.id}/messages`);
  const eraseSession = async () => {
    if (!confirm(`Erase the session "${row.title || row.id}", its ${messages.length} messages and the memories made from them?`)) return;
    try { await api("DELETE", `/v1/sessions/${row.id}`); notify("Session erased."); back(); }
    catch (err) { notify(err.message); }
  };
  root.append(h("button", { class: "danger", onclick: eraseSession }, "Erase session"));
  if (!messages.length) { root.append(empty("No messages stored.")); return; }
  root.append(h("div", { class: "conversation" }, messages.map((m) => {
    const erase = async () => {
      if (!confirm(`Erase this ${m.role} message (${when(m.created_at)}) and what was learned from it?`)) return;
      try { await api("DELETE", `/v1/sessions/${row.id}/messages/${m.id}`); notify("Message erased."); openSession(root, row, back); }
      catch (err) { notify(err.message); }
    };
    return h("div", { class: "card message", "data-message": m.id },
      h("div", { class: "meta" }, badge(m.role), " ", when(m.created_at),
        m.is_compressed ? [" ", badge("compressed"), " ",
          m.compressed_summary_id ? h("a", { href: "#memories", title: m.compressed_summary_id }, `summary ${short(m.compressed_summary_id)}`) : null] : null,
        m.is_pruned ? [" ", badge("pruned")] : null,
        " ", h("button", { class: "danger small", onclick: erase }, "Erase")),
      h("pre", { class: "text" }, textOf(m)));
  })));
}

export async function sessionsPage(root) {
  const filters = { workspace: "", client: "" };
  async function list() {
    root.replaceChildren(h("h1", {}, "Sessions"));
    const input = (key) => h("input", { placeholder: key, value: filters[key],
      onchange: (e) => { filters[key] = e.target.value.trim(); list(); } });
    root.append(h("div", { class: "filters" }, input("workspace"), " ", input("client")));
    const rows = [];
    const holder = h("div", {});
    root.append(holder);
    async function more(cursor) {
      const q = new URLSearchParams({ limit: "50" });
      for (const [k, v] of Object.entries(filters)) if (v) q.set(k, v);
      if (cursor) q.set("cursor", cursor);
      let page;
      try { page = await api("GET", `/v1/sessions?${q}`); } catch (err) {
        holder.replaceChildren(empty(unavailable(err) ? "Not available in this version of memd." : err.message)); return;
      }
      rows.push(...page.data);
      // replaceChildren would print a null child as text: only nodes go in
      const moreButton = page.next_cursor ? [h("button", { onclick: () => more(page.next_cursor) }, "More")] : [];
      holder.replaceChildren(rows.length ? table([
        ["title", (r) => r.title || short(r.id, 12)], ["client", (r) => r.client || ""],
        ["workspace", (r) => r.workspace || ""], ["started", (r) => when(r.created_at)],
        ["last active", (r) => when(r.last_active_at)], ["messages", (r) => r.message_count, "num"],
      ], rows, (r) => openSession(root, r, list)) : empty("No sessions yet."), ...moreButton);
    }
    await more(null);
  }
  await list();
  return null;
}
