// Search as the user with each score's breakdown; the context block the LLM would get.
import { call } from "../api.js";
import { attempt, badge, clear, h, num, table } from "../dom.js";

const PARTS = ["similarity", "lexical", "entity", "time", "neighbour", "expansion", "relevance",
  "importance", "recency", "final"];

function bars(e) {
  // The final score's three terms as a stacked bar (w·relevance, importance, recency).
  const rel = Math.max(0, e.final - e.importance - e.recency);
  const total = Math.max(e.final, 1e-9);
  const seg = (v, cls, label) => {
    const el = h("span", { class: `seg ${cls}`, title: `${label} ${num(v)}` });
    el.style.width = `${Math.max(0, (100 * v) / total).toFixed(1)}%`; // CSSOM: allowed by the CSP
    return el;
  };
  return h("div", { class: "bar", "aria-hidden": "true" },
    seg(rel, "rel", "relevance"), seg(e.importance, "imp", "importance"), seg(e.recency, "rec", "recency"));
}

export async function searchView(body, who, user) {
  const query = h("input", { name: "query", placeholder: "what to look for", required: true, "aria-label": "query" });
  const mode = h("select", { name: "mode", "aria-label": "mode" }, ["hybrid", "dense", "lexical"].map((m) => h("option", { value: m }, m)));
  const out = h("div", { id: "results" });
  const form = h("form", { class: "filters", id: "search" }, query, mode, h("button", { type: "submit" }, "Search"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    attempt(async () => {
      const { results } = await call("POST", "/v1/search", {
        body: { user_id: user, query: query.value, mode: mode.value, top_k: 10, explain: true },
      });
      clear(out).append(results.length ? table([
        ["#", (r) => String(results.indexOf(r) + 1)],
        ["Memory", (r) => h("div", {}, h("p", { class: "content", text: r.content }), bars(r.explain), badge(r.type))],
        ...PARTS.map((p) => [p, (r) => h("span", { class: `num ${p}`, text: num(r.explain[p]) })]),
      ], results, { class: "explain" }) : h("p", { class: "muted", text: "Nothing found." }));
    });
  });
  body.append(form, h("p", { class: "muted", text: "final = w·relevance + importance + recency; relevance fuses similarity, lexical, entity, time, neighbour and expansion." }), out);
}

export async function contextView(body, who, user) {
  const query = h("textarea", { name: "message", rows: 2, placeholder: "a user message", required: true, "aria-label": "message" });
  const out = h("div", { id: "context" });
  const form = h("form", { class: "filters", id: "context-form" }, query, h("button", { type: "submit" }, "Preview context"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    attempt(async () => {
      const got = await call("POST", "/v1/context", { body: { user_id: user, query: query.value } });
      // Why each item is in the block: the profile first, then what the message retrieved.
      const items = [
        ...(got.profile || []).map((m) => ({ text: m.content, why: m.why })),
        ...got.facts.map((f) => ({ text: `${f.category}.${f.key}: ${f.value}`, why: f.why || "fact" })),
        ...got.memories.map((m) => ({ text: m.content, why: m.why || "retrieved" })),
      ];
      clear(out).append(
        h("p", {}, badge(`${got.tokens} tokens`, "tokens"), badge(`profile ${got.profile_tokens || 0} tokens`, "profile-tokens"),
          ` ${(got.profile || []).length} profile, ${got.memories.length} memories, ${got.facts.length} facts`),
        h("pre", { class: "block", id: "context-block", text: got.context }),
        items.length ? table([["Item", (i) => h("p", { class: "content", text: i.text })],
          ["Why", (i) => h("span", { class: "why", text: i.why })]], items, { id: "context-why" }) : "");
    });
  });
  body.append(form, out);
}
