// The console's shell: the key form, who the key is, the navigation and the router.
import { ApiError, get, keyStore } from "./api.js";
import { append, button, clear, flash, h } from "./dom.js";
import { adminView } from "./views/admin.js";
import { documentsView } from "./views/documents.js";
import { userView } from "./views/user.js";
import { usersView } from "./views/users.js";

const main = () => document.getElementById("main");
let who = null; // {role, tenant, user_id} of the key

function loginView() {
  const input = h("input", {
    type: "password", id: "key", name: "key", autocomplete: "off", required: true,
    placeholder: "msk_… or a sign-in token", "aria-label": "API key or token",
  });
  const form = h("form", { class: "card login", id: "login" },
    h("h1", { text: "Memory console" }),
    h("p", { class: "muted", text: "Paste an API key, or a sign-in token (JWT) from your identity provider. It stays in this tab (sessionStorage) and is sent only to this service's API." }),
    input, h("button", { type: "submit" }, "Open"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    keyStore.set(input.value.trim());
    who = null;
    await route();
  });
  return form;
}

async function identify() {
  const ping = await get("/mem0/v1/ping/");
  return { role: ping.role, tenant: ping.org_id, user_id: ping.user_id };
}

function nav() {
  const links = [];
  if (who.role === "user") links.push(["My memories", `#/user/${encodeURIComponent(who.user_id)}`]);
  else links.push(["Users", "#/users"]);
  links.push(["Documents", "#/documents"]);
  if (who.role === "admin") links.push(["Admin", "#/admin/keys"]);
  const bar = clear(document.getElementById("nav"));
  append(bar, links.map(([label, href]) => h("a", { href }, label)));
  const me = clear(document.getElementById("who"));
  append(me, [
    h("span", { text: `${who.role} · ${who.tenant}${who.user_id ? " · " + who.user_id : ""}` }),
    button("Sign out", () => { keyStore.clear(); who = null; window.location.hash = "#/"; route(); },
      { class: "link", id: "signout" }),
  ]);
}

export async function route() {
  const root = clear(main());
  clear(document.getElementById("flash"));
  if (!keyStore.get()) {
    clear(document.getElementById("nav"));
    clear(document.getElementById("who"));
    root.append(loginView());
    return;
  }
  try {
    who = who || (await identify());
  } catch (e) {
    keyStore.clear();
    root.append(loginView());
    flash(e instanceof ApiError ? `${e.code}: ${e.message}` : String(e), "err");
    return;
  }
  nav();
  const parts = window.location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  const [section, ...rest] = parts;
  try {
    if (section === "user" && rest[0]) await userView(root, who, rest[0], rest.slice(1));
    else if (section === "documents") await documentsView(root, who);
    else if (section === "admin" && who.role === "admin") await adminView(root, who, rest[0] || "keys");
    else if (who.role === "user") window.location.hash = `#/user/${encodeURIComponent(who.user_id)}`;
    else await usersView(root, who, section === "users" ? rest[0] : undefined);
  } catch (e) {
    root.append(h("p", { class: "flash err", text: `${e.code || "error"}: ${e.message}` }));
  }
}

window.addEventListener("hashchange", route);
route();
