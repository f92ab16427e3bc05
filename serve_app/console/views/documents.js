// The knowledge base (GET/DELETE /v1/documents): the documents this key may read, newest
// first and paged, filtered by scope, agent and tag; a document's chunks (paged, as they
// are cited); delete with a confirm. Every key reads here; the API decides what it may
// delete (service and admin keys: any document; a user key: its own user documents).
import { call, get } from "../api.js";
import { attempt, badge, button, clear, h, table, when } from "../dom.js";

const PAGE = 25;
const CHUNKS = 20;
const SCOPE = { org: "active", agent: "tokens", user: "" };

export async function documentsView(root, who) {
  const scope = h("select", { name: "scope", "aria-label": "scope" },
    [["", "every scope"], ["org", "org"], ["agent", "agent"], ["user", "user"]].map(([v, l]) => h("option", { value: v }, l)));
  const agent = h("input", { name: "agent_id", placeholder: "agent id", "aria-label": "agent id" });
  const tag = h("input", { name: "tag", placeholder: "tag", "aria-label": "tag" });
  const form = h("form", { class: "filters", id: "document-filters" }, scope, agent, tag, h("button", { type: "submit" }, "Filter"));
  const list = h("div", { id: "documents-part" });
  const detail = h("div", { id: "document-part" });
  const filters = () => ({ scope: scope.value, agent_id: agent.value.trim(), tag: tag.value.trim() });
  const state = { list, detail, who, filters, back: [] };
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    clear(detail);
    attempt(() => documents(state, []));
  });
  root.append(h("h1", { text: `Documents of ${who.tenant}` }), form, list, detail);
  await documents(state, []);
}

const owner = (d) => (d.scope === "org" ? "tenant-wide" : d.scope === "agent" ? `agent · ${d.agent_id}` : `user · ${d.user_id || d.owner}`);
// GET and DELETE of an agent's document name the agent (a user key reads it only so).
const scoped = (d) => (d.agent_id ? { agent_id: d.agent_id } : {});
const deletable = (who, d) => who.role !== "user" || (d.scope === "user" && d.owner === who.user_id);

// ``back``: the cursors of the pages before this one (to page back again).
async function documents(state, back) {
  const { list, detail, who } = state;
  state.back = back;
  const page = await get("/v1/documents", { ...state.filters(), limit: PAGE, cursor: back[back.length - 1] });
  clear(list);
  if (!page.documents.length && !back.length) return list.append(h("p", { class: "muted", id: "no-documents", text: "No documents. Post one with POST /v1/documents." }));
  const open = (d) => button(d.title || d.document_id, () => attempt(() => chunks(detail, d, [])), { class: "link", "data-open": d.document_id });
  const remove = (d) => (deletable(who, d) ? button("Delete", () => {
    if (!window.confirm(`Delete document ${d.document_id} and its ${d.chunk_count} chunks?`)) return;
    attempt(async () => {
      await call("DELETE", `/v1/documents/${encodeURIComponent(d.document_id)}`, { query: scoped(d) });
      if (detail.dataset.document === d.document_id) clear(detail);
      await documents(state, state.back);
    }, `Document ${d.document_id} deleted.`);
  }, { class: "danger", "data-delete": d.document_id }) : "");
  const next = button("Next", () => attempt(() => documents(state, [...back, page.next_cursor])), { id: "documents-next", disabled: !page.next_cursor });
  const prev = button("Previous", () => attempt(() => documents(state, back.slice(0, -1))), { id: "documents-prev", disabled: !back.length });
  list.append(table([
    ["Title", open],
    ["Document", (d) => h("code", { text: d.document_id })],
    ["Owner", (d) => h("span", {}, badge(d.scope, SCOPE[d.scope]), " ", owner(d))],
    ["Version", (d) => d.version],
    ["Chunks", (d) => d.chunk_count],
    ["Tags", (d) => (d.tags.length ? d.tags.map((t) => badge(t)) : "—")],
    ["Updated", (d) => when(d.updated_at)],
    ["", remove],
  ], page.documents, { id: "documents" }), h("div", { class: "filters" }, prev, next));
}

// A document's head and a page of its chunks (``back``: the cursors before this page).
async function chunks(detail, d, back) {
  const page = await get(`/v1/documents/${encodeURIComponent(d.document_id)}`, { ...scoped(d), limit: CHUNKS, cursor: back[back.length - 1] });
  const doc = page.document;
  clear(detail);
  detail.dataset.document = doc.document_id;
  const next = button("Next chunks", () => attempt(() => chunks(detail, d, [...back, page.next_cursor])), { id: "chunks-next", disabled: !page.next_cursor });
  const prev = button("Previous chunks", () => attempt(() => chunks(detail, d, back.slice(0, -1))), { id: "chunks-prev", disabled: !back.length });
  detail.append(h("h2", { text: `Chunks · ${doc.title || doc.document_id}` }),
    h("p", { class: "muted", id: "document-meta" },
      `${doc.document_id} · version ${doc.version} · ${doc.content_type} · ${doc.chars} chars · ${doc.chunk_count} chunks`,
      doc.source_url ? h("span", {}, " · ", h("code", { text: doc.source_url })) : null),
    table([
      ["#", (c) => c.chunk_index],
      ["Heading", (c) => (c.heading_path.length ? c.heading_path.join(" › ") : "—")],
      ["Chars", (c) => h("span", { class: "num", text: `${c.char_start}–${c.char_end}` })],
      ["Text", (c) => h("div", { class: "content", text: c.content })],
    ], page.chunks, { id: "chunks" }), h("div", { class: "filters" }, prev, next));
}
