"""The memory console in a real browser (Debian's chromium, Playwright) against the real
service: every view and action end to end, what a user key may see, hostile content shown
as text, a phone's width; a screenshot of each view (tests/e2e/browser.py)."""

from __future__ import annotations

import secrets
import time

import httpx
import pytest
from playwright.sync_api import Page, expect

from serve_app.testing.llm_server import extraction, memory
from tests.e2e.browser import Shots, chromium_browser
from tests.e2e.conftest import client_for

pytestmark = pytest.mark.e2e
XSS = (
    '<script>window.__pwned = "script"</script>',
    "<img src=x onerror=\"window.__pwned = 'img'\">",
)


@pytest.fixture(scope="module")
def browser():
    with chromium_browser() as b:
        yield b


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Shots:
    return Shots(tmp_path_factory.mktemp("console-shots"))


@pytest.fixture(scope="module")
def admin(service):
    with client_for(service, service.admin_key) as c:
        yield c


class Console:
    """One browser tab on /console, signed in with ``key``; page errors are collected
    (a Content-Security-Policy violation or a script error fails the test)."""

    def __init__(self, browser, base_url: str, key: str, width: int = 1280) -> None:
        self.ctx = browser.new_context(viewport={"width": width, "height": 900})
        self.page: Page = self.ctx.new_page()
        self.errors: list[str] = []
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("dialog", lambda d: d.accept())
        self.base = base_url
        self.page.goto(f"{base_url}/console/")
        self.page.fill("#key", key)
        self.page.click("#login button[type=submit]")
        expect(self.page.locator("#signout")).to_be_visible()

    def go(self, fragment: str) -> Page:
        self.page.goto(f"{self.base}/console/#/{fragment}")
        self.page.wait_for_load_state("networkidle")
        return self.page

    def close(self) -> None:
        self.ctx.close()
        # 403/404 answers the test provokes are logged by chromium as failed loads
        bad = [e for e in self.errors if "status of 40" not in e]
        assert bad == [], bad


def wait_for(fn, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := fn():
            return value
        time.sleep(0.3)
    raise AssertionError("timed out")


def seed(api: httpx.Client, fake_llm, uid: str) -> dict:
    """A user with plain, archived, edited, invalidated and hostile memories, facts with
    history, an extracted session, a dead-lettered one and a chat request."""

    def add(content: str, **kw) -> dict:
        r = api.post(
            "/v1/memories", json={"user_id": uid, "content": content, "infer": False, **kw}
        )
        assert r.status_code == 201, r.text
        return r.json()

    out = {
        "tea": add("Likes green tea in the morning", type="preference"),
        "oslo": add("Lives in Oslo near the fjord", type="fact"),
        "old": add("Works at Initech as a tester"),
        "xss": [add(x) for x in XSS],
    }
    q = {"user_id": uid}
    r = api.patch(
        f"/v1/memories/{out['old']['id']}",
        params=q,
        json={"content": "Works at Globex as an engineer"},
    )
    assert r.status_code == 200, r.text
    out["archived"] = add("Used to play the violin")
    assert (
        api.patch(
            f"/v1/memories/{out['archived']['id']}", params=q, json={"status": "archived"}
        ).status_code
        == 200
    )
    out["retired"] = add("Owned a red bicycle")
    r = api.patch(
        f"/v1/memories/{out['retired']['id']}",
        params=q,
        json={"valid_until": "2024-01-01T00:00:00Z"},
    )
    assert r.status_code == 200, r.text
    for city in ("Bergen", "Oslo"):
        r = api.put("/v1/facts", json={**q, "category": "profile", "key": "city", "value": city})
        assert r.status_code == 200, r.text
    # The refusal first: the first matching rule answers, and the poisoned session's prompt
    # may quote the user's kayak memory (reconcile shows related memories).
    fake_llm.add_rule(f"POISON-{uid}", "", kind=None, status=400, message="context too long")
    fake_llm.add_rule(f"kayak-{uid}", extraction([memory(f"Paddles a kayak-{uid} on Sundays")]))
    for sid, text in (("s-ok", f"I paddle my kayak-{uid} on Sundays"), ("s-bad", f"POISON-{uid}")):
        turn = {**q, "messages": [{"role": "user", "content": text}]}
        assert api.post(f"/v1/sessions/{sid}/turns", json=turn).status_code == 202
        assert api.post(f"/v1/sessions/{sid}/end", json=q).status_code == 202
    chat = {"model": "fake", "user": uid, "messages": [{"role": "user", "content": "hello"}]}
    assert api.post("/v1/chat/completions", json=chat).status_code == 200
    return out


@pytest.fixture(scope="module")
def user(api, admin, fake_llm) -> tuple[str, dict]:
    uid = "cu_" + secrets.token_hex(5)
    made = seed(api, fake_llm, uid)
    dead = lambda: admin.get("/v1/admin/extraction/dead-letters", params=q(uid)).json()  # noqa: E731
    wait_for(lambda: dead()["dead_letters"], 90)  # the poisoned session is dead-lettered
    wait_for(lambda: api.get("/v1/sessions/s-ok", params=q(uid)).json()["pending_turns"] == 0)
    return uid, made


def q(uid: str) -> dict:
    return {"user_id": uid}


def test_operator_flows_with_a_service_key(browser, service, keys, api, user, shots):
    uid, made = user
    c = Console(browser, service.base_url, keys.service)
    page = c.page
    shots.take(page, "01-users")
    page = c.go("users/cu_")  # the page of users after "cu_" (other tests' users before it)
    row = page.locator("#users tr", has_text=uid)
    counts = next(
        u
        for u in api.get("/v1/users", params={"cursor": "cu_"}).json()["users"]
        if u["user_id"] == uid
    )
    for label in ("Memories", "Archived", "Facts", "Sessions"):
        expect(row.locator(f"td[data-label={label}]")).to_have_text(str(counts[label.lower()]))
    row.get_by_role("link", name=uid).click()
    timeline = page.locator("#timeline")
    expect(timeline).to_contain_text("Likes green tea in the morning")
    expect(timeline).not_to_contain_text("Used to play the violin")  # archived: filtered out
    expect(timeline).not_to_contain_text("Owned a red bicycle")  # invalidated: toggle off
    shots.take(page, "02-user-timeline")
    page.select_option("#filters select[name=status]", "archived")
    expect(timeline).to_contain_text("Used to play the violin")
    expect(timeline).not_to_contain_text("Likes green tea")
    page.select_option("#filters select[name=status]", "active")
    page.check("#filters input[name=invalidated]")
    card = timeline.locator("article", has_text="Owned a red bicycle")
    expect(card).to_contain_text("→ 2024-01-01")  # its validity interval
    page.select_option("#filters select[name=type]", "preference")
    expect(timeline.locator("article")).to_have_count(1)
    expect(timeline).to_contain_text("Likes green tea")

    c.go(f"user/{uid}/memory/{made['old']['id']}")
    update = page.locator("#history li", has_text="UPDATE")
    expect(update.locator("ins").first).to_be_visible()
    gone, came = update.locator("del").all_inner_texts(), update.locator("ins").all_inner_texts()
    kept = update.locator(".diff span").all_inner_texts()
    assert "Initech" in gone and "Globex" in came and "tester" in " ".join(gone)  # word diff
    assert "Works at " in kept and "Works" not in " ".join(gone + came)
    shots.take(page, "03-memory-history-diff")

    c.go(f"user/{uid}/facts")
    fact = page.locator("#facts article", has_text="profile/city")
    expect(fact.locator("p.content")).to_have_text("Oslo")
    expect(fact.locator("span.old")).to_have_text("Bergen")  # the history: replaced value
    shots.take(page, "04-facts")

    c.go(f"user/{uid}/sessions")
    expect(page.locator("#sessions tr", has_text="s-bad")).to_contain_text("1")
    ok = api.get(f"/v1/users/{uid}/sessions").json()["sessions"]
    bad = next(s for s in ok if s["session_id"] == "s-bad")
    assert bad["dead_turns"] == 1  # what the view shows, from the API
    expect(page.locator("#sessions tr", has_text="s-bad").locator(".badge.dead")).to_have_text("1")
    shots.take(page, "05-sessions")

    c.go(f"user/{uid}/search")
    page.fill("#search input[name=query]", "green tea")
    page.click("#search button[type=submit]")
    first = page.locator("#results tbody tr").first
    expect(first).to_contain_text("Likes green tea in the morning")
    ask = {"user_id": uid, "query": "green tea", "mode": "hybrid", "top_k": 10, "explain": True}
    want = api.post("/v1/search", json=ask).json()["results"][0]
    for part in ("similarity", "lexical", "importance", "recency", "time", "expansion", "final"):
        expect(first.locator(f"span.num.{part}")).to_have_text(f"{want['explain'][part]:.3f}")
    shots.take(page, "06-search-explain")

    c.go(f"user/{uid}/context")
    page.fill("#context-form textarea", "Where do I live?")
    page.click("#context-form button[type=submit]")
    ctx = api.post("/v1/context", json={"user_id": uid, "query": "Where do I live?"}).json()
    expect(page.locator("#context-block")).to_have_text(ctx["context"])  # the exact block
    expect(page.locator("#context .badge.tokens")).to_have_text(f"{ctx['tokens']} tokens")
    profile_tokens = f"profile {ctx.get('profile_tokens') or 0} tokens"
    expect(page.locator("#context .badge.profile-tokens")).to_have_text(profile_tokens)
    shots.take(page, "07-context-preview")

    # Actions: edit, archive, delete through the timeline; the API sees each.
    c.go(f"user/{uid}/memories")
    tea = timeline.locator(f"article[data-id='{made['tea']['id']}']")
    tea.get_by_role("button", name="Edit").click()
    tea.locator("textarea").fill("Likes jasmine tea in the morning")
    tea.get_by_role("button", name="Save").click()
    expect(timeline).to_contain_text("Likes jasmine tea in the morning")
    got = api.get(f"/v1/memories/{made['tea']['id']}", params=q(uid)).json()
    assert got["content"] == "Likes jasmine tea in the morning" and got["version"] == 2
    timeline.locator(f"article[data-id='{made['oslo']['id']}']").get_by_role(
        "button", name="Archive"
    ).click()
    expect(timeline).not_to_contain_text("Lives in Oslo")
    assert (
        api.get(f"/v1/memories/{made['oslo']['id']}", params=q(uid)).json()["status"] == "archived"
    )
    tea = timeline.locator(f"article[data-id='{made['tea']['id']}']")
    tea.get_by_role("button", name="Delete").click()
    expect(timeline).not_to_contain_text("jasmine")
    assert api.get(f"/v1/memories/{made['tea']['id']}", params=q(uid)).status_code == 404

    c.go(f"user/{uid}/actions")
    page.click("#export")
    expect(page.locator("#export-link")).to_be_visible()
    records = int(page.locator("#export-result").inner_text().split()[0])
    lines = api.get("/v1/export", params=q(uid)).text.strip().splitlines()
    assert records == len(lines) > 5
    forget = page.locator("#forget button[type=submit]")
    expect(forget).to_be_disabled()
    page.fill("#forget input", uid[:-1])  # a near miss does not arm it
    expect(forget).to_be_disabled()
    page.fill("#forget input", uid)
    shots.take(page, "08-actions")
    forget.click()
    expect(page.locator("#forgotten")).to_contain_text("memories")
    assert api.get("/v1/memories", params=q(uid)).json()["memories"] == []
    c.close()


def test_hostile_content_is_shown_as_text(browser, service, keys, api):
    uid = "cx_" + secrets.token_hex(5)
    ids = []
    for x in XSS:
        r = api.post("/v1/memories", json={"user_id": uid, "content": x, "infer": False})
        ids.append(r.json()["id"])
    api.patch(f"/v1/memories/{ids[0]}", params=q(uid), json={"content": XSS[0] + " <b>bold</b>"})
    r = api.put("/v1/facts", json={"user_id": uid, "category": "c", "key": "k", "value": XSS[1]})
    assert r.status_code == 200, r.text
    c = Console(browser, service.base_url, keys.service)
    page = c.go(f"user/{uid}/memories")
    for x in XSS:
        expect(page.locator("#timeline")).to_contain_text(x)  # literally, as typed
    shown = {f"user/{uid}/memory/{ids[0]}": XSS[0] + " <b>bold</b>", f"user/{uid}/facts": XSS[1]}
    for view, text in shown.items():
        c.go(view)
        expect(page.locator("main")).to_contain_text(text)
    c.go(f"user/{uid}/search")
    page.fill("#search input[name=query]", "script img onerror")
    page.click("#search button[type=submit]")
    expect(page.locator("#results")).to_contain_text(XSS[1])
    assert page.evaluate("window.__pwned") is None  # the same tab all along: nothing ran
    assert page.locator("main img, main script, main b").count() == 0
    c.close()


def test_a_user_key_sees_only_its_user(browser, service, api, shots):
    me, other = "cm_" + secrets.token_hex(4), "co_" + secrets.token_hex(4)
    for who in (me, other):
        api.post(
            "/v1/memories", json={"user_id": who, "content": f"secret of {who}", "infer": False}
        )
    key = service.add_key("msk_" + secrets.token_hex(16), "default", "user", me)
    c = Console(browser, service.base_url, key)
    page = c.page
    expect(page.locator("#timeline")).to_contain_text(f"secret of {me}")  # lands on its own
    expect(page.locator("#nav")).not_to_contain_text("Users")
    expect(page.locator("#nav")).not_to_contain_text("Admin")
    shots.take(page, "09-user-key-view")
    c.go("users")  # the directory shows only the key's user: the console goes there
    expect(page.locator("h1")).to_have_text(f"User {me}")
    c.go(f"user/{other}/memories")
    expect(page.locator("main")).to_contain_text("forbidden")
    expect(page.locator("main")).not_to_contain_text(f"secret of {other}")
    c.go("admin/keys")
    expect(page.locator("main")).not_to_contain_text("Create key")
    c.close()


def test_admin_views(browser, service, api, admin, fake_llm, user, shots):
    uid = "cd_" + secrets.token_hex(5)  # a dead letter of its own (the flows forget theirs)
    fake_llm.add_rule(f"POISON-{uid}", "", kind=None, status=400, message="context too long")
    turn = {**q(uid), "messages": [{"role": "user", "content": f"POISON-{uid}"}]}
    assert api.post("/v1/sessions/s-bad/turns", json=turn).status_code == 202
    assert api.post("/v1/sessions/s-bad/end", json=q(uid)).status_code == 202
    dead = lambda: admin.get("/v1/admin/extraction/dead-letters", params=q(uid)).json()  # noqa: E731
    before = wait_for(lambda: dead()["dead_letters"], 90)[0]
    c = Console(browser, service.base_url, service.admin_key)
    page = c.go("admin/keys")
    page.select_option("#new-key select[name=role]", "user")
    page.fill("#new-key input[name=user_id]", "console_made")
    page.fill("#new-key input[name=name]", "made in the console")
    page.click("#new-key button[type=submit]")
    secret = page.locator("#new-secret code").inner_text()
    made = next(
        k for k in admin.get("/v1/admin/keys").json()["keys"] if k["name"] == "made in the console"
    )
    assert secret.startswith(made["prefix"]) and made["revoked_at"] is None
    shots.take(page, "10-admin-keys")
    page.locator(f"button[data-key='{made['id']}']").click()
    expect(page.locator(f"button[data-key='{made['id']}']")).to_have_count(0)
    assert admin.get(f"/v1/admin/keys/{made['id']}").json()["revoked_at"] is not None

    c.go("admin/usage")
    expect(page.locator("#usage-chart rect.barrect").first).to_be_visible()
    # Every LLM purpose, from GET /v1/admin/usage: extraction's tokens are charted and
    # tabled, and the top end users listed.
    spent = admin.get("/v1/admin/usage", params={"group_by": "purpose"}).json()
    extract = next(r for r in spent["rows"] if r["purpose"] == "extract")
    assert extract["calls"] > 0 and extract["prompt_tokens"] > 0
    expect(page.locator("#llm-chart rect.seg-extract").first).to_be_visible()
    expect(page.locator("#llm-purposes")).to_contain_text("extract")
    expect(page.locator("#llm-purposes")).to_contain_text(str(extract["prompt_tokens"]))
    top = spent["top_users"][0]["user_id"]
    expect(page.locator("#top-users tbody tr").first).to_contain_text(top)
    shots.take(page, "11-admin-usage")

    c.go("admin/dead")
    retry = page.locator("#dead tr", has_text=uid).get_by_role("button", name="Retry")
    shots.take(page, "12-admin-dead-letters")
    retry.click()
    expect(page.locator("#flash")).to_contain_text("Queued")
    # Retried: out of the list (the scripted refusal may dead-letter it again, later)
    wait_for(
        lambda: (
            not dead()["dead_letters"] or dead()["dead_letters"][0]["dead_at"] > before["dead_at"]
        )
    )

    c.go("admin/models")
    expect(page.locator("#models")).to_contain_text("active")
    expect(page.locator("#models")).to_contain_text("100%")
    shots.take(page, "13-admin-models")

    c.go("admin/settings")
    view = admin.get("/v1/admin/tenant/settings").json()
    expect(page.locator("#settings-effective")).to_contain_text('"quotas"')
    assert '"quotas"' in str(view).replace("'", '"')
    shots.take(page, "14-admin-settings")
    c.close()


def test_phone_width(browser, service, keys, api, shots):
    uid = "cp_" + secrets.token_hex(4)
    for i in range(3):
        api.post(
            "/v1/memories",
            json={"user_id": uid, "content": f"phone memory {i} " + "w" * 80, "infer": False},
        )
    c = Console(browser, service.base_url, keys.service, width=390)
    for view, name in ((f"user/{uid}/memories", "15-phone-timeline"), ("users", "16-phone-users")):
        page = c.go(view)
        page.wait_for_selector("main h1")
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 391, (view, width)  # nothing wider than the phone
        shots.take(page, name)
    page = c.go(f"user/{uid}/search")
    page.fill("#search input[name=query]", "phone memory")
    page.click("#search button[type=submit]")
    expect(page.locator("#results")).to_contain_text("phone memory")
    assert page.evaluate("document.documentElement.scrollWidth") <= 391
    shots.take(page, "17-phone-search")
    c.close()


def test_the_first_settings_change_of_a_new_tenant(browser, service, shots):
    """A tenant that never set anything is at version 0; the console sends the version it
    shows as If-Match, which the API refused, so the first change always failed."""
    key = service.add_key("msk_" + secrets.token_hex(16), "t_" + secrets.token_hex(4), "admin")
    c = Console(browser, service.base_url, key)
    page = c.go("admin/settings")
    expect(page.locator("#settings-form")).to_be_visible()
    page.fill("#settings-form textarea[name=patch]", '{"quotas": {"max_memories_per_user": 77}}')
    page.click("#settings-form button[type=submit]")
    expect(page.locator("#flash")).to_contain_text("Settings changed.")
    expect(page.locator("#settings-own")).to_contain_text('"max_memories_per_user": 77')
    with client_for(service, key) as admin:
        view = admin.get("/v1/admin/tenant/settings").json()
    assert view["version"] == 1 and view["settings"] == {"quotas": {"max_memories_per_user": 77}}
    shots.take(page, "18-admin-settings-changed")
    c.close()


def test_a_sign_in_token_opens_its_users_console_and_admin_sees_the_issuers(
    browser, service, shots
):
    from serve_app.testing.jwt_issuer import LocalIssuer

    issuer = LocalIssuer().start()
    try:
        tenant, me = "ct_" + secrets.token_hex(4), "tu_" + secrets.token_hex(4)
        admin_key = service.add_key("msk_" + secrets.token_hex(16), tenant, "admin")
        with client_for(service, admin_key) as a:
            r = a.patch(
                "/v1/admin/tenant/settings",
                json={"identity": {"issuers": [issuer.config("console")]}},
            )
            assert r.status_code == 200, r.text
        token = issuer.token(me, "console")
        with client_for(service, token) as t:
            assert (
                t.post("/v1/memories", json={"content": f"token note of {me}"}).status_code == 201
            )
        c = Console(browser, service.base_url, token)
        expect(c.page.locator("#timeline")).to_contain_text(f"token note of {me}")
        expect(c.page.locator("#who")).to_contain_text(f"user · {tenant} · {me}")
        shots.take(c.page, "12-token-user-view")
        c.close()
        c = Console(browser, service.base_url, admin_key)
        page = c.go("admin/settings")
        expect(page.locator("#issuers")).to_contain_text(issuer.issuer)
        expect(page.locator("#issuers")).to_contain_text("console")
        shots.take(page, "13-admin-trusted-issuers")
        c.close()
    finally:
        issuer.stop()


def test_events_and_webhooks_view(browser, service, api, admin, shots):
    """Admin · Events: subscriptions with their delivery state and log, the tenant's
    recent events newest first and paged; no content, nothing of a forgotten user."""
    from serve_app.testing.webhook_receiver import Receiver

    uid, gone = "ev_" + secrets.token_hex(4), "evgone_" + secrets.token_hex(4)
    receiver = Receiver().start()
    made = []
    try:
        for path in ("/ok", "/fail"):
            r = admin.post(
                "/v1/admin/webhooks", json={"url": receiver.url(path), "types": ["memory.added"]}
            )
            assert r.status_code == 201, r.text
            made.append(r.json())
        items = [{"content": f"console event note {i}", "infer": False} for i in range(30)]
        r = api.post("/v1/memories/batch", json={"user_id": uid, "items": items})
        assert r.status_code == 201, r.text
        r = api.post(
            "/v1/memories", json={"user_id": gone, "content": "GONE-SECRET", "infer": False}
        )
        assert r.status_code in (200, 201), r.text
        wait_for(lambda: len({x.headers["webhook-id"] for x in receiver.at("/ok")}) >= 31, 60)
        assert api.delete("/v1/memories", params={"user_id": gone}).status_code == 200
        ok, fail = made
        state = lambda: {w["id"]: w for w in admin.get("/v1/admin/webhooks").json()["webhooks"]}  # noqa: E731
        wait_for(lambda: state()[ok["id"]]["last_delivered_at"] and state()[fail["id"]]["pending"])

        c = Console(browser, service.base_url, service.admin_key)
        page = c.go("admin/events")
        subs = page.locator("#webhooks")
        ok_row = subs.locator("tr", has_text=receiver.url("/ok"))
        fail_row = subs.locator("tr", has_text=receiver.url("/fail"))
        expect(ok_row).to_contain_text("enabled")
        expect(ok_row.locator("td[data-label='Last delivered']")).not_to_have_text("—")
        expect(fail_row.locator("td[data-label='Pending']")).not_to_have_text("0")
        expect(fail_row.locator("td[data-label='Lag']")).to_contain_text(" s")
        ok_row.get_by_role("button", name="Log").click()
        expect(page.locator("#deliveries")).to_contain_text("delivered")
        expect(page.locator("#deliveries")).to_contain_text("memory.added")

        events = page.locator("#events")
        expect(events.locator("tbody tr")).to_have_count(25)  # a page, newest first
        gone_rows = events.locator("tr", has_text=gone)
        expect(gone_rows).to_have_count(1)  # the forget's notice, nothing else of theirs
        expect(gone_rows).to_contain_text("forget.completed")
        assert "GONE-SECRET" not in page.content() and "console event note" not in page.content()
        shots.take(page, "15-admin-events")
        page.click("#events-older")
        expect(page.locator("#events-newer")).to_be_enabled()
        expect(events.locator("tr", has_text=gone)).to_have_count(0)  # an older page
        expect(events).to_contain_text(uid)
        page.click("#events-newer")
        expect(events.locator("tr", has_text=gone)).to_have_count(1)
        c.close()
    finally:
        for w in made:
            admin.delete(f"/v1/admin/webhooks/{w['id']}")
        receiver.stop()


GUIDE = (
    "# Travel policy\n\nBook flights through the portal.\n\n"
    "## Hotels\n\nThe nightly cap is 180 euros in Berlin.\n\n"
    "## Meals\n\nDinner is covered up to 40 euros.\n"
)


def test_documents_view(browser, service, shots):
    """Documents: the tenant's knowledge base listed (paged, filtered by scope and tag), a
    document's chunks with their heading path and span (paged), delete with a confirm that
    is gone from the list and the API; a user key deletes only its own documents."""
    tenant = "cdoc_" + secrets.token_hex(4)
    key = service.add_key("msk_" + secrets.token_hex(16), tenant, "service")
    user_key = service.add_key("msk_" + secrets.token_hex(16), tenant, "user", "ana")
    manual = "".join(f"## Step {i}\n\nTurn dial {i} to position {i * 7}.\n\n" for i in range(25))
    with client_for(service, key) as api:

        def post(**doc) -> dict:
            r = api.post("/v1/documents", json=doc)
            assert r.status_code == 201, r.text
            return r.json()

        travel = post(
            document_id="kb-travel", text=GUIDE, content_type="text/markdown", tags=["policy"]
        )
        assert travel["chunk_count"] == 3
        for i in range(23):  # 26 documents: a second page of the list (25 a page)
            post(document_id=f"kb-bulk-{i:02}", text=f"bulk note {i}", tags=["bulk"])
        big = post(
            document_id="kb-manual",
            title="Dial manual",
            text="# Manual\n\n" + manual,
            content_type="text/markdown",
            tags=["manual"],
        )
        assert big["chunk_count"] > 20  # a second page of chunks (20 a page)
        post(
            document_id="kb-notes",
            text="Ana's own notes on the trip.",
            scope="user",
            user_id="ana",
            tags=["notes"],
        )

        c = Console(browser, service.base_url, key)
        page = c.go("documents")
        rows = page.locator("#documents tbody tr")
        expect(rows).to_have_count(25)  # newest first: the Markdown guide is on page 2
        notes = page.locator("#documents tr", has_text="kb-notes")
        expect(notes).to_contain_text("user · ana")
        expect(notes).to_contain_text("notes")
        expect(page.locator("#documents tr", has_text="kb-travel")).to_have_count(0)
        shots.take(page, "19-documents")
        page.click("#documents-next")
        expect(rows).to_have_count(1)
        row = page.locator("#documents tr", has_text="kb-travel")
        expect(row).to_contain_text("Travel policy")
        expect(row.locator("td[data-label='Chunks']")).to_have_text("3")
        expect(row.locator("td[data-label='Version']")).to_have_text("1")
        expect(row.locator("td[data-label='Owner']")).to_contain_text("org")
        expect(row.locator("td[data-label='Tags']")).to_have_text("policy")
        page.click("#documents-prev")
        expect(rows).to_have_count(25)

        # Filters: scope and tag (the API's own filters)
        page.select_option("#document-filters select[name=scope]", "user")
        page.click("#document-filters button[type=submit]")
        expect(rows).to_have_count(1)
        expect(rows.first).to_contain_text("kb-notes")
        page.select_option("#document-filters select[name=scope]", "")
        page.fill("#document-filters input[name=tag]", "policy")
        page.click("#document-filters button[type=submit]")
        expect(rows).to_have_count(1)
        expect(rows.first).to_contain_text("kb-travel")

        # A document's chunks: index, heading path, the span it was cut from, the text
        page.click("button[data-open='kb-travel']")
        chunks = page.locator("#chunks tbody tr")
        expect(chunks).to_have_count(3)
        hotel = api.get("/v1/documents/kb-travel").json()["chunks"][1]
        expect(chunks.nth(1)).to_contain_text("Travel policy › Hotels")
        expect(chunks.nth(1)).to_contain_text(f"{hotel['char_start']}–{hotel['char_end']}")
        expect(chunks.nth(1)).to_contain_text("180 euros in Berlin")
        expect(page.locator("#chunks-next")).to_be_disabled()
        shots.take(page, "20-document-chunks")
        page.fill("#document-filters input[name=tag]", "manual")
        page.click("#document-filters button[type=submit]")
        page.click("button[data-open='kb-manual']")
        expect(chunks).to_have_count(20)
        page.click("#chunks-next")
        expect(chunks).to_have_count(big["chunk_count"] - 20)
        expect(chunks.first.locator("td[data-label='#']")).to_have_text("20")
        expect(page.locator("#chunks")).to_contain_text("Step 24")
        page.click("#chunks-prev")
        expect(chunks.first.locator("td[data-label='#']")).to_have_text("0")

        # Delete (the confirm is accepted): out of the list and out of the API
        page.fill("#document-filters input[name=tag]", "")
        page.click("#document-filters button[type=submit]")
        expect(page.locator("#documents tr", has_text="kb-notes")).to_have_count(1)
        page.click("button[data-delete='kb-notes']")
        expect(page.locator("#flash")).to_contain_text("kb-notes deleted")
        expect(page.locator("#documents tr", has_text="kb-notes")).to_have_count(0)
        expect(rows).to_have_count(25)  # the page refilled from the next one
        assert api.get("/v1/documents/kb-notes").status_code == 404
        listed = api.get("/v1/documents", params={"limit": 100}).json()["documents"]
        assert "kb-notes" not in {d["document_id"] for d in listed} and len(listed) == 25
        shots.take(page, "21-document-deleted")
        c.close()

        # A user key reads the org's documents but gets no Delete button on them
        post(document_id="kb-ana", text="Ana's second note.", scope="user", user_id="ana")
        c = Console(browser, service.base_url, user_key)
        page = c.go("documents")
        expect(page.locator("button[data-delete='kb-ana']")).to_have_count(1)
        expect(page.locator("button[data-delete='kb-manual']")).to_have_count(0)
        expect(page.locator("#documents tr", has_text="kb-manual")).to_have_count(1)
        c.close()
