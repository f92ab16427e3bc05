// Admin key: keys, chat usage per day, dead letters, models and re-embed, events and
// webhooks (views/events.js), tenant settings.
import { call, get } from "../api.js";
import { attempt, badge, button, clear, h, table, tabs, when } from "../dom.js";
import { barChart, stackedChart } from "../chart.js";
import { eventsView } from "./events.js";

const SECTIONS = { keys: keysView, usage: usageView, dead: deadView, models: modelsView, events: eventsView, settings: settingsView };
const LABELS = { keys: "Keys", usage: "Usage", dead: "Dead letters", models: "Models", events: "Events", settings: "Tenant settings" };

export async function adminView(root, who, section) {
  root.append(h("h1", { text: `Admin · ${who.tenant}` }),
    tabs(Object.keys(SECTIONS).map((s) => [LABELS[s], `#/admin/${s}`]), `#/admin/${section}`));
  const body = h("section", { class: "section", id: `view-admin-${section}` });
  root.append(body);
  await (SECTIONS[section] || keysView)(body, who);
}

async function keysView(body) {
  const { keys } = await get("/v1/admin/keys");
  const refresh = async () => { clear(body); await keysView(body); };
  const role = h("select", { name: "role", "aria-label": "role" }, ["user", "service", "admin"].map((r) => h("option", { value: r }, r)));
  const user = h("input", { name: "user_id", placeholder: "user id (user keys)", "aria-label": "user id" });
  const name = h("input", { name: "name", placeholder: "name", "aria-label": "name" });
  const form = h("form", { class: "filters", id: "new-key" }, role, user, name, h("button", { type: "submit" }, "Create key"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    attempt(async () => {
      const k = await call("POST", "/v1/admin/keys", { body: { role: role.value, user_id: user.value || null, name: name.value || null } });
      await refresh();
      body.prepend(h("p", { class: "flash ok", id: "new-secret" }, "New key (shown once): ", h("code", { text: k.key })));
    }, "Key created.");
  });
  const revoke = (k) => button("Revoke", () => {
    if (!window.confirm(`Revoke key ${k.prefix}…?`)) return;
    attempt(async () => { await call("DELETE", `/v1/admin/keys/${k.id}`); await refresh(); }, "Key revoked.");
  }, { class: "danger", "data-key": k.id });
  body.append(form, table([
    ["Prefix", (k) => h("code", { text: k.prefix })],
    ["Role", (k) => badge(k.role)],
    ["User", (k) => k.user_id || "—"],
    ["Name", (k) => k.name || "—"],
    ["Created", (k) => when(k.created_at)],
    ["State", (k) => (k.revoked_at ? badge("revoked", "archived") : badge("active", "active"))],
    ["", (k) => (k.revoked_at ? "" : revoke(k))],
  ], keys, { id: "keys" }));
}

const PURPOSES = ["extract", "infer", "summarize", "consolidate", "chat", "rerank"];

async function usageView(body) {
  await llmUsage(body);
  await chatUsage(body);
}

// Every LLM call of the tenant (GET /v1/admin/usage): tokens per day by purpose, the
// totals per purpose and the end users who spent the most.
async function llmUsage(body) {
  const report = await get("/v1/admin/usage?group_by=day,purpose&top_users=10&limit=1000");
  body.append(h("h2", { text: "LLM tokens (every purpose)" }));
  if (!report.rows.length) return body.append(h("p", { class: "muted", id: "no-llm-usage", text: "No LLM calls yet." }));
  const days = new Map();
  const per = new Map();
  for (const r of report.rows) {
    const tokens = r.prompt_tokens + r.completion_tokens;
    const d = days.get(r.day) || {};
    d[r.purpose] = (d[r.purpose] || 0) + tokens;
    days.set(r.day, d);
    const p = per.get(r.purpose) || { calls: 0, prompt: 0, completion: 0, cached: 0, estimated: 0 };
    p.calls += r.calls; p.prompt += r.prompt_tokens; p.completion += r.completion_tokens;
    p.cached += r.cached_tokens; p.estimated += r.estimated_calls;
    per.set(r.purpose, p);
  }
  const stacks = [...days.entries()].sort(([a], [b]) => (a < b ? -1 : 1));
  const purposes = PURPOSES.filter((p) => per.has(p));
  body.append(
    stackedChart(stacks, purposes, { title: "LLM tokens per day by purpose", id: "llm-chart" }),
    table([["Purpose", ([p]) => badge(p)], ["Calls", ([, v]) => v.calls], ["Prompt", ([, v]) => v.prompt],
      ["Completion", ([, v]) => v.completion], ["Cached", ([, v]) => v.cached], ["Estimated calls", ([, v]) => v.estimated]],
    purposes.map((p) => [p, per.get(p)]), { id: "llm-purposes" }),
    h("h3", { text: `Top end users, ${report.since} to ${report.until}` }),
    table([["User", (u) => u.user_id], ["Calls", (u) => u.calls], ["Tokens", (u) => u.total_tokens]], report.top_users, { id: "top-users" }));
}

async function chatUsage(body) {
  const { usage } = await get("/v1/chat/usage");
  const days = new Map();
  for (const r of usage) {
    const d = days.get(r.day) || { requests: 0, refused: 0, tokens: 0 };
    d.requests += r.requests; d.refused += r.refused; d.tokens += r.prompt_tokens + r.completion_tokens;
    days.set(r.day, d);
  }
  const rows = [...days.entries()].sort(([a], [b]) => (a < b ? -1 : 1));
  body.append(h("h2", { text: "Chat proxy" }));
  if (!rows.length) return body.append(h("p", { class: "muted", text: "No chat requests yet." }));
  body.append(h("h3", { text: "Requests per day" }),
    barChart(rows.map(([d, v]) => [d, v.requests]), { title: "chat requests per day", id: "usage-chart" }),
    h("h3", { text: "Tokens per day" }),
    barChart(rows.map(([d, v]) => [d, v.tokens]), { title: "tokens per day" }),
    table([["Day", ([d]) => d], ["Requests", ([, v]) => v.requests], ["Refused", ([, v]) => v.refused], ["Tokens", ([, v]) => v.tokens]], rows));
}

async function deadView(body) {
  const { dead_letters: dead } = await get("/v1/admin/extraction/dead-letters");
  const refresh = async () => { clear(body); await deadView(body); };
  if (!dead.length) return body.append(h("p", { class: "muted", id: "no-dead", text: "No dead letters." }));
  const retry = (d) => button("Retry", () => attempt(async () => {
    await call("POST", "/v1/admin/extraction/dead-letters/retry", { body: { user_id: d.user_id, session_id: d.session_id } });
    await refresh();
  }, "Queued for extraction again."), { "data-session": d.session_id });
  body.append(table([
    ["User", (d) => d.user_id], ["Session", (d) => d.session_id], ["Turns", (d) => d.turns],
    ["Attempts", (d) => d.attempts], ["Error", (d) => h("code", { text: d.error || "" })],
    ["Dead since", (d) => when(d.dead_at)], ["", retry],
  ], dead, { id: "dead" }));
}

async function modelsView(body) {
  const { models } = await get("/v1/admin/models");
  body.append(table([
    ["Model", (m) => m.name], ["Table", (m) => h("code", { text: m.table })], ["Dim", (m) => m.dim],
    ["State", (m) => badge(m.state, m.state)],
    ["Re-embed", (m) => h("span", {}, h("progress", { max: 1, value: m.progress }), ` ${Math.round(m.progress * 100)}% (${m.done}/${m.total})`)],
    ["Since", (m) => when(m.activated_at)],
  ], models, { id: "models" }));
}

// The tenant's trusted token issuers (identity.issuers; docs/identity.md): whose sign-in
// tokens act as this tenant's users. Changed with the merge patch below.
function issuersTable(issuers) {
  const intro = h("h3", { text: "Trusted issuers (sign-in tokens)" });
  if (!issuers.length) {
    return h("div", {}, intro, h("p", { class: "muted", id: "no-issuers", text: 'None: only API keys sign in. Add one with {"identity": {"issuers": [{"issuer": …, "audiences": […], "jwks_url": …}]}}.' }));
  }
  const access = (i) => i.scope_claim ? `${i.scope_claim}: write ${(i.write_scopes || []).join(" ") || "—"}, read ${(i.read_scopes || []).join(" ") || "—"}` : "read-write";
  return h("div", {}, intro, table([
    ["Issuer", (i) => h("code", { text: i.issuer })],
    ["Audiences", (i) => i.audiences.join(", ")],
    ["Keys", (i) => i.jwks_url ? h("code", { text: i.jwks_url }) : `${i.jwks.keys.length} inline`],
    ["Algorithms", (i) => (i.algorithms || ["RS256", "ES256", "EdDSA"]).join(" ")],
    ["User claim", (i) => i.user_claim || "sub"],
    ["Access", access],
    ["Max lifetime", (i) => `${i.max_lifetime_s || 86400} s`],
    ["MCP sign-in", (i) => i.advertise ? badge("advertised", "active") : "—"],
  ], issuers, { id: "issuers" }));
}

async function settingsView(body) {
  let view;
  try {
    view = await get("/v1/admin/tenant/settings");
  } catch (e) {
    if (e.status === 404) return body.append(h("p", { class: "muted", text: "This service has no tenant settings." }));
    throw e;
  }
  const edit = h("textarea", { rows: 6, name: "patch", "aria-label": "settings change (JSON)", placeholder: '{"quotas": {"max_memories_per_user": 1000}}' });
  const form = h("form", { class: "card", id: "settings-form" }, h("h3", { text: "Change (JSON merge patch)" }), edit, h("button", { type: "submit" }, "Apply"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    attempt(async () => {
      await call("PATCH", "/v1/admin/tenant/settings", { body: JSON.parse(edit.value), headers: { "If-Match": `"${view.version}"` } });
      clear(body); await settingsView(body);
    }, "Settings changed.");
  });
  body.append(h("p", { class: "muted", text: `version ${view.version} · updated ${when(view.updated_at)} by ${view.updated_by || "—"}` }),
    issuersTable((view.settings.identity || {}).issuers || []),
    h("h3", { text: "This tenant's own values" }), h("pre", { class: "block", id: "settings-own", text: JSON.stringify(view.settings, null, 2) }),
    h("h3", { text: "In effect (environment defaults where unset)" }), h("pre", { class: "block", id: "settings-effective", text: JSON.stringify(view.effective, null, 2) }),
    form);
}
