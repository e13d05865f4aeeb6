"""A small deterministic language model speaking the LM Challenge line protocol.

Used only to (re)generate the fixture logs in this folder with the reference
``lmc run``; see ``regenerate.sh``.

    python3 toymodel.py TRAIN_TEXT [--lines N] [--order 1|2]

It counts words (``\\w+`` or runs of other non-space characters) and characters
in the first N lines of TRAIN_TEXT (gzip ok) and answers

* ``predict<TAB>CONTEXT``: up to 5 completions of the partial word at the end of
  CONTEXT, best first, scored by (order 2) an interpolated bigram or (order 1)
  unigram log-probability;
* ``predict<TAB>CONTEXT<TAB>C1<TAB>C2...``: the log-probability of each candidate
  that is a known word, or a known single character that is not upper case (order 2:
  conditioned on the previous character); other candidates are left out;
* ``train`` / ``clear``: ignored (no reply).
"""

from __future__ import annotations

import argparse
import bisect
import collections
import gzip
import math
import re
import sys

WORD = re.compile(r"\w+|[^\w\s]+")


def load(path: str, lines: int) -> list[str]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for _, line in zip(range(lines), f)]


class Model:
    def __init__(self, text: list[str], order: int):
        self.order = order
        self.unigrams: collections.Counter[str] = collections.Counter()
        self.bigrams: collections.Counter[tuple[str, str]] = collections.Counter()
        self.chars: collections.Counter[str] = collections.Counter()
        self.char_bigrams: collections.Counter[tuple[str, str]] = collections.Counter()
        for line in text:
            words = WORD.findall(line)
            self.unigrams.update(words)
            self.bigrams.update(zip(["<s>"] + words, words))
            self.chars.update(line + "\n")
            self.char_bigrams.update(zip("\n" + line, line + "\n"))
        self.unigrams_as_context = dict(self.unigrams, **{"<s>": len(text)})
        self.total = sum(self.unigrams.values())
        self.char_total = sum(self.chars.values())
        self.sorted_words = sorted(self.unigrams)

    def logp(self, previous: str, word: str) -> float:
        p1 = self.unigrams[word] / self.total
        if self.order == 1:
            return math.log(p1)
        context = self.unigrams_as_context.get(previous, 0)
        p2 = self.bigrams[(previous, word)] / context if context else 0.0
        return math.log(0.6 * p2 + 0.4 * p1)

    def char_logp(self, previous: str, char: str) -> float:
        p1 = self.chars[char] / self.char_total
        if self.order == 1 or not self.chars[previous]:
            return math.log(p1)
        p2 = self.char_bigrams[(previous, char)] / self.chars[previous]
        return math.log(0.6 * p2 + 0.4 * p1)

    def split(self, context: str) -> tuple[str, str]:
        """(previous word, partial word being typed)."""
        match = re.search(r"(\w*)$", context)
        partial = match.group(1) if match else ""
        words = WORD.findall(context[: len(context) - len(partial)])
        return (words[-1] if words else "<s>"), partial

    def complete(self, context: str) -> list[tuple[str, float]]:
        previous, partial = self.split(context)
        start = bisect.bisect_left(self.sorted_words, partial)
        found = []
        for word in self.sorted_words[start:]:
            if not word.startswith(partial):
                break
            if len(word) > len(partial):
                found.append((word[len(partial):], self.logp(previous, word)))
        found.sort(key=lambda x: (-x[1], x[0]))
        return found[:5]

    def score(self, context: str, candidates: list[str]) -> list[tuple[str, float]]:
        previous, _ = self.split(context)
        out = []
        for candidate in candidates:
            if candidate in self.unigrams:
                out.append((candidate, self.logp(previous, candidate)))
            elif len(candidate) == 1 and candidate in self.chars and not candidate.isupper():
                out.append((candidate, self.char_logp(context[-1:] or "\n", candidate)))
        return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("train")
    parser.add_argument("--lines", type=int, default=3000)
    parser.add_argument("--order", type=int, default=2)
    args = parser.parse_args()
    model = Model(load(args.train, args.lines), args.order)
    for line in sys.stdin:
        parts = line.rstrip("\n").split("\t")
        if parts[0] != "predict":
            continue
        context = parts[1] if len(parts) > 1 else ""
        if len(parts) > 2:
            results = model.score(context, parts[2:])
        else:
            results = model.complete(context)
        sys.stdout.write("\t".join(f"{w}\t{s:.6f}" for w, s in results) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
