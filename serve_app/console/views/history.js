// A memory's history (GET /v1/memories/{id}/history), each change as a word diff.
import { get } from "../api.js";
import { badge, h, when } from "../dom.js";

const MAX_CELLS = 250000; // beyond that: whole old text out, whole new text in

// Word-level diff by longest common subsequence: [["=", text] | ["-", text] | ["+", text]].
export function diff(before, after) {
  const a = (before || "").split(/(\s+)/).filter(Boolean);
  const b = (after || "").split(/(\s+)/).filter(Boolean);
  if (a.length * b.length > MAX_CELLS) return [["-", before || ""], ["+", after || ""]];
  const n = a.length, m = b.length;
  const lcs = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i--)
    for (let j = m - 1; j >= 0; j--)
      lcs[i][j] = a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
  const out = [];
  const push = (op, t) => (out.length && out[out.length - 1][0] === op ? (out[out.length - 1][1] += t) : out.push([op, t]));
  let i = 0, j = 0;
  while (i < n && j < m) {
    if (a[i] === b[j]) { push("=", a[i]); i++; j++; }
    else if (lcs[i + 1][j] >= lcs[i][j + 1]) push("-", a[i++]);
    else push("+", b[j++]);
  }
  while (i < n) push("-", a[i++]);
  while (j < m) push("+", b[j++]);
  return out;
}

function diffView(before, after) {
  const tag = { "=": "span", "-": "del", "+": "ins" };
  return h("p", { class: "diff" }, diff(before, after).map(([op, t]) => h(tag[op], { text: t })));
}

export async function historyView(body, user, id) {
  const [memory, hist] = await Promise.all([
    get(`/v1/memories/${encodeURIComponent(id)}`, { user_id: user }).catch(() => null),
    get(`/v1/memories/${encodeURIComponent(id)}/history`, { user_id: user }),
  ]);
  body.append(h("h2", { text: "History" }));
  if (memory) body.append(h("p", { class: "content current", text: memory.content }));
  if (hist.supersedes.length || hist.superseded_by)
    body.append(h("p", { class: "muted" },
      hist.supersedes.length ? `supersedes ${hist.supersedes.join(", ")}` : "",
      hist.superseded_by ? ` superseded by ${hist.superseded_by}` : ""));
  const list = h("ol", { class: "history", id: "history" });
  for (const e of hist.events) {
    const why = e.new_data && e.new_data.reason ? h("p", { class: "muted", text: `why: ${e.new_data.reason}` }) : null;
    list.append(h("li", {},
      h("div", { class: "meta" }, h("time", { text: when(e.created_at) }), badge(e.event), h("span", { class: "muted", text: e.actor || "" })),
      e.old_content !== null || e.new_content !== null ? diffView(e.old_content, e.new_content) : null, why));
  }
  body.append(list);
}
