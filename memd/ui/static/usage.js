// Usage: tokens, calls and cost of the proxied calls, per day and per model, client, workspace.
import { api, empty, h, table, unavailable } from "./dom.js";

const RANGES = [["Last 7 days", 7], ["Last 30 days", 30], ["All", null]];

const money = (usd) => `$${usd.toFixed(usd < 1 ? 4 : 2)}`;

function groupTable(title, data) {
  return [h("h2", {}, title), data.length ? table([
    [title.toLowerCase().replace("per ", ""), (r) => r.key ?? "(none)"],
    ["tokens", (r) => r.total_tokens.toLocaleString(), "num"],
    ["calls", (r) => r.calls, "num"], ["cost", (r) => money(r.cost_usd), "num"],
  ], data) : empty("None.")];
}

export async function usagePage(root) {
  let days = 7;
  async function draw() {
    root.replaceChildren(h("h1", {}, "Usage"), h("div", { class: "filters" }, RANGES.map(([label, n]) =>
      h("button", { class: n === days ? "primary" : null, onclick: () => { days = n; draw(); } }, label))));
    // to the minute, as boot.js's early reads are
    const since = days ? `&since=${Math.floor(Date.now() / 60000) * 60 - days * 86400}` : "";
    const GROUPS = [["model", "Per model"], ["client", "Per client"], ["workspace", "Per workspace"]];
    let byDay, groups;
    try { // the four reads at once: the page waits for the slowest, not their sum
      [byDay, ...groups] = await Promise.all(["day", ...GROUPS.map(([g]) => g)].map(
        (group) => api("GET", `/v1/usage?group_by=${group}${since}`)));
    } catch (err) {
      root.append(empty(unavailable(err) ? "Not available in this version of memd." : err.message)); return;
    }
    const t = byDay.total;
    root.append(h("div", { class: "card totals" },
      `${t.total_tokens.toLocaleString()} tokens · ${t.calls} calls · ${money(t.cost_usd)}`));
    const top = Math.max(1, ...byDay.data.map((r) => r.total_tokens));
    root.append(h("h2", {}, "Per day"), byDay.data.length ? h("div", { class: "bars" }, byDay.data.map((r) =>
      h("div", { class: "bar-row" }, h("span", { class: "bar-label" }, r.key),
        h("span", { class: "bar", style: { width: `${Math.max(1, (60 * r.total_tokens) / top)}%` } }),
        h("span", { class: "num" }, `${r.total_tokens.toLocaleString()} tokens · ${r.calls} calls`)))) : empty("No calls in this range."));
    GROUPS.forEach(([, title], i) => root.append(...groupTable(title, groups[i].data)));
  }
  await draw();
  return null;
}
