"""A small deterministic model speaking the LM Challenge line protocol (stats fixtures).

``predict<TAB>context`` -> up to 12 continuations of the word being typed, drawn from a
fixed list of common English words (plus single characters, for ``ce``), each with a
score from a stable hash of (previous word, word): log-probability-like values in
(-12, -0.5], with ties and integer-valued scores on purpose.
``predict<TAB>context<TAB>candidates...`` -> a score for each candidate, leaving out
candidates that contain ``z`` or ``x`` (out of vocabulary: the log gets ``null``);
words of the common list score higher, as a real language model would.
``train``/``clear`` are accepted and ignored.  Standard library only.
"""

import hashlib
import sys

WORDS = ("the and of to that in he shall unto for i his a lord they be is him not them "
         "it with all thou thy was god which my me said but ye their have will thee from "
         "as are when this out were upon man by you israel king son up there hath then "
         "people came had house into on her come one we children before your also day "
         "land men against shalt if at let go so no these what hand went even made").split()
CHARACTERS = list("abcdefghijklmnopqrstuvwxyz ,.;:'ATGLI")
COMMON = set(WORDS)


def stable(*parts: str) -> int:
    return int.from_bytes(hashlib.md5("\x1f".join(parts).encode("utf-8")).digest()[:4], "little")


def score(previous: str, word: str) -> float:
    h = stable(previous, word)
    if h % 7 == 0:
        return -float(1 + h % 9)           # integer-valued, on purpose
    return -round(0.5 + (h % 11500) / 1000.0, 6)


def predict(context: str) -> list[tuple[str, float]]:
    head, _, prefix = context.rpartition(" ")
    previous = head.rpartition(" ")[2].lower()
    pairs = [(w[len(prefix):], score(previous, w)) for w in WORDS
             if w.startswith(prefix) and len(w) > len(prefix)]
    pairs.sort(key=lambda p: (-p[1], p[0]))
    pairs = pairs[:10]
    seen = {w for w, _ in pairs}
    pairs += [(c, score(previous + prefix, c) - 3.0) for c in CHARACTERS if c not in seen][:2]
    return pairs


def rerank(context: str, candidates: list[str]) -> list[tuple[str, float]]:
    previous = context.rstrip(" ").rpartition(" ")[2].lower()
    return [(c, round(score(previous, c.lower()) + (4.0 if c.lower() in COMMON else 0.0)
                     - 0.3 * len(c), 6))
            for c in candidates if "z" not in c and "x" not in c]


def main() -> None:
    for line in sys.stdin:
        parts = line.rstrip("\n").split("\t")
        if parts[0] != "predict":
            continue
        context = parts[1] if len(parts) > 1 else ""
        pairs = rerank(context, parts[2:]) if len(parts) > 2 else predict(context)
        sys.stdout.write("\t".join(f"{w}\t{s}" for w, s in pairs) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
