"""The workloads benchmarks.serve replays over HTTP (written for this project):

- `edit`: an agentic edit session. One 100-200-line file, ten requests (twelve with
  MORE_EDITS); each asks for one change and carries the previous answer, and the answer
  is the whole file again (the "whole file" edit format of coding agents). Two ways to
  carry it: `whole` sends the file as the last answer left it with the next change in one
  message (an editor's one-shot edit); `chat` sends the conversation so far, every
  earlier answer included (a chat agent).
- `fresh`: coding questions answered from scratch, where little repeats (Spec-Bench's
  coding category, read from ../shared/bench, never copied here)."""

from __future__ import annotations

import json
import re
from pathlib import Path

SYSTEM = ("You are a careful coding assistant. When asked to change a file, reply with the complete "
          "updated file in one ```python code block and nothing else.")

FILE_NAME = "inventory.py"
FILE = '''"""A small inventory of parts, with stock levels, reorder rules and a report."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_REORDER_LEVEL = 10
DEFAULT_TIMEOUT = 30


@dataclass
class Part:
    sku: str
    name: str
    quantity: int = 0
    unit_price: float = 0.0
    tags: list[str] = field(default_factory=list)

    def value(self) -> float:
        return self.quantity * self.unit_price

    def needs_reorder(self, level: int = DEFAULT_REORDER_LEVEL) -> bool:
        return self.quantity < level


class Inventory:
    def __init__(self) -> None:
        self.parts: dict[str, Part] = {}

    def add(self, part: Part) -> None:
        if part.sku in self.parts:
            raise ValueError(f"duplicate sku {part.sku}")
        self.parts[part.sku] = part

    def remove(self, sku: str) -> Part:
        return self.parts.pop(sku)

    def restock(self, sku: str, amount: int) -> None:
        if amount <= 0:
            raise ValueError("amount must be positive")
        self.parts[sku].quantity += amount

    def sell(self, sku: str, amount: int) -> float:
        part = self.parts[sku]
        if amount > part.quantity:
            raise ValueError(f"only {part.quantity} of {sku} left")
        part.quantity -= amount
        return amount * part.unit_price

    def total_value(self) -> float:
        return sum(p.value() for p in self.parts.values())

    def to_reorder(self, level: int = DEFAULT_REORDER_LEVEL) -> list[Part]:
        return [p for p in self.parts.values() if p.needs_reorder(level)]

    def by_tag(self, tag: str) -> list[Part]:
        return [p for p in self.parts.values() if tag in p.tags]


def load_csv(path: Path) -> Inventory:
    inventory = Inventory()
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            inventory.add(Part(
                sku=row["sku"],
                name=row["name"],
                quantity=int(row["quantity"]),
                unit_price=float(row["unit_price"]),
                tags=[t for t in row.get("tags", "").split(";") if t],
            ))
    return inventory


def save_json(inventory: Inventory, path: Path) -> None:
    data = [
        {"sku": p.sku, "name": p.name, "quantity": p.quantity, "unit_price": p.unit_price, "tags": p.tags}
        for p in inventory.parts.values()
    ]
    path.write_text(json.dumps(data, indent=2))


def report(inventory: Inventory) -> str:
    lines = [f"{len(inventory.parts)} parts, total value {inventory.total_value():.2f}"]
    for part in sorted(inventory.parts.values(), key=lambda p: p.sku):
        flag = " (reorder)" if part.needs_reorder() else ""
        lines.append(f"{part.sku:10} {part.name:30} {part.quantity:6d} {part.value():10.2f}{flag}")
    return "\\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: inventory.py FILE.csv")
        return 2
    inventory = load_csv(Path(argv[1]))
    print(report(inventory))
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv))
'''

EDITS = [
    "Rename the method `sell` to `sell_units` (and every call of it).",
    "Change DEFAULT_REORDER_LEVEL from 10 to 25.",
    "Add a `supplier: str = \"\"` field to Part, after `unit_price`.",
    "Make `remove` raise KeyError with the message f\"unknown sku {sku}\" when the sku is missing.",
    "Add a method `count(self) -> int` to Inventory that returns the number of parts, after `add`.",
    "In `report`, sort the parts by name instead of by sku.",
    "Add a docstring to `load_csv`: \"Read an inventory from a CSV file with a header row.\"",
    "Change `total_value` to round its result to 2 decimal places.",
    "Rename the function `save_json` to `write_json`.",
    "In `main`, print the usage message to sys.stderr instead of stdout (import sys at the top of the file).",
]
# two more for a session that grows past 12k tokens of context (benchmarks.serve --edits 12)
MORE_EDITS = [
    "Add a method `rename(self, sku: str, name: str) -> None` to Inventory, after `restock`.",
    "Change DEFAULT_TIMEOUT from 30 to 60.",
]

CODE_BLOCK = re.compile(r"```(?:python|py)?\n(.*?)```", re.S)


def edit_prompt(current: str, instruction: str) -> list[dict[str, str]]:
    """One request of a `whole` session: the file as the last answer left it, then the change."""
    user = f"Here is `{FILE_NAME}`:\n\n```python\n{current}```\n\n{instruction}"
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def edit_chat(answers: list[str], instructions: list[str]) -> list[dict[str, str]]:
    """One request of a `chat` session: the first request with the file, then every earlier
    answer and instruction as the conversation so far (as chat-based agents send it)."""
    messages = edit_prompt(FILE, instructions[0])
    for answer, instruction in zip(answers, instructions[1:]):
        messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": instruction}]
    return messages


def file_from_answer(answer: str, before: str) -> str:
    """The file an answer holds (its first code block), or the file before if it holds none."""
    m = CODE_BLOCK.search(answer)
    if m is None:
        return before
    body = m.group(1)
    return body if body.endswith("\n") else body + "\n"


def fresh_questions(n: int, bench: Path) -> list[list[dict[str, str]]]:
    """The first n coding questions of Spec-Bench (first turns), as chats."""
    out: list[list[dict[str, str]]] = []
    with open(bench) as f:
        for line in f:
            q = json.loads(line)
            if q.get("category") == "coding":
                out.append([{"role": "user", "content": q["turns"][0]}])
                if len(out) == n:
                    break
    return out
