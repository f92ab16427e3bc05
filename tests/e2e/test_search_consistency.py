"""Through HTTP: after PATCH, DELETE or a scope delete returns, search never shows old content."""

from __future__ import annotations


def ids_and_contents(api, uid: str, query: str, mode: str = "hybrid") -> dict[str, str]:
    r = api.post("/v1/search", json={"user_id": uid, "query": query, "top_k": 10, "mode": mode})
    assert r.status_code == 200, r.text
    return {m["id"]: m["content"] for m in r.json()["results"]}


def test_search_is_fresh_after_patch_delete_and_scope_delete(api, uid):
    items = [
        {"content": "My favourite colour is teal"},
        {"content": "I play the cello on Sundays"},
        {"content": "My dog is called Biscuit", "session_id": "s1"},
    ]
    r = api.post("/v1/memories/batch", json={"user_id": uid, "items": items})
    assert r.status_code == 201, r.text
    teal, cello, dog = (m["id"] for m in r.json()["memories"])
    for _ in range(3):  # warm whichever replica caches this user
        assert ids_and_contents(api, uid, "favourite colour")[teal].endswith("teal")

    r = api.patch(
        f"/v1/memories/{teal}",
        params={"user_id": uid},
        json={"content": "My favourite colour is amber"},
    )
    assert r.status_code == 200, r.text
    for mode in ("hybrid", "dense", "lexical"):
        found = ids_and_contents(api, uid, "favourite colour amber", mode)
        assert found.get(teal) == "My favourite colour is amber"
        assert "teal" not in " ".join(found.values())

    assert api.delete(f"/v1/memories/{cello}", params={"user_id": uid}).status_code == 204
    for mode in ("hybrid", "dense", "lexical"):
        assert cello not in ids_and_contents(api, uid, "cello Sundays", mode)

    r = api.request("DELETE", "/v1/memories", params={"user_id": uid, "session_id": "s1"})
    assert r.status_code == 200 and r.json()["deleted"] == 1
    assert dog not in ids_and_contents(api, uid, "dog Biscuit")
    r = api.request("DELETE", "/v1/memories", params={"user_id": uid})
    assert r.status_code == 200 and r.json()["deleted"] == 1
    assert ids_and_contents(api, uid, "favourite colour") == {}
