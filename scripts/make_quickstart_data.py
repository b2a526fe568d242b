#!/usr/bin/env python3
"""Write the quickstart's task data into examples/data (deterministic: same files on every run).

The task: write a number's digits in reverse order ("Reverse the digits: 38271" -> "17283"), asked in
English and Chinese, in several phrasings. A randomly initialised model cannot do it; a tiny one
learns it in a few hundred steps on a CPU, and it generalises to numbers it never saw, which the
held-out evaluation set (numbers absent from every training file) measures.

Files (registered in examples/data/dataset_info.json):
  quickstart_alpaca_en.json / _zh.json      alpaca: instruction, input, output
  quickstart_sharegpt_en.json / _zh.json    sharegpt: conversations [{from: human|gpt, value}]
  quickstart_eval.json                      alpaca, held-out numbers, English and Chinese

    python scripts/make_quickstart_data.py [--out examples/data] [--per-file 1000] [--eval 200]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

SEED = 20261130
MIN_DIGITS, MAX_DIGITS = 3, 7

# (instruction, input) phrasings; "{n}" is the number, always last in the question (an empty input puts it
# at the end of the instruction), so a small model finds it at a fixed distance from its answer.
EN = [
    ("Reverse the digits: {n}", ""),
    ("Write this number backwards: {n}", ""),
    ("Reverse the digits of this number.", "{n}"),
]
ZH = [
    ("把这个数字倒过来写：{n}", ""),
    ("请将下面数字的各位倒序输出：{n}", ""),
    ("把下面这个数的数字顺序反过来。", "{n}"),
]


def numbers(rng: random.Random, count: int) -> list[str]:
    """``count`` distinct numbers of 3-7 digits (no leading zero), in random order."""
    seen: set[str] = set()
    out: list[str] = []
    while len(out) < count:
        width = rng.randint(MIN_DIGITS, MAX_DIGITS)
        n = str(rng.randint(10 ** (width - 1), 10**width - 1))
        if n not in seen:
            seen.add(n)
            out.append(n)
    return out


def question(phrasings: list[tuple[str, str]], n: str, rng: random.Random) -> tuple[str, str]:
    instruction, inp = rng.choice(phrasings)
    return instruction.format(n=n), inp.format(n=n)


def alpaca(nums: list[str], phrasings, rng: random.Random) -> list[dict[str, str]]:
    rows = []
    for n in nums:
        instruction, inp = question(phrasings, n, rng)
        rows.append({"instruction": instruction, "input": inp, "output": n[::-1]})
    return rows


def sharegpt(nums: list[str], phrasings, rng: random.Random) -> list[dict]:
    rows = []
    for n in nums:
        instruction, inp = question(phrasings, n, rng)
        user = "\n".join(p for p in (instruction, inp) if p)
        rows.append({"conversations": [{"from": "human", "value": user}, {"from": "gpt", "value": n[::-1]}]})
    return rows


def dump(path: Path, rows: list) -> None:
    """One record per line: small diffs, still a plain JSON array."""
    body = ",\n".join(json.dumps(r, ensure_ascii=False) for r in rows)
    path.write_text("[\n" + body + "\n]\n", encoding="utf-8")


DATASET_INFO = {
    "quickstart_alpaca_en": {"file_name": "quickstart_alpaca_en.json"},
    "quickstart_alpaca_zh": {"file_name": "quickstart_alpaca_zh.json"},
    "quickstart_sharegpt_en": {
        "file_name": "quickstart_sharegpt_en.json",
        "formatting": "sharegpt",
        "columns": {"messages": "conversations"},
    },
    "quickstart_sharegpt_zh": {
        "file_name": "quickstart_sharegpt_zh.json",
        "formatting": "sharegpt",
        "columns": {"messages": "conversations"},
    },
    "quickstart_eval": {"file_name": "quickstart_eval.json"},
}


def main(argv: list[str] | None = None) -> int:
    root = Path(__file__).resolve().parent.parent
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(root / "examples" / "data"))
    ap.add_argument("--per-file", type=int, default=1000, help="records in each of the 4 training files")
    ap.add_argument("--eval", type=int, default=200, help="held-out records (half English, half Chinese)")
    args = ap.parse_args(argv)

    rng = random.Random(SEED)
    nums = numbers(rng, args.eval + 4 * args.per_file)
    held_out, train = nums[: args.eval], nums[args.eval :]
    chunks = [train[i * args.per_file : (i + 1) * args.per_file] for i in range(4)]

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    half = args.eval // 2
    dump(out / "quickstart_alpaca_en.json", alpaca(chunks[0], EN, rng))
    dump(out / "quickstart_alpaca_zh.json", alpaca(chunks[1], ZH, rng))
    dump(out / "quickstart_sharegpt_en.json", sharegpt(chunks[2], EN, rng))
    dump(out / "quickstart_sharegpt_zh.json", sharegpt(chunks[3], ZH, rng))
    dump(out / "quickstart_eval.json", alpaca(held_out[:half], EN, rng) + alpaca(held_out[half:], ZH, rng))
    (out / "dataset_info.json").write_text(json.dumps(DATASET_INFO, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out}: 4 x {args.per_file} training records, {args.eval} held-out")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
