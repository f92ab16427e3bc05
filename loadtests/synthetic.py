"""Realistic-looking personal memories and questions for load and latency scripts."""

from __future__ import annotations

import random

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


def memory(rng: random.Random) -> str:
    return rng.choice(TEMPLATES).format(
        p=rng.choice(PEOPLE),
        c=rng.choice(CITIES),
        f=rng.choice(FOODS),
        h=rng.choice(HOBBIES),
        t=rng.choice(TOOLS),
        t2=rng.choice(TOOLS),
        n=rng.randint(10, 28),
    )


def question(rng: random.Random) -> str:
    return rng.choice(QUESTIONS).format(p=rng.choice(PEOPLE))
