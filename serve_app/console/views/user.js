// One user: the sections, and the memories as a timeline with filters and actions.
import { call, get } from "../api.js";
import { attempt, badge, button, clear, h, tabs, when } from "../dom.js";
import { actionsView } from "./actions.js";
import { factsView, sessionsView } from "./facts.js";
import { historyView } from "./history.js";
import { contextView, searchView } from "./search.js";

const TYPES = ["", "semantic", "fact", "preference", "procedural", "episodic"];
const SECTIONS = {
  memories: memoriesView, facts: factsView, sessions: sessionsView, search: searchView,
  context: contextView, actions: actionsView,
};

export async function userView(root, who, user, rest) {
  const base = `#/user/${encodeURIComponent(user)}`;
  const section = rest[0] || "memories";
  root.append(h("h1", { text: `User ${user}` }));
  root.append(tabs(Object.keys(SECTIONS).map((s) => [s[0].toUpperCase() + s.slice(1), `${base}/${s}`]),
    `${base}/${section === "memory" ? "memories" : section}`));
  const body = h("section", { class: "section", id: `view-${section}` });
  root.append(body);
  if (section === "memory") return historyView(body, user, rest[1]);
  return (SECTIONS[section] || memoriesView)(body, who, user);
}

function validity(m) {
  if (!m.valid_from && !m.valid_until) return null;
  return h("span", { class: "validity", title: "valid from – until" },
    `valid ${m.valid_from ? when(m.valid_from) : "?"} → ${m.valid_until ? when(m.valid_until) : "now"}`);
}

function memoryCard(m, user, refresh) {
  const q = { user_id: user };
  const content = h("p", { class: "content", text: m.content });
  const card = h("article", { class: `memory ${m.status}${m.valid_until ? " retired" : ""}`, "data-id": m.id },
    h("div", { class: "meta" },
      h("time", { text: when(m.created_at) }), badge(m.type), badge(m.status, m.status),
      m.valid_until ? badge("invalidated", "retired") : null, validity(m),
      h("span", { class: "muted", text: `importance ${m.importance} · v${m.version}` })),
    content,
    m.tags && m.tags.length ? h("p", { class: "tags" }, m.tags.map((t) => badge(t, "tag"))) : null);
  const edit = () => {
    const area = h("textarea", { class: "edit", rows: 3, "aria-label": "memory content" });
    area.value = m.content;
    const save = button("Save", () => attempt(async () => {
      await call("PATCH", `/v1/memories/${m.id}`, { query: q, body: { content: area.value },
        headers: { "If-Match": String(m.version) } });
      await refresh();
    }, "Saved."), { class: "primary" });
    content.replaceWith(h("div", { class: "editing" }, area, save, button("Cancel", refresh)));
  };
  const setStatus = (status) => attempt(async () => {
    await call("PATCH", `/v1/memories/${m.id}`, { query: q, body: { status },
      headers: { "If-Match": String(m.version) } });
    await refresh();
  }, status === "archived" ? "Archived." : "Restored.");
  const remove = () => {
    if (!window.confirm("Delete this memory?")) return;
    attempt(async () => { await call("DELETE", `/v1/memories/${m.id}`, { query: q }); await refresh(); },
      "Deleted.");
  };
  card.append(h("div", { class: "actions" },
    h("a", { href: `#/user/${encodeURIComponent(user)}/memory/${m.id}`, class: "button" }, "History"),
    button("Edit", edit),
    m.status === "archived" ? button("Unarchive", () => setStatus("active"))
      : button("Archive", () => setStatus("archived")),
    button("Delete", remove, { class: "danger" })));
  return card;
}

async function memoriesView(body, who, user) {
  const type = h("select", { name: "type", "aria-label": "type" },
    TYPES.map((t) => h("option", { value: t }, t || "any type")));
  const status = h("select", { name: "status", "aria-label": "status" },
    ["active", "archived", ""].map((s) => h("option", { value: s }, s || "any status")));
  const invalidated = h("input", { type: "checkbox", name: "invalidated" });
  const list = h("div", { class: "timeline", id: "timeline" });
  const more = h("p", { class: "pager" });
  let cursor = null;
  const load = async (reset) => {
    if (reset) { cursor = null; clear(list); }
    const page = await get("/v1/memories", {
      user_id: user, type: type.value, status: status.value, limit: 50, cursor,
      include_invalidated: invalidated.checked ? "true" : "",
    });
    let day = list.dataset.day || "";
    for (const m of page.memories) {
      const d = (m.valid_from || m.created_at).slice(0, 10);
      if (d !== day) { list.append(h("h3", { class: "day", text: d })); day = d; }
      list.append(memoryCard(m, user, () => load(true)));
    }
    list.dataset.day = day;
    if (!list.children.length) list.append(h("p", { class: "muted", text: "No memories match." }));
    cursor = page.next_cursor;
    clear(more).append(cursor ? button("Older…", () => load(false), { id: "older" }) : "");
  };
  const reload = () => attempt(() => load(true));
  for (const el of [type, status, invalidated]) el.addEventListener("change", reload);
  body.append(h("form", { class: "filters", id: "filters" }, type, status,
    h("label", {}, invalidated, " show invalidated")), list, more);
  await load(true);
}
