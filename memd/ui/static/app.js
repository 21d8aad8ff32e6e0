// The inspector's pages: one module a page, chosen by the address's #fragment.
import { h } from "./dom.js";
import { callsPage } from "./calls.js";
import { memoriesPage } from "./memories.js";
import { healthPage } from "./health.js";
import { sessionsPage } from "./sessions.js";
import { usagePage } from "./usage.js";
import { pausePage } from "./pause.js";

const PAGES = {
  calls: callsPage, memories: memoriesPage, health: healthPage,
  sessions: sessionsPage, usage: usagePage, pause: pausePage,
};

// the modules are fetched and evaluated: the page's own code starts here
performance.mark("memd-app");

let leave = null; // what the page shown needs done when it goes (a stopped poll)

async function show() {
  const name = (location.hash || "#calls").slice(1);
  const open = PAGES[name] ? name : "calls";
  for (const a of document.querySelectorAll("nav a")) {
    a.classList.toggle("active", a.dataset.page === open);
  }
  if (leave) leave();
  leave = null;
  delete document.documentElement.dataset.loaded;
  const root = document.getElementById("page");
  root.replaceChildren(h("p", { class: "muted" }, "Loading…"));
  try {
    leave = (await PAGES[open](root)) || null;
  } catch (err) {
    root.replaceChildren(h("div", { class: "empty" }, `Could not load: ${err.message}`));
  }
  loaded(open);
}

/** Say that the page's first data is shown: <html data-loaded="calls"> and a
 * performance mark "memd-loaded:calls" (its time since navigation start), which the
 * benchmark and the browser tests wait for. */
function loaded(name) {
  performance.mark(`memd-loaded:${name}`);
  document.documentElement.dataset.loaded = name;
}

window.addEventListener("hashchange", show);
show();
