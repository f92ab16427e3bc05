// The tenant's users (GET /v1/users), a page at a time, with counts and last activity.
import { get } from "../api.js";
import { h, table, when } from "../dom.js";

export async function usersView(root, who, cursor) {
  const page = await get("/v1/users", { limit: 50, cursor });
  const link = (u) => h("a", { href: `#/user/${encodeURIComponent(u.user_id)}`, text: u.user_id });
  root.append(
    h("h1", { text: `Users of ${who.tenant}` }),
    page.users.length ? table([
      ["User", link],
      ["Memories", (u) => u.memories],
      ["Archived", (u) => u.archived],
      ["Facts", (u) => u.facts],
      ["Sessions", (u) => u.sessions],
      ["Pending turns", (u) => u.pending_turns],
      ["Dead turns", (u) => u.dead_turns],
      ["Last activity", (u) => when(u.last_activity)],
    ], page.users, { id: "users" }) : h("p", { class: "muted", text: "No users yet." }),
    h("p", { class: "pager" },
      cursor ? h("a", { href: "#/users" }, "First page") : null,
      page.next_cursor ? h("a", { href: `#/users/${encodeURIComponent(page.next_cursor)}`, id: "next" }, "Next page") : null),
    h("form", { class: "inline", id: "open-user", onsubmit: (ev) => {
      ev.preventDefault();
      const id = ev.target.elements.user.value.trim();
      if (id) window.location.hash = `#/user/${encodeURIComponent(id)}`;
    } }, h("input", { name: "user", placeholder: "user id", "aria-label": "user id" }),
      h("button", { type: "submit" }, "Open user")),
  );
}
