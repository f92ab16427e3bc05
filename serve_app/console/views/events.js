// Admin key: the tenant's events (newest first, paged backwards) and its webhook
// subscriptions with their delivery state, log and replay. No event content is asked
// for or shown: a forget deletes the owner's events, so nothing of theirs is left here.
import { call, get } from "../api.js";
import { attempt, badge, button, clear, h, table, when } from "../dom.js";

const PAGE = 25;
const STATE = { pending: "", delivered: "active", dead: "archived" };

export async function eventsView(body) {
  const subs = h("div", { id: "webhooks-part" });
  const feed = h("div", { id: "events-part" });
  body.append(h("h2", { text: "Webhook subscriptions" }), subs, h("h2", { text: "Recent events" }), feed);
  await subscriptions(subs);
  await recent(feed, []);
}

const lag = (s) => (s === null || s === undefined ? "—" : s < 60 ? `${s.toFixed(1)} s` : `${Math.round(s / 60)} min`);

async function subscriptions(part) {
  const { webhooks } = await get("/v1/admin/webhooks");
  clear(part);
  if (!webhooks.length) return part.append(h("p", { class: "muted", id: "no-webhooks", text: "No subscriptions. Create one with POST /v1/admin/webhooks." }));
  const log = h("div", { id: "delivery-log" });
  const show = (w) => button("Log", () => attempt(() => deliveries(log, w)), { "data-webhook": w.id, class: "link" });
  const replay = (w) => (w.dead ? button("Replay dead", () => attempt(async () => {
    const { replayed } = await call("POST", `/v1/admin/webhooks/${w.id}/replay`);
    await subscriptions(part);
    return replayed;
  }, "Dead deliveries queued again."), { "data-replay": w.id }) : "");
  part.append(table([
    ["URL", (w) => h("code", { text: w.url })],
    ["Types", (w) => (w.types.length ? w.types.join(", ") : "all")],
    ["Content", (w) => (w.include_content ? "yes" : "no")],
    ["State", (w) => (w.enabled ? badge("enabled", "active") : badge("disabled", "archived"))],
    ["Pending", (w) => w.pending],
    ["Dead", (w) => (w.dead ? badge(String(w.dead), "archived") : "0")],
    ["Lag", (w) => lag(w.lag_s)],
    ["Last delivered", (w) => when(w.last_delivered_at)],
    ["", (w) => h("span", {}, show(w), " ", replay(w))],
  ], webhooks, { id: "webhooks" }), log);
}

async function deliveries(log, w) {
  const { deliveries: rows } = await get(`/v1/admin/webhooks/${w.id}/deliveries`, { limit: 50 });
  clear(log).append(h("h3", { text: `Delivery log · ${w.url}` }), table([
    ["Event", (d) => h("code", { text: d.event_id })], ["Type", (d) => d.type], ["Owner", (d) => d.owner],
    ["Status", (d) => badge(d.status, STATE[d.status] || "")], ["Attempts", (d) => d.attempts],
    ["Answer", (d) => d.last_status || "—"], ["Error", (d) => h("code", { text: d.last_error || "" })],
    ["Queued", (d) => when(d.created_at)], ["Delivered", (d) => when(d.delivered_at)],
  ], rows, { id: "deliveries" }));
}

// ``back``: the cursors of the pages before this one (to page newer again).
async function recent(part, back) {
  const at = back[back.length - 1];
  const page = await get("/v1/events", { order: "desc", limit: PAGE, after: at });
  clear(part);
  if (!page.events.length && !back.length) return part.append(h("p", { class: "muted", id: "no-events", text: "No events yet." }));
  const older = button("Older", () => attempt(() => recent(part, [...back, page.next_cursor])), { id: "events-older", disabled: page.events.length < PAGE });
  const newer = button("Newer", () => attempt(() => recent(part, back.slice(0, -1))), { id: "events-newer", disabled: !back.length });
  part.append(table([
    ["When", (e) => when(e.occurred_at)], ["Type", (e) => badge(e.type)], ["User", (e) => e.user_id || "—"],
    ["Agent", (e) => e.agent_id || "—"], ["Memory", (e) => (e.memory_id ? h("code", { text: e.memory_id.slice(0, 8) }) : "—")],
    ["Version", (e) => e.version ?? "—"], ["Decision", (e) => e.decision || "—"], ["Actor", (e) => e.actor || "—"],
  ], page.events, { id: "events" }), h("div", { class: "filters" }, newer, older));
}
