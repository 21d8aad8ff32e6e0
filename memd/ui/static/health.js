// Jobs and health: the daemon's state, its store and upstream, the job queue.
import { api, badge, early, empty, h, notify, table, when } from "./dom.js";

async function healthOf() {
  // /health answers 503 with its body while the store is out of reach
  const resp = await early("/health");
  return resp.json();
}

function kv(pairs) {
  return h("dl", { class: "kv" }, pairs.filter(([, v]) => v !== undefined && v !== null)
    .map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
}

function jobsTable(jobs, dead, refresh) {
  if (!jobs.length) return empty(dead ? "No dead jobs." : "No pending jobs.");
  return table([
    ["Job", (j) => h("span", { class: "mono" }, j.id)],
    ["Kind", (j) => badge(j.kind, "job")],
    ["Attempts", (j) => j.attempts, "num"],
    [dead ? "Failed" : "Due", (j) => when(dead ? j.updated_at : j.run_after)],
    [dead ? "Reason" : "State", (j) => dead ? (j.last_error || "") : j.state],
    ["", (j) => dead ? h("button", { onclick: async () => {
      try { await api("POST", `/v1/jobs/${encodeURIComponent(j.id)}/retry`, {});
            notify("Queued again."); refresh(); } catch (err) { notify(err.message); }
    } }, "Retry") : ""],
  ], jobs);
}

/** What a run changed, in words: "memories 2 · sessions 1"; nothing when it changed
 * nothing. */
function changed(counts) {
  const parts = Object.entries(counts || {}).filter(([, n]) => n)
    .map(([k, n]) => `${k.replaceAll("_", " ")} ${n.toLocaleString()}`);
  return parts.length ? parts.join(" · ") : h("span", { class: "muted" }, "nothing");
}

function took(seconds) {
  if (seconds < 0.001) return "< 1 ms";
  return seconds < 1 ? `${Math.round(seconds * 1000)} ms` : `${seconds.toFixed(1)} s`;
}

/** A run's jobs: one over the whole store, or one per user it fanned out to. */
function jobsOf(run) {
  if (!run.per_user) return run.done ? "1 done" : "running";
  if (!run.jobs) return run.done ? `${run.done} done` : "no users";
  return `${run.done} of ${run.jobs} users`;
}

function sweepsTable(runs) {
  if (!runs.length) return empty("No sweeps have run since the daemon started.");
  return table([
    ["When", (r) => when(r.started_at)],
    ["Sweep", (r) => badge(r.task, "job")],
    ["Jobs", jobsOf, "num"],
    ["Took", (r) => took(r.seconds), "num"],
    ["Changed", (r) => changed(r.counts)],
    ["Errors", (r) => r.failed
      ? h("span", { class: "bad-text" }, r.errors.length ? r.errors.join("; ")
        : `${r.failed} failed`)
      : h("span", { class: "muted" }, "none")],
  ], runs);
}

/** The last live reload of the config file, in a line. */
function configState(status) {
  if (!status) return "not watched";
  if (status.error) return `last reload failed: ${status.error}`;
  if (!status.reloaded_at) return `watching ${status.file}`;
  const applied = (status.applied || []).join(", ") || "nothing changed";
  const restart = (status.needs_restart || []).length
    ? `; needs a restart: ${status.needs_restart.join(", ")}` : "";
  return `reloaded ${when(status.reloaded_at)}: ${applied}${restart}`;
}

export async function healthPage(root) {
  async function refresh() {
    const [health, status, pending, dead, sweeps] = await Promise.all([
      healthOf(), api("GET", "/v1/status"), api("GET", "/v1/jobs?state=pending"),
      api("GET", "/v1/jobs?state=dead"), api("GET", "/v1/sweeps?limit=20")]);
    const ok = health.status === "ok";
    const helper = health.helper ? Object.entries(health.helper)
      .map(([k, v]) => `${k} ${v}`).join(" · ") : "off";
    const config = configState(health.config);
    root.replaceChildren(
      h("h1", {}, "Jobs & health"),
      h("div", { class: "grid3" },
        h("div", { class: "card" }, h("h2", {}, h("span", { class: ok ? "dot" : "dot bad" }),
          ok ? "Daemon healthy" : "Degraded"),
          kv([["Version", status.version], ["Store state", health.store_state],
              ["Pending jobs", String(status.pending_jobs)], ["Helper", helper]])),
        h("div", { class: "card" }, h("h2", {}, "Store"),
          kv([["Backend", status.store.backend],
              ["Place", h("span", { class: "mono" }, status.store.place)],
              ["Schema", String(status.store.schema)], ["Embedder", status.embedder],
              ["Users", status.users === undefined ? undefined : String(status.users)]])),
        h("div", { class: "card" }, h("h2", {}, "Upstream & config"),
          kv([["Upstream", h("span", { class: "mono" }, status.upstream || "none")],
              ["Auth", status.auth ? "team mode (API keys)" : "personal (loopback)"],
              ["Config", config]]))),
      h("h2", {}, "Recent sweeps ", h("span", { class: "muted" }, "· since the daemon started")),
      h("div", { id: "sweeps" }, sweepsTable(sweeps.data)),
      h("h2", {}, `Dead jobs (${dead.data.length})`), jobsTable(dead.data, true, refresh),
      h("h2", {}, `Pending jobs and scheduled sweeps (${pending.data.length})`),
      jobsTable(pending.data, false, refresh));
  }
  await refresh();
  const timer = setInterval(() => refresh().catch(() => {}), 5000);
  return () => clearInterval(timer);
}
