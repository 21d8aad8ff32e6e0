// Pause: stop or restart learning, for the user everywhere or in one workspace.
import { api, empty, h, notify, table, unavailable, when } from "./dom.js";

const WHAT = "While paused, chats are still forwarded to the model with their memory block, " +
  "but memd stores nothing of them: no session, no messages, no extracted facts or memories. " +
  "It lasts until resumed, across restarts.";

export async function pausePage(root) {
  async function refresh() {
    root.replaceChildren(h("h1", {}, "Pause learning"), h("p", { class: "muted" }, WHAT));
    let state;
    try { state = await api("GET", "/v1/pause"); } catch (err) {
      root.append(empty(unavailable(err) ? "Not available in this version of memd." : err.message)); return;
    }
    const post = async (path, body) => {
      try { await api("POST", path, body); refresh(); } catch (err) { notify(err.message); }
    };
    root.append(h("div", { class: "card" },
      h("p", { id: "pause-state" }, state.everywhere ? "Learning is paused everywhere."
        : "memd is learning from your chats."),
      h("button", { class: state.everywhere ? "primary" : "danger", id: "pause-toggle",
        onclick: () => post(state.everywhere ? "/v1/resume" : "/v1/pause", {}) },
        state.everywhere ? "Resume learning" : "Pause learning")));
    root.append(h("h2", {}, "Paused workspaces"), state.workspaces.length ? table([
      ["workspace", (r) => r.workspace], ["since", (r) => when(r.paused_at)],
      ["", (r) => h("button", { onclick: () => post("/v1/resume", { workspace: r.workspace }) }, "Resume")],
    ], state.workspaces) : empty("No workspace is paused on its own."));
    const ws = h("input", { placeholder: "workspace" });
    root.append(h("div", { class: "filters" }, ws, " ", h("button", {
      onclick: () => ws.value.trim() && post("/v1/pause", { workspace: ws.value.trim() }) }, "Pause this workspace")));
  }
  await refresh();
  return null;
}
