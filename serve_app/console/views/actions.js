// Export a user's data; forget the user (typed confirmation).
import { call, fetchRaw } from "../api.js";
import { attempt, button, clear, h } from "../dom.js";

export async function actionsView(body, who, user) {
  const exported = h("p", { id: "export-result" });
  const doExport = () => attempt(async () => {
    const res = await fetchRaw("GET", "/v1/export", { query: { user_id: user } });
    const blob = await res.blob();
    const lines = (await blob.text()).split("\n").filter(Boolean).length;
    const link = h("a", { href: URL.createObjectURL(blob), download: `${user}.jsonl`, id: "export-link" }, `Download ${user}.jsonl`);
    clear(exported).append(`${lines} records · `, link);
  }, "Export ready.");
  const typed = h("input", { name: "confirm", autocomplete: "off", placeholder: user, "aria-label": "type the user id to confirm" });
  const forget = h("button", { type: "submit", class: "danger", disabled: true }, "Forget this user");
  typed.addEventListener("input", () => { forget.disabled = typed.value !== user; });
  const form = h("form", { class: "card", id: "forget" },
    h("h3", { text: "Forget the user" }),
    h("p", { text: "Deletes every memory, fact, turn and history event of this user. Type the user id to confirm." }),
    typed, forget);
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    if (typed.value !== user) return;
    attempt(async () => {
      const got = await call("DELETE", "/v1/memories", { query: { user_id: user } });
      clear(form).append(h("p", { id: "forgotten", text: `Forgotten: ${JSON.stringify(got.removed || { memories: got.deleted })}` }));
    }, "User forgotten.");
  });
  body.append(h("div", { class: "card" }, h("h3", { text: "Export" }),
    h("p", { text: "Everything kept for this user as JSON Lines (import it with POST /v1/import)." }),
    button("Export", doExport, { id: "export" }), exported), form);
}
