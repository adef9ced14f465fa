"""Fill-in-the-middle tasks for `specli bench --suite fim`: small Python modules written
for specli (none taken from a public benchmark), each with its tests apart. Holes are cut
by rule from every function: single-line holes (its last statement; its first, with code
after it at the same indentation; the cursor at the line's indentation) and a multi-line
hole (its body after the first statement). The
filled module must still pass its tests."""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass

_MODULES: dict[str, tuple[str, str]] = {}


def _module(name: str, source: str, tests: str) -> None:
    _MODULES[name] = (source, tests)


_module("text", '''"""Small text helpers."""


def slugify(title):
    """Lowercase words joined by hyphens; other characters dropped."""
    words = []
    for word in title.lower().split():
        kept = "".join(ch for ch in word if ch.isalnum())
        if kept:
            words.append(kept)
    return "-".join(words)


def wrap_words(text, width):
    """Greedy line wrapping: lines of at most `width` characters, words kept whole."""
    lines, current = [], ""
    for word in text.split():
        if current and len(current) + 1 + len(word) > width:
            lines.append(current)
            current = word
        else:
            current = f"{current} {word}" if current else word
    if current:
        lines.append(current)
    return lines


def count_vowels(text):
    """How many of the characters are vowels (a, e, i, o, u, either case)."""
    vowels = set("aeiouAEIOU")
    total = 0
    for ch in text:
        if ch in vowels:
            total += 1
    return total
''', '''
assert slugify("Hello, World!  Again") == "hello-world-again"
assert slugify("  ") == ""
assert wrap_words("the quick brown fox jumps", 10) == ["the quick", "brown fox", "jumps"]
assert wrap_words("", 5) == []
assert count_vowels("Speculative Decoding") == 8
''')

_module("stats", '''"""Statistics over lists of numbers."""


def mean(values):
    """The arithmetic mean; ValueError for no values."""
    if not values:
        raise ValueError("mean of no values")
    total = sum(values)
    return total / len(values)


def median(values):
    """The middle value (the mean of the two middle ones for an even count)."""
    ordered = sorted(values)
    n = len(ordered)
    middle = n // 2
    if n % 2 == 1:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def moving_average(values, window):
    """Means of each run of `window` consecutive values."""
    if window < 1:
        raise ValueError("window must be at least 1")
    out = []
    for i in range(len(values) - window + 1):
        chunk = values[i:i + window]
        out.append(sum(chunk) / window)
    return out
''', '''
assert mean([1, 2, 3, 4]) == 2.5
assert median([5, 1, 3]) == 3 and median([4, 1, 3, 2]) == 2.5
assert moving_average([1, 2, 3, 4, 5], 2) == [1.5, 2.5, 3.5, 4.5]
for bad in (lambda: mean([]), lambda: moving_average([1], 0)):
    try:
        bad()
        raise AssertionError("no error")
    except ValueError:
        pass
''')

_module("grid", '''"""A grid of cells as a list of rows."""


def make_grid(rows, cols, fill=0):
    """A rows x cols grid, every cell `fill`."""
    grid = []
    for _ in range(rows):
        grid.append([fill] * cols)
    return grid


def neighbours(grid, row, col):
    """The values of the up to eight cells around (row, col)."""
    found = []
    for dr in (-1, 0, 1):
        for dc in (-1, 0, 1):
            if dr == 0 and dc == 0:
                continue
            r, c = row + dr, col + dc
            if 0 <= r < len(grid) and 0 <= c < len(grid[0]):
                found.append(grid[r][c])
    return found


def transpose(grid):
    """Rows become columns."""
    if not grid:
        return []
    cols = len(grid[0])
    return [[grid[r][c] for r in range(len(grid))] for c in range(cols)]
''', '''
assert make_grid(2, 3, 1) == [[1, 1, 1], [1, 1, 1]]
g = [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
assert sorted(neighbours(g, 0, 0)) == [2, 4, 5] and len(neighbours(g, 1, 1)) == 8
assert transpose([[1, 2, 3], [4, 5, 6]]) == [[1, 4], [2, 5], [3, 6]]
assert transpose([]) == []
''')

_module("bank", '''"""A bank account with a history of transactions."""


class Account:
    def __init__(self, owner, balance=0):
        self.owner = owner
        self.balance = balance
        self.history = []

    def deposit(self, amount):
        """Add money; ValueError for a non-positive amount."""
        if amount <= 0:
            raise ValueError("deposit must be positive")
        self.balance += amount
        self.history.append(("deposit", amount))

    def withdraw(self, amount):
        """Take money out; ValueError when the balance does not cover it."""
        if amount <= 0:
            raise ValueError("withdrawal must be positive")
        if amount > self.balance:
            raise ValueError("insufficient funds")
        self.balance -= amount
        self.history.append(("withdraw", amount))

    def total(self, kind):
        """The sum of every transaction of this kind."""
        amounts = [amount for name, amount in self.history if name == kind]
        return sum(amounts)
''', '''
a = Account("ada", 10)
a.deposit(5)
a.withdraw(3)
a.deposit(2)
assert a.balance == 14 and a.total("deposit") == 7 and a.total("withdraw") == 3
for bad in (lambda: a.withdraw(100), lambda: a.deposit(0), lambda: a.withdraw(-1)):
    try:
        bad()
        raise AssertionError("no error")
    except ValueError:
        pass
''')

_module("intervals", '''"""Closed intervals as (start, end) pairs."""


def overlaps(a, b):
    """Whether two intervals share a point."""
    start = max(a[0], b[0])
    end = min(a[1], b[1])
    return start <= end


def merge(intervals):
    """Overlapping intervals merged, sorted by start."""
    merged = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def total_length(intervals):
    """The length covered by the intervals once merged."""
    covered = 0
    for start, end in merge(intervals):
        covered += end - start
    return covered
''', '''
assert overlaps((1, 3), (3, 5)) and not overlaps((1, 2), (3, 4))
assert merge([(5, 6), (1, 3), (2, 4)]) == [(1, 4), (5, 6)]
assert total_length([(0, 2), (1, 5), (10, 11)]) == 6
''')

_module("config", '''"""Reading key = value configuration text."""


def parse_config(text):
    """A dict of the `key = value` lines; comments (#) and blank lines skipped."""
    config = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition("=")
        config[key.strip()] = value.strip()
    return config


def get_int(config, key, default=0):
    """The value as an int, or `default` when missing."""
    if key not in config:
        return default
    return int(config[key])


def render_config(config):
    """The dict back as sorted `key = value` lines."""
    lines = []
    for key in sorted(config):
        lines.append(f"{key} = {config[key]}")
    return "\\n".join(lines) + "\\n"
''', '''
c = parse_config("# settings\\nport = 8080\\n\\nhost= local \\n")
assert c == {"port": "8080", "host": "local"}
assert get_int(c, "port") == 8080 and get_int(c, "missing", 7) == 7
assert render_config(c) == "host = local\\nport = 8080\\n"
''')


@dataclass(frozen=True)
class Hole:
    """One completion task: the code around the cursor, what was cut, and the tests."""

    id: str
    prefix: str
    suffix: str
    expected: str
    tests: str
    multiline: bool
    n_indent: int  # the cursor line's indentation (llama.vscode sends it)

    def filled(self, completion: str) -> str:
        return self.prefix + completion + self.suffix


def _holes_of(name: str, source: str, tests: str) -> list[Hole]:
    lines = source.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    out = []
    funcs = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name != "__init__"]
    for fn in funcs:
        body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        last = body[-1]
        col = len(lines[last.lineno - 1]) - len(lines[last.lineno - 1].lstrip())
        at, end = starts[last.lineno - 1] + col, starts[last.end_lineno or last.lineno] - 1  # the line, no newline
        out.append(Hole(f"{name}.{fn.name}/line", source[:at], source[end:], source[at:end], tests,
                        last.end_lineno != last.lineno, col))
        if len(body) >= 2:  # a line in the middle: the code after the cursor goes on at its indentation
            first = body[0]
            col = len(lines[first.lineno - 1]) - len(lines[first.lineno - 1].lstrip())
            at, mid_end = starts[first.lineno - 1] + col, starts[first.end_lineno or first.lineno] - 1
            out.append(Hole(f"{name}.{fn.name}/mid", source[:at], source[mid_end:], source[at:mid_end], tests,
                            first.end_lineno != first.lineno, col))
        if len(body) >= 3:
            first = body[1]
            col = len(lines[first.lineno - 1]) - len(lines[first.lineno - 1].lstrip())
            at = starts[first.lineno - 1] + col
            out.append(Hole(f"{name}.{fn.name}/block", source[:at], source[end:], source[at:end], tests, True, col))
    return out


def fim_holes() -> list[Hole]:
    """Every task: per function, one or two single-line holes and (where the body has
    three statements or more) a multi-line hole."""
    return [h for name, (source, tests) in _MODULES.items() for h in _holes_of(name, source, tests)]


def passes(source: str, tests: str, timeout: float = 20.0) -> bool:
    """Whether `source` followed by `tests` runs without error in a fresh interpreter."""
    try:
        r = subprocess.run([sys.executable, "-I", "-c", source + "\n" + tests], capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False
    return r.returncode == 0
