// Building the page: every piece of data becomes a text node, never HTML.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else if (k === "text") el.textContent = String(v);
    else if (k in el && typeof v !== "string") el[k] = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

export function when(iso) {
  if (!iso) return "—";
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? String(iso) : d.toISOString().replace("T", " ").slice(0, 16);
}

export function num(x, digits = 3) {
  return typeof x === "number" ? x.toFixed(digits) : "—";
}

// A table inside a scroller (wide tables scroll sideways on a phone).
// columns: [[label, row => node or text], ...]
export function table(columns, rows, attrs = {}) {
  const head = h("tr", {}, columns.map(([label]) => h("th", { scope: "col", text: label })));
  const body = rows.map((r) =>
    h("tr", {}, columns.map(([label, cell]) => h("td", { "data-label": label }, cell(r)))),
  );
  return h("div", { class: "scroll" }, h("table", attrs, h("thead", {}, head), h("tbody", {}, body)));
}

export function badge(text, kind = "") {
  return h("span", { class: `badge ${kind}`.trim(), text });
}

export function button(label, onclick, attrs = {}) {
  return h("button", { type: "button", onclick, ...attrs }, label);
}

export function flash(message, kind = "ok") {
  const box = document.getElementById("flash");
  clear(box).append(h("p", { class: `flash ${kind}`, text: message }));
}

// Runs an action, showing its error (the API's code and message) instead of throwing.
export async function attempt(fn, done) {
  try {
    const out = await fn();
    if (done) flash(done);
    return out;
  } catch (e) {
    flash(`${e.code || "error"}: ${e.message}`, "err");
    return undefined;
  }
}

export function tabs(items, current) {
  return h("nav", { class: "tabs", "aria-label": "sections" },
    items.map(([label, href]) => h("a", { href, class: href === current ? "on" : "" }, label)));
}
