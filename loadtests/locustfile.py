"""Locust: a chat platform driving memserve.

Each simulated user is one end user of the platform with their own memories
(``user_id``), talking through the platform's backend (a service key in
``MEMSERVE_API_KEY``). The weighted mix follows a chat turn's life: most calls
fetch context for the next answer (POST /v1/context, falling back to /v1/search
while that route is missing), some ingest the turn (POST /v1/sessions/{sid}/turns,
falling back to explicit memories), and a few manage memories (CRUD).

Headless:  MEMSERVE_API_KEY=... locust -f loadtests/locustfile.py --headless \\
               -u 20 -r 5 -t 60s --host http://127.0.0.1:8000 --csv loadtests/results/run
Web UI:    MEMSERVE_API_KEY=... locust -f loadtests/locustfile.py --host http://127.0.0.1:8000
"""

from __future__ import annotations

import os
import random
import secrets

from locust import HttpUser, between, events, task
from synthetic import fill  # loadtests/ is on sys.path while Locust imports this file

NAMES = ["Maya", "Tom", "Ines", "Ravi", "Olga", "Ken", "Lea", "Omar", "Zoe", "Finn"]
CITIES = ["Lisbon", "Berlin", "Austin", "Osaka", "Nairobi", "Toronto", "Porto", "Seoul"]
FOODS = ["sushi", "ramen", "tacos", "falafel", "pho", "pizza", "curry", "dumplings"]
HOBBIES = ["climbing", "chess", "pottery", "running", "birdwatching", "baking", "guitar"]
PETS = ["a beagle called Max", "two cats", "a parrot named Kiwi", "no pets", "a goldfish"]
JOBS = ["nurse", "data engineer", "teacher", "architect", "chef", "product manager"]
LANGS = ["Python", "Rust", "Go", "TypeScript", "Kotlin"]

FACTS = [
    "I live in {city} and moved there {n} years ago.",
    "My name is {name} and I work as a {job}.",
    "I'm allergic to peanuts, so please never suggest recipes with them.",
    "I have {pet}.",
    "My favourite food is {food}, especially on Fridays.",
    "I started {hobby} last spring and go twice a week.",
    "My sister {name} lives in {city}.",
    "I prefer answers in bullet points, short and direct.",
    "At work we mostly write {lang}; I'm learning {lang2} on the side.",
    "My daughter's birthday is on the {n}th of May.",
    "I'm vegetarian since {n} years.",
    "I'm training for a half marathon in {city} in October.",
]
QUESTIONS = [
    "What should I cook tonight?",
    "Can you suggest a weekend plan in {city}?",
    "Remind me what I told you about my pets.",
    "Which hobby was I getting into?",
    "How do I write a retry loop in {lang}?",
    "What gift could I buy for my daughter?",
    "Any restaurant tips near where I live?",
    "What was my training goal again?",
    "Do you remember my dietary restrictions?",
    "How should I format the report for my manager?",
]
ASSISTANT = [
    "Sure! Here are a few ideas based on what you told me.",
    "Got it, I'll keep that in mind.",
    "Here's a short answer in bullet points.",
    "Happy to help with that.",
]


POOLS = {
    "city": CITIES,
    "name": NAMES,
    "food": FOODS,
    "hobby": HOBBIES,
    "pet": PETS,
    "job": JOBS,
    "lang": LANGS,
    "lang2": LANGS,
}
RNG = random.Random()


def _fill(template: str) -> str:
    return fill(template, RNG, POOLS, (2, 28))


def fact() -> str:
    return _fill(random.choice(FACTS))


def question() -> str:
    return _fill(random.choice(QUESTIONS))


class _Fallback:
    """Remembers routes that answered 404 (not deployed yet) so later calls skip them."""

    missing: set[str] = set()


@events.init_command_line_parser.add_listener
def _args(parser) -> None:
    parser.add_argument(
        "--api-key",
        default=os.environ.get("MEMSERVE_API_KEY", ""),
        help="service key (default: $MEMSERVE_API_KEY)",
    )


class ChatPlatformUser(HttpUser):
    """One end user chatting; their memories live under a private ``user_id``."""

    wait_time = between(0.2, 1.0)

    def on_start(self) -> None:
        key = self.environment.parsed_options.api_key if self.environment.parsed_options else ""
        key = key or os.environ.get("MEMSERVE_API_KEY", "")
        if not key:
            raise RuntimeError("set MEMSERVE_API_KEY (a service key of the tenant)")
        self.client.headers["Authorization"] = f"Bearer {key}"
        self.user_id = "lt_" + secrets.token_hex(6)
        self.session_id = "s_" + secrets.token_hex(4)
        self.memory_ids: list[str] = []
        # A new platform user arrives with a few things already known about them.
        items = [{"content": fact()} for _ in range(5)]
        with self.client.post(
            "/v1/memories/batch",
            json={"user_id": self.user_id, "items": items},
            name="/v1/memories/batch",
            catch_response=True,
        ) as r:
            if r.status_code == 201:
                self.memory_ids += [m["id"] for m in r.json()["memories"]]
                r.success()
            else:
                r.failure(f"{r.status_code}: {r.text[:200]}")

    # --- the chat path (most traffic) ---
    @task(10)
    def context_for_reply(self) -> None:
        body = {"user_id": self.user_id, "query": question(), "session_id": self.session_id}
        if "/v1/context" not in _Fallback.missing:
            with self.client.post("/v1/context", json=body, catch_response=True) as r:
                if r.status_code == 200:
                    r.success()
                    return
                if r.status_code in (404, 405):
                    _Fallback.missing.add("/v1/context")
                    r.success()  # not deployed here: not a failure, fall back below
                else:
                    r.failure(f"{r.status_code}: {r.text[:200]}")
                    return
        self.search()

    @task(4)
    def search(self) -> None:
        body = {"user_id": self.user_id, "query": question(), "top_k": 5}
        with self.client.post("/v1/search", json=body, catch_response=True) as r:
            if r.status_code == 200:
                r.success()
            else:
                r.failure(f"{r.status_code}: {r.text[:200]}")

    @task(4)
    def ingest_turn(self) -> None:
        messages = [
            {"role": "user", "content": fact()},
            {"role": "assistant", "content": random.choice(ASSISTANT)},
        ]
        route = "/v1/sessions/{sid}/turns"
        if route not in _Fallback.missing:
            with self.client.post(
                f"/v1/sessions/{self.session_id}/turns",
                json={"user_id": self.user_id, "messages": messages},
                name=route,
                catch_response=True,
            ) as r:
                if r.status_code in (200, 202):
                    r.success()
                    return
                if r.status_code in (404, 405):
                    _Fallback.missing.add(route)
                    r.success()
                else:
                    r.failure(f"{r.status_code}: {r.text[:200]}")
                    return
        self.add_memory(messages[0]["content"])

    # --- memory management (a few) ---
    @task(2)
    def add_memory(self, content: str | None = None) -> None:
        body = {"user_id": self.user_id, "content": content or fact(), "tags": ["chat"]}
        with self.client.post("/v1/memories", json=body, catch_response=True) as r:
            if r.status_code == 201:
                self.memory_ids.append(r.json()["id"])
                r.success()
            else:
                r.failure(f"{r.status_code}: {r.text[:200]}")

    @task(1)
    def list_memories(self) -> None:
        self._expect(
            self.client.get,
            "/v1/memories",
            200,
            name="/v1/memories",
            params={"user_id": self.user_id, "limit": 20},
        )

    @task(1)
    def get_memory(self) -> None:
        if self.memory_ids:
            self._on_memory(self.client.get, random.choice(self.memory_ids), 200)

    @task(1)
    def update_memory(self) -> None:
        if self.memory_ids:
            mid = random.choice(self.memory_ids)
            body = {"content": fact(), "importance": 0.7}
            self._on_memory(self.client.patch, mid, 200, json=body)

    @task(1)
    def delete_memory(self) -> None:
        if len(self.memory_ids) > 3:
            mid = self.memory_ids.pop(random.randrange(len(self.memory_ids)))
            self._on_memory(self.client.delete, mid, 204)

    def _on_memory(self, method, mid: str, status: int, **kwargs) -> None:
        """One call on /v1/memories/{id} of this user, reported under one route name."""
        path, params = f"/v1/memories/{mid}", {"user_id": self.user_id}
        self._expect(method, path, status, name="/v1/memories/{id}", params=params, **kwargs)

    def _expect(self, method, path: str, status: int, **kwargs) -> None:
        with method(path, catch_response=True, **kwargs) as r:
            if r.status_code == status:
                r.success()
            else:
                r.failure(f"{r.status_code}: {r.text[:200]}")
