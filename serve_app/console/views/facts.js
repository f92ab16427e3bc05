// A user's facts with their history, and their sessions' extraction states.
import { get } from "../api.js";
import { badge, h, table, when } from "../dom.js";

// Pages of /v1/facts read for one view: a key's versions stay together, and a user with
// more fact versions than this sees a note instead of a console that never finishes.
const MAX_PAGES = 10;

export async function factsView(body, who, user) {
  const facts = [];
  let cursor = null;
  for (let n = 0; n < MAX_PAGES; n += 1) {
    const page = await get("/v1/facts", { user_id: user, include_inactive: "true", limit: 200, cursor });
    facts.push(...page.facts);
    cursor = page.next_cursor;
    if (!cursor) break;
  }
  if (cursor) body.append(h("p", { class: "muted", id: "facts-truncated",
    text: `Showing the first ${facts.length} fact versions.` }));
  const groups = new Map();
  for (const f of facts) {
    const k = `${f.category}/${f.key}`;
    if (!groups.has(k)) groups.set(k, []);
    groups.get(k).push(f);
  }
  if (!groups.size) return body.append(h("p", { class: "muted", text: "No facts." }));
  const list = h("div", { class: "facts", id: "facts" });
  for (const [k, versions] of groups) {
    versions.sort((a, b) => (a.created_at < b.created_at ? 1 : -1));
    const current = versions.find((f) => f.active);
    list.append(h("article", { class: "fact" },
      h("h3", { text: k }),
      h("p", { class: "content", text: current ? current.value : "(no current value)" }),
      table([
        ["Value", (f) => h("span", { class: f.active ? "" : "old", text: f.value })],
        ["State", (f) => badge(f.active ? "current" : "replaced", f.active ? "active" : "archived")],
        ["Source", (f) => f.source],
        ["Valid", (f) => `${when(f.valid_from)} → ${f.valid_until ? when(f.valid_until) : "now"}`],
        ["Written", (f) => when(f.created_at)],
      ], versions)));
  }
  body.append(list);
}

export async function sessionsView(body, who, user) {
  const { sessions } = await get(`/v1/users/${encodeURIComponent(user)}/sessions`);
  if (!sessions.length) return body.append(h("p", { class: "muted", text: "No sessions." }));
  body.append(table([
    ["Session", (s) => s.session_id],
    ["Turns", (s) => s.turns],
    ["Extracted", (s) => s.extracted_turns],
    ["Pending", (s) => (s.pending_turns ? badge(String(s.pending_turns), "pending") : "0")],
    ["Dead-lettered", (s) => (s.dead_turns ? badge(String(s.dead_turns), "dead") : "0")],
    ["Ended", (s) => (s.ended ? "yes" : "no")],
    ["Last turn", (s) => when(s.last_turn_at)],
  ], sessions, { id: "sessions" }));
}
