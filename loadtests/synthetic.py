"""Realistic-looking personal memories and questions for load and latency scripts."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

PEOPLE = ["Emma", "Liam", "Olivia", "Noah", "Ava", "Mateo", "Sofia", "Kenji", "Amara", "Lucas"]
CITIES = ["Lisbon", "Toronto", "Osaka", "Nairobi", "Austin", "Berlin", "Melbourne", "Bogotá"]
FOODS = ["sushi", "vegan curry", "tacos al pastor", "ramen", "falafel", "paella", "dumplings"]
HOBBIES = ["bouldering", "sourdough baking", "trail running", "chess", "watercolor painting"]
TOOLS = ["Python", "Rust", "Kubernetes", "PostgreSQL", "React", "Terraform", "Go"]

TEMPLATES = [
    "My sister {p} lives in {c} and works as a nurse.",
    "I am allergic to shellfish, so never suggest {f} with shrimp.",
    "I prefer {f} when we go out for dinner on Fridays.",
    "I started {h} last spring and go twice a week.",
    "At work I mostly write {t} and deploy with {t2}.",
    "My flight to {c} leaves on the {n}th of next month.",
    "{p} is my manager; our 1:1 is every Tuesday at {n}:00.",
    "I want answers as short bullet points, not long paragraphs.",
    "My budget for the {c} trip is ${n}00.",
    "Remind me that {p}'s birthday is on the {n}th.",
    "I moved to {c} in 20{n} for a job in {t}.",
    "My dog is called {p} and needs medication every morning.",
]
QUESTIONS = [
    "Where does my sister live?",
    "What food do I like on Fridays?",
    "What hobby did I pick up recently?",
    "Which programming language do I use at work?",
    "When is my flight?",
    "Who is my manager?",
    "What is my trip budget?",
    "How should you format answers for me?",
    "When is {p}'s birthday?",
    "What is my dog's name?",
]


POOLS = {"p": PEOPLE, "c": CITIES, "f": FOODS, "h": HOBBIES, "t": TOOLS, "t2": TOOLS}


def fill(
    template: str, rng: random.Random, pools: Mapping[str, Sequence[str]], n: tuple[int, int]
) -> str:
    """``template`` with a random pick from each pool for its placeholder and a number ``{n}``.

    Picks are drawn in the pools' order, then ``n``: a seeded ``rng`` gives the same texts.
    """
    picks = {key: rng.choice(pool) for key, pool in pools.items()}
    return template.format(**picks, n=rng.randint(*n))


def memory(rng: random.Random) -> str:
    return fill(rng.choice(TEMPLATES), rng, POOLS, (10, 28))


def question(rng: random.Random) -> str:
    return rng.choice(QUESTIONS).format(p=rng.choice(PEOPLE))
