// Helpers the pages share: the JSON API, building elements, formatting.

/** An error the API answered with: its status and memd's message. */
export class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

/** GET ``path``: the answer boot.js started while the page loaded, the first time a
 * page asks for it, else a new request. */
export function early(path) {
  const started = window.memdEarlyReads && window.memdEarlyReads.get(path);
  if (started) {
    window.memdEarlyReads.delete(path);
    return started;
  }
  return fetch(path, { credentials: "same-origin" });
}

/** Call memd's JSON API (same origin: the browser sends the inspector's cookie). */
export async function api(method, path, body) {
  const init = { method, credentials: "same-origin", headers: {} };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const resp = await (method === "GET" ? early(path) : fetch(path, init));
  const text = await resp.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = null; }
  if (!resp.ok) {
    const message = data && data.error ? data.error.message : `HTTP ${resp.status}`;
    throw new ApiError(resp.status, message);
  }
  return data;
}

/** An element: h("td", {class: "num"}, "12", child, ...). Text is never parsed as HTML. */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    // through the CSSOM: the pages' Content-Security-Policy refuses style attributes
    else if (key === "style") Object.assign(el.style, value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

// made once: toLocaleString() builds a new formatter on every call, which a table of
// a few hundred rows pays for in its render time
const TIME = new Intl.DateTimeFormat(undefined, { timeStyle: "medium" });
const DATE_TIME = new Intl.DateTimeFormat(undefined, { dateStyle: "short", timeStyle: "medium" });

export function when(seconds) {
  if (!seconds) return "";
  const d = new Date(seconds * 1000);
  const today = new Date().toDateString() === d.toDateString();
  return (today ? TIME : DATE_TIME).format(d);
}

export function short(id, n = 8) {
  return id ? String(id).slice(0, n) : "";
}

export function badge(text, kind) {
  return h("span", { class: `badge ${kind || text}` }, text);
}

/** Say something briefly in the header. */
export function notify(message) {
  const el = document.getElementById("notice");
  el.textContent = message;
  clearTimeout(notify.timer);
  notify.timer = setTimeout(() => { el.textContent = ""; }, 6000);
}

export function empty(message) {
  return h("div", { class: "empty" }, message);
}

/** The rows a table shows at once: about a screen and a half; the rest follow after
 * the first paint, so a long list does not hold back what fits on the screen. */
export const FIRST_ROWS = 50;

/** A table of rows: columns are [heading, cell(row) -> node or text, class]; onRow(row,
 * tr) on a click; decorate(row, tr) as each row is made. */
export function table(columns, rows, onRow, decorate) {
  const line = (row) => {
    const tr = h("tr", { class: onRow ? "row" : null },
      columns.map(([, cell, cls]) => h("td", { class: cls }, cell(row))));
    if (onRow) tr.addEventListener("click", () => onRow(row, tr));
    if (decorate) decorate(row, tr);
    return tr;
  };
  const body = h("tbody", {}, rows.slice(0, FIRST_ROWS).map(line));
  if (rows.length > FIRST_ROWS) {
    requestAnimationFrame(() => setTimeout(() => {
      body.append(...rows.slice(FIRST_ROWS).map(line));
    }, 0));
  }
  return h("table", {},
    h("thead", {}, h("tr", {}, columns.map(([title, , cls]) => h("th", { class: cls }, title)))),
    body);
}

/** A page of the other parts that may not exist in this daemon: 404/405 say so. */
export function unavailable(err) {
  return err instanceof ApiError && (err.status === 404 || err.status === 405);
}
