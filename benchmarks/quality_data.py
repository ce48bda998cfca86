"""Write the quality experiment's two local datasets (docs/quality.md), seeded, into
traces/quality/: word problems with numeric answers (math-verify checks them) and a
formatting task (repeat a made-up word exactly, and nothing else, checked exactly).

    python benchmarks/quality_data.py [--out traces/quality]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

NAMES = ["Ana", "Ben", "Chloe", "Dev", "Ema", "Finn", "Gita", "Hugo", "Ines", "Jon", "Kai",
         "Lena", "Milo", "Nia", "Omar", "Pia", "Raj", "Sara", "Tom", "Uma", "Vic",
         "Wen"]  # fmt: skip
THINGS = ["apples", "books", "coins", "pencils", "stickers", "marbles", "cards", "shells",
          "stamps", "cookies", "flowers", "buttons"]  # fmt: skip
SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
ROWS, HELDOUT = 1000, 250


def word_problem(rng: random.Random) -> dict:
    """A one- or two-step word problem about someone's things; the answer is an integer."""
    name, thing = rng.choice(NAMES), rng.choice(THINGS)
    a, b = rng.randint(2, 40), rng.randint(2, 30)
    kind = rng.choice(["more", "fewer", "groups", "two-step"])
    if kind == "more":
        text, answer = f"{name} has {a} {thing} and gets {b} more. How many {thing} does " \
                       f"{name} have now?", a + b  # fmt: skip
    elif kind == "fewer":
        a += b
        text, answer = f"{name} had {a} {thing} and gave away {b}. How many {thing} are " \
                       "left?", a - b  # fmt: skip
    elif kind == "groups":
        a, b = rng.randint(2, 9), rng.randint(2, 9)
        text, answer = f"{name} has {a} bags with {b} {thing} in each bag. How many {thing} " \
                       f"does {name} have?", a * b  # fmt: skip
    else:
        c = rng.randint(1, min(a + b - 1, 20))
        text, answer = f"{name} has {a} {thing}, buys {b} more, then loses {c}. How many " \
                       f"{thing} does {name} have?", a + b - c  # fmt: skip
    return {"question": text, "answer": str(answer)}


def format_task(rng: random.Random, used: set[str]) -> dict:
    """Repeat a made-up word exactly (lower case, no quotes, no period) and nothing else."""
    while True:
        word = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3)))
        if word not in used:
            used.add(word)
            break
    return {"prompt": f"Repeat the word '{word}' exactly, and nothing else.", "answer": word}


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    print(f"wrote {path} ({len(rows)} rows)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("traces/quality"))
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(30)
    write_jsonl(out / "word_problems.jsonl", [word_problem(rng) for _ in range(ROWS)])
    used: set[str] = set()
    write_jsonl(out / "format_train.jsonl", [format_task(rng, used) for _ in range(ROWS)])
    write_jsonl(out / "format_heldout.jsonl", [format_task(rng, used) for _ in range(HELDOUT)])


if __name__ == "__main__":
    main()
