"""Prompts the target answers itself when a user's own traffic is not enough to train
heads on: word problems, writing, explanations and code, made from templates with drawn
names and numbers (written for specli; no benchmark's prompts are among them).
"""

from __future__ import annotations

import random
from collections.abc import Iterator

NAMES = ["Ana", "Bilal", "Chen", "Dara", "Emeka", "Freya", "Goran", "Hana", "Ivo", "Jun", "Kofi", "Lena",
         "Mateo", "Nia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tariq", "Uma", "Vera", "Wen", "Yusuf"]
ITEMS = ["apples", "stamps", "marbles", "books", "pencils", "tickets", "cookies", "seeds", "coins", "shells"]
MATH = [
    "{a} has {x} {item}. {b} gives {a} {y} more, then {a} shares them equally among {n} friends. How many "
    "{item} does each friend get, and how many are left over? Explain each step.",
    "A shop sells {item} at {p} dollars each. {a} buys {x} and pays with a {big}-dollar note. How much change "
    "does {a} get? Show your working.",
    "{a} reads {x} pages a day. The book has {z} pages. After {n} days {b} lends {a} another book of {y} pages. "
    "How many more days until {a} has finished both? Reason step by step.",
    "A train leaves at {h}:00 and travels {x} km at {y} km per hour. When does it arrive? Explain.",
    "{a} saves {p} dollars a week. {b} starts with {x} dollars and saves {n} dollars a week. After how many "
    "weeks does {a} have more than {b}? Solve it step by step.",
    "A rectangle is {x} cm long and {n} cm wide. A square has the same perimeter. What is the area of the "
    "square? Show each step.",
    "{a} bakes {x} cookies and packs them in boxes of {n}. Each box sells for {p} dollars. How much money does "
    "{a} make if every full box is sold? Explain your reasoning.",
    "In a class of {z} students, {x} play football, {y} play chess and {n} play both. How many play neither? "
    "Explain with a diagram in words.",
    "A recipe needs {n} eggs for every {p} cups of flour. {a} has {x} cups of flour. How many eggs are needed? "
    "Work it out step by step.",
    "{a} runs {n} km on Monday and adds {p} km each day after. How far has {a} run in total by the end of the "
    "{x}th day? Show the arithmetic.",
]
FORMS = ["a short story", "a poem", "an email", "a product description", "a diary entry", "a speech",
         "a blog post", "a letter", "a news report", "a dialogue"]
TOPICS = ["a lighthouse keeper", "the first day of spring", "a lost umbrella", "a robot learning to cook",
          "a city without cars", "an old bicycle", "moving to a new country", "a power cut", "a chess match",
          "a garden on a balcony", "a night train", "a forgotten letter", "the sea in winter", "a village market"]
CONCEPTS = ["photosynthesis", "how vaccines work", "inflation", "the water cycle", "how a compiler works",
            "plate tectonics", "the causes of the French Revolution", "how GPS finds a position", "compound interest",
            "why the sky is blue", "how batteries store energy", "supply and demand", "how the heart pumps blood",
            "what a database index is", "how bees communicate", "the greenhouse effect"]
TASKS = ["parses a date in several formats", "merges two sorted lists", "counts the words in a text file",
         "checks whether a string is a palindrome", "computes a moving average", "finds duplicate files by hash",
         "validates an email address", "converts Roman numerals to integers", "flattens a nested list",
         "implements a least-recently-used cache", "reads a CSV file and sums a column", "retries a failing call"]


def prompts(seed: int = 0) -> Iterator[str]:
    """An endless, varied stream of prompts (the same for the same seed)."""
    rng = random.Random(seed)
    while True:
        kind = rng.randrange(4)
        if kind == 0 or kind == 3 and rng.random() < 0.5:  # word problems: half the stream
            a, b = rng.sample(NAMES, 2)
            yield rng.choice(MATH).format(a=a, b=b, item=rng.choice(ITEMS), x=rng.randint(12, 96),
                                          y=rng.randint(3, 40), z=rng.randint(100, 400), n=rng.randint(2, 9),
                                          p=rng.randint(2, 15), h=rng.randint(6, 20), big=rng.choice([20, 50, 100]))
        elif kind == 1:
            yield f"Write {rng.choice(FORMS)} about {rng.choice(TOPICS)}."
        elif kind == 2:
            yield f"Explain {rng.choice(CONCEPTS)} to a curious teenager, in a few paragraphs."
        else:
            yield f"Write a Python function that {rng.choice(TASKS)}, with a short explanation."
