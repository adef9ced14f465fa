"""Built-in benchmark prompts for `specli bench --suite NAME`.

Every prompt here was written for specli (none is copied from a public benchmark).
The suites lean on different drafting strengths: `edit` repeats a given function
almost verbatim (n-gram lookup shines), `code` and `math` are predictable for a
draft model, `chat` is open-ended, `summarize` and `rag` copy phrases from a given
text.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Prompt:
    """One benchmark item: one or more user turns of a chat."""

    id: str
    category: str
    turns: tuple[str, ...]
    source: str = ""  # suite name or file the prompt came from


# --------------------------------------------------------------------------- code

_CODE = [
    "Write a Python function `chunked(items, size)` that yields consecutive lists of at most `size` "
    "elements from any iterable. Raise ValueError for a size below 1. Include a docstring and a few "
    "pytest tests.",
    "Write a small Python class `LRUCache` with `get(key)` and `put(key, value)` methods and a fixed "
    "capacity, evicting the least recently used entry. Use only the standard library and explain the "
    "time complexity of each method.",
    "Write a command-line Python script that counts how often each word appears in a text file given "
    "as its argument and prints the ten most common words with their counts, ignoring case and "
    "punctuation.",
    "Write a JavaScript function `debounce(fn, waitMs)` that returns a debounced version of `fn`, "
    "then show how to use it for a search box that should only query the server after the user "
    "stops typing.",
]

# --------------------------------------------------------------------------- edit

_EDIT_RENAME = '''\
Rename the function `parse_duration` to `duration_to_seconds` (and every mention of it). \
Return the whole function, changed, in one Python code block and nothing else.

```python
def parse_duration(text):
    """Turn strings like "1h30m", "45s" or "2h" into a number of seconds."""
    units = {"h": 3600, "m": 60, "s": 1}
    total = 0
    number = ""
    for ch in text.strip().lower():
        if ch.isdigit():
            number += ch
        elif ch in units:
            if not number:
                raise ValueError(f"missing number before {ch!r} in {text!r}")
            total += int(number) * units[ch]
            number = ""
        elif ch.isspace():
            continue
        else:
            raise ValueError(f"unexpected character {ch!r} in {text!r}")
    if number:
        raise ValueError(f"number without a unit at the end of {text!r}")
    return total
```'''

_EDIT_PARAM = '''\
Add a keyword parameter `sep: str = ","` to `read_table` and use it instead of the hard-coded \
comma when splitting lines. Return the whole function, changed, in one Python code block.

```python
def read_table(path, skip_blank=True):
    """Read a small delimited text file into a list of dicts keyed by the header row."""
    rows = []
    with open(path, encoding="utf-8") as f:
        header = None
        for line_no, line in enumerate(f, start=1):
            line = line.rstrip("\\n")
            if skip_blank and not line.strip():
                continue
            fields = [part.strip() for part in line.split(",")]
            if header is None:
                header = fields
                continue
            if len(fields) != len(header):
                raise ValueError(
                    f"{path}:{line_no}: expected {len(header)} fields, got {len(fields)}"
                )
            rows.append(dict(zip(header, fields)))
    if header is None:
        raise ValueError(f"{path}: no header row")
    return rows
```'''

_EDIT_BUG = '''\
This function should return the median of a list of numbers, but it gives the wrong answer for \
lists of even length. Fix the bug and return the whole corrected function in one Python code block.

```python
def median(values):
    """Median of a non-empty sequence of numbers."""
    if not values:
        raise ValueError("median of an empty sequence")
    ordered = sorted(values)
    n = len(ordered)
    middle = n // 2
    if n % 2 == 1:
        return ordered[middle]
    low = ordered[middle]
    high = ordered[middle + 1]
    return (low + high) / 2


def describe(values):
    """Min, max and median of a sequence, as a dict."""
    return {
        "min": min(values),
        "max": max(values),
        "median": median(values),
        "count": len(values),
    }
```'''

_EDIT_LOG = '''\
Change `retry` so that it also logs each failed attempt with `logging.warning`, including the \
attempt number and the exception. Keep everything else the same and return the whole module in \
one Python code block.

```python
import time


def retry(action, attempts=3, delay=0.5, backoff=2.0, retry_on=(OSError,)):
    """Call `action()` until it succeeds or `attempts` calls have failed.

    The wait between calls starts at `delay` seconds and is multiplied by
    `backoff` after every failure. Exceptions not listed in `retry_on` are
    raised at once.
    """
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    wait = delay
    last_error = None
    for attempt in range(1, attempts + 1):
        try:
            return action()
        except retry_on as exc:
            last_error = exc
            if attempt == attempts:
                break
            time.sleep(wait)
            wait *= backoff
    raise RuntimeError(f"gave up after {attempts} attempts") from last_error
```'''

_EDIT = [_EDIT_RENAME, _EDIT_PARAM, _EDIT_BUG, _EDIT_LOG]

# --------------------------------------------------------------------------- chat (two turns each)

_CHAT: list[tuple[str, ...]] = [
    (
        "I am planning a three-day walking trip in a hilly region in early spring. What should I pack?",
        "Now turn that into a short checklist I can print, grouped by category.",
    ),
    (
        "Explain to a twelve-year-old why the sky looks blue during the day but red at sunset.",
        "Good. Now give the same explanation in three sentences for an adult.",
    ),
    (
        "My team keeps missing deadlines because tasks are estimated too optimistically. "
        "Suggest some practical ways to improve our estimates.",
        "Which one of those would you try first, and why?",
    ),
]

# --------------------------------------------------------------------------- summarize

_LIGHTHOUSE = (
    "The lighthouse on Corran Point was built in 1861 after a winter in which three cargo ships ran "
    "aground on the reef below the headland. For its first seventy years it was kept by a single "
    "family, the Mackies, who trimmed the wicks, wound the clockwork that turned the lens, and "
    "logged every passing vessel in a ledger that still survives in the county archive. In 1932 the "
    "oil lamp was replaced by an electric bulb powered by a diesel generator, and the keepers' "
    "cottage was extended to house a second family. Automation arrived in 1988: a sensor now "
    "switches the light on at dusk, and a technician visits twice a year. The cottages were sold "
    "and turned into a small museum, where visitors can climb the 112 steps to the lantern room on "
    "summer weekends."
)

_MARKET = (
    "Last quarter the bakery's revenue rose by 12 percent, mostly because of the new weekday lunch "
    "menu, which now accounts for a fifth of all sales. Costs grew faster than expected, however: "
    "flour prices went up by 18 percent and the second oven needed an unplanned repair that cost "
    "about two weeks of profit. Weekend sales were flat. Customer surveys praise the sourdough and "
    "the friendly staff but complain about queues between noon and one o'clock. The owners are "
    "considering an online pre-order system, a second till, or both, and want to decide before the "
    "summer season starts."
)

_SLEEP = (
    "Researchers followed 240 university students through one semester to see how sleep affected "
    "their exam results. Students wore a wrist tracker that recorded when they fell asleep and woke "
    "up. Those who slept at least seven hours on most nights scored on average eight points higher "
    "than those who slept less, even after accounting for class attendance and prior grades. "
    "Irregular sleep mattered as well: students whose bedtime varied by more than two hours from "
    "night to night did worse than students with a steady schedule, whatever their total sleep. The "
    "authors caution that the study shows an association, not a cause, and suggest a trial in which "
    "some students get coaching on sleep habits."
)

_SUMMARIZE = [
    f"Summarize the following text in two sentences.\n\n{_LIGHTHOUSE}",
    f"Summarize this report for a busy owner in three bullet points.\n\n{_MARKET}",
    f"Write a one-paragraph summary of this study for a student newspaper.\n\n{_SLEEP}",
]

# --------------------------------------------------------------------------- rag


def _rag(text: str, question: str) -> str:
    return (
        "Answer the question using only the text below. Quote the sentence that supports your "
        f"answer.\n\nText:\n{text}\n\nQuestion: {question}"
    )


_RAG = [
    _rag(_LIGHTHOUSE, "How is the light switched on today, and how often does someone visit?"),
    _rag(_MARKET, "Which options are the owners considering for the lunchtime queues?"),
    _rag(_SLEEP, "Did the study prove that more sleep causes better exam results?"),
]

# --------------------------------------------------------------------------- math

_MATH = [
    "A train leaves at 09:40 and travels 210 km at an average speed of 84 km/h. At what time does it "
    "arrive? Show your working step by step.",
    "A shop sells pens in packs of 6 for 4.50 and packs of 10 for 7.00. What is the cheapest way to "
    "buy exactly 46 pens, and how much does it cost? Explain step by step.",
    "Solve for x and check your answer: 3(x - 4) + 2x = 5x - 2(6 - x) + 7.",
]


def _single(category: str, texts: list[str]) -> list[Prompt]:
    return [Prompt(f"{category}-{i + 1}", category, (t,), category) for i, t in enumerate(texts)]


SUITES: dict[str, list[Prompt]] = {
    "code": _single("code", _CODE),
    "edit": _single("edit", _EDIT),
    "chat": [Prompt(f"chat-{i + 1}", "chat", turns, "chat") for i, turns in enumerate(_CHAT)],
    "summarize": _single("summarize", _SUMMARIZE),
    "rag": _single("rag", _RAG),
    "math": _single("math", _MATH),
}

SUITE_NAMES: tuple[str, ...] = (*SUITES, "all")


def suite(name: str) -> list[Prompt]:
    """The prompts of one suite, or of every suite for `all`. KeyError if unknown."""
    if name == "all":
        return [p for prompts in SUITES.values() for p in prompts]
    return list(SUITES[name])
