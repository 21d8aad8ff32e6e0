// Sessions, usage and pause: read from their routes where this daemon has them.
import { api, empty, h, notify, table, unavailable, when } from "./dom.js";

const NOT_HERE = "Not available in this version of memd.";

function cell(value, key) {
  if (value === null || value === undefined) return "";
  if (typeof value === "number" && /(_at|^date|^day)$/.test(key) && value > 1e9) return when(value);
  if (typeof value === "object") return Object.entries(value).map(([k, v]) => `${k} ${v}`).join(" · ");
  return String(value);
}

/** A table of whatever list the route answered, its columns the rows' keys. */
function listTable(rows) {
  if (!rows.length) return empty("Nothing yet.");
  const keys = [...new Set(rows.flatMap((r) => Object.keys(r)))].slice(0, 8);
  return table(keys.map((k) => [k.replaceAll("_", " "), (r) => cell(r[k], k),
    typeof rows[0][k] === "number" ? "num" : null]), rows);
}

function rowsOf(data) {
  if (Array.isArray(data)) return data;
  for (const key of ["data", "sessions", "rows", "days", "usage"]) {
    if (data && Array.isArray(data[key])) return data[key];
  }
  return null;
}

async function listPage(root, title, path) {
  root.replaceChildren(h("h1", {}, title));
  try {
    const data = await api("GET", path);
    const rows = rowsOf(data);
    root.append(rows ? listTable(rows) : h("pre", { class: "block" }, JSON.stringify(data, null, 2)));
  } catch (err) {
    root.append(empty(unavailable(err) ? NOT_HERE : err.message));
  }
}

export function sessionsPage(root) { return listPage(root, "Sessions", "/v1/sessions?limit=50"); }

export function usagePage(root) { return listPage(root, "Usage", "/v1/usage"); }

export async function pausePage(root) {
  async function refresh() {
    root.replaceChildren(h("h1", {}, "Pause learning"));
    let state;
    try { state = await api("GET", "/v1/pause"); } catch (err) {
      root.append(empty(unavailable(err) ? NOT_HERE : err.message)); return;
    }
    const paused = Boolean(state && (state.paused ?? state.active));
    const flip = async () => {
      try { await api("POST", paused ? "/v1/resume" : "/v1/pause", {}); refresh(); }
      catch (err) { notify(err.message); }
    };
    root.append(h("div", { class: "card" },
      h("p", {}, paused ? "Learning is paused: chats are forwarded, nothing new is remembered."
        : "memd is learning from your chats."),
      h("button", { class: paused ? "primary" : "danger", onclick: flip },
        paused ? "Resume learning" : "Pause learning")));
  }
  await refresh();
  return null;
}
