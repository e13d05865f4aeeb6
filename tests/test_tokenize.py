"""The word tokenizer: unit tests on hand-written strings, and differential tests against
the reference lmchallenge==5.2 (its tokenizer runs in its own venv, with its own pinned
``emoji`` and ``regex``) on every string of the real corpora and every Unicode code point.

The full corpus comparison (about 520k distinct strings, 21M characters) takes minutes
with the reference's tokenizer, so it is marked slow; the default suite compares every
non-ASCII string of the corpora plus a deterministic 1-in-100 sample of the others.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import subprocess
from pathlib import Path

import emoji
import pytest

from conftest import DATA
from lmchallenge.tokenize import (Token, ascii_word_pattern, character_tokenizer, emoji_sequences, find_tokens, full_word_pattern, space_may_be_in_token, word_tokenizer, words)

# --- unit tests: exact tokens (each expectation is also checked against the reference) ---

CASES = [
    # words, apostrophes, dashes, @ and # stay inside a word; other punctuation is split off
    ("Hello, world!", ["Hello", ",", "world", "!"]),
    ("don't stop\u2014it's O'Neil's", ["don't", "stop\u2014it's", "O'Neil's"]),
    ("e-mail @bob about #42: foo_bar", ["e-mail", "@bob", "about", "#42", ":", "foo_bar"]),
    ("'quoted' \u201ctyped\u201d \u00abguillemets\u00bb",
     ["'quoted'", "\u201c", "typed", "\u201d", "\u00ab", "guillemets", "\u00bb"]),
    ("Wait...?! (yes) [no] {x}", ["Wait", "...?!", "(", "yes", ")", "[", "no", "]", "{", "x", "}"]),
    ("C++ & $5.00 + 20% = 3\u00d72", ["C", "++", "&", "$", "5", ".", "00", "+", "20", "%", "=",
                                      "3", "\u00d7", "2"]),
    # numbers: digits (any script, fractions, superscripts) are word characters
    ("3.14 1,000 2024-01-15 10:30", ["3", ".", "14", "1", ",", "000", "2024-01-15", "10", ":",
                                     "30"]),
    ("\u00bd \u00b2 \u0663\u0664 x\u00b2", ["\u00bd", "\u00b2", "\u0663\u0664", "x\u00b2"]),
    # letters of any script; whitespace of any kind separates and is never a token
    ("caf\u00e9 na\u00efve \u00c5ngstr\u00f6m", ["caf\u00e9", "na\u00efve", "\u00c5ngstr\u00f6m"]),
    ("\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3002", ["\u65e5\u672c\u8a9e\u306e\u30c6"
                                                             "\u30ad\u30b9\u30c8", "\u3002"]),
    ("a\tb\nc\u00a0d\u3000e", ["a", "b", "c", "d", "e"]),
    # combining marks are not word characters: a decomposed accent splits a word
    ("cafe\u0301 ok", ["cafe", "ok"]),
    # emoji: each listed emoji is a token of its own, without its presentation selector
    ("I \u2764\ufe0f you", ["I", "\u2764", "you"]),
    ("\U0001f600\U0001f600 hi\U0001f600!", ["\U0001f600", "\U0001f600", "hi", "\U0001f600", "!"]),
    # ... but after other punctuation or symbols it is part of their run
    ("yes!\U0001f600 \u2605\U0001f600", ["yes", "!\U0001f600", "\u2605\U0001f600"]),
    # ZWJ sequences: the joiner is no part of any token, so each part is a token
    ("\U0001f469\u200d\U0001f4bb coding", ["\U0001f469", "\U0001f4bb", "coding"]),
    ("\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466",
     ["\U0001f468", "\U0001f469", "\U0001f467", "\U0001f466"]),
    ("\U0001f487\u200d\u2640\ufe0f", ["\U0001f487", "\u2640"]),
    ("\U0001f3f3\ufe0f\u200d\U0001f308", ["\U0001f3f3", "\U0001f308"]),
    # skin tones: the modifier is a token of its own
    ("\U0001f44d\U0001f3fd thanks \U0001f44b\U0001f3ffhi",
     ["\U0001f44d", "\U0001f3fd", "thanks", "\U0001f44b", "\U0001f3ff", "hi"]),
    # flags are symbols (regional indicators are not in the emoji list): one run
    ("\U0001f1ec\U0001f1e7\U0001f1eb\U0001f1f7 \U0001f1fa\U0001f1f8!",
     ["\U0001f1ec\U0001f1e7\U0001f1eb\U0001f1f7", "\U0001f1fa\U0001f1f8!"]),
    # keycaps: the digit or # is a word; selector and enclosing keycap are dropped
    ("#\ufe0f\u20e31\ufe0f\u20e3", ["#", "1"]),
    # emoji newer than the list (emoji 5.0, Unicode 10) are symbols: runs of them are one token
    ("\U0001f966\U0001f966 \U0001f929 wow", ["\U0001f966\U0001f966", "\U0001f929", "wow"]),
    # characters assigned after Unicode 10.0 are in no class
    ("\U0001f97a x \U0001fae1", ["x"]),
    # the list writes multi-code-point emoji with spaces between code points: text spelled so
    # is one token, space included
    ("\U0001f44d \U0001f3fd", ["\U0001f44d \U0001f3fd"]),
]


@pytest.mark.parametrize("text, expected", CASES)
def test_word_tokens(text, expected):
    assert words(text) == expected
    assert [m.group() for m in word_tokenizer().finditer(text)] == expected


def test_ascii_fast_path_is_the_full_tokenizer():
    """Every ASCII character alone, between letters, doubled and after each other one."""
    chars = [chr(c) for c in range(128)]
    texts = ["".join(chars), *chars, *(f"a{c}b" for c in chars), *(c + c for c in chars),
             *(a + b for a in chars for b in chars), "don't e-mail @bob #42: x_y (ok)..."]
    for text in texts:
        assert word_tokenizer().pattern_for(text) is ascii_word_pattern()
        assert words(text) == full_word_pattern().findall(text), repr(text)
    assert word_tokenizer().pattern_for("caf\u00e9") is full_word_pattern()
    assert not [e for e in emoji_sequences() if e.isascii()]  # the fast path's premise


def test_word_tokenizer_has_the_pattern_api():
    tokenizer = word_tokenizer()
    assert tokenizer.sub("_", "a, b") == "__ _"
    assert tokenizer.match("don't").group() == "don't"
    assert tokenizer.findall("a b", 1) == ["b"]
    assert tokenizer.pattern == full_word_pattern().pattern
    import copy
    import pickle
    assert type(copy.deepcopy(tokenizer)) is type(pickle.loads(pickle.dumps(tokenizer))) \
        is type(tokenizer)


def test_tokenizing_after_a_space_no_token_holds_gives_the_whole_texts_tokens():
    """space_may_be_in_token is what lmc-ngram relies on to tokenize only a context's end."""
    import random
    rng = random.Random(7)
    spaced = [e for e in emoji_sequences() if " " in e]
    pieces = [*rng.sample(spaced, 40), *(e.split(" ")[0] for e in rng.sample(spaced, 20)),
              "\ufe0f", "\u20e3", "\u200d", "#", "1", "a", "word", "😀", "!", "\u00a0"]
    mays = 0
    for _ in range(3000):
        text = "".join(rng.choice(pieces) + rng.choice([" ", "", " ", "  "])
                       for _ in range(rng.randint(1, 8)))
        matches = [(m.start(), m.group()) for m in word_tokenizer().finditer(text)]
        for i, c in enumerate(text):
            if not c.isspace():
                continue
            if space_may_be_in_token(text, i):
                mays += 1
                continue
            after = [(m.start(), m.group()) for m in word_tokenizer().finditer(text, i)]
            assert after == [(s, t) for s, t in matches if s > i], (text, i)
            head = [(m.start(), m.group()) for m in word_tokenizer().finditer(text[:i + 1])]
            assert head == [(s, t) for s, t in matches if s < i], (text, i)
    assert mays > 100   # the texts hold spaces inside emoji


def test_find_tokens_indexes_code_points():
    """``character`` counts code points (an astral emoji is one), ``token`` counts tokens."""
    text = "\U0001f600 don't\u200dstop, \U0001f44d\U0001f3fd"
    assert list(find_tokens(text, word_tokenizer())) == [
        Token(0, 0, "\U0001f600"), Token(1, 2, "don't"), Token(2, 8, "stop"), Token(3, 12, ","),
        Token(4, 14, "\U0001f44d"), Token(5, 15, "\U0001f3fd"),
    ]


def test_character_tokens():
    text = "a\U0001f44d\U0001f3fd\n \u00e9"
    assert [t.target for t in find_tokens(text, character_tokenizer())] == list(text)


# --- the reference's tokenizer, in its own venv -------------------------------------------

# Runs in the reference venv: reads {"mode", "strings"} as JSON on stdin; "spans" answers the
# [start, token] list of each string, "digests" a SHA-1 of its JSON (as ``_digest`` here).
REFERENCE_DRIVER = r"""
import hashlib, json, sys
from lmchallenge.core.common import WORD_TOKENIZER
request = json.load(sys.stdin)
spans = ([[m.start(), m.group()] for m in WORD_TOKENIZER.finditer(s)]
         for s in request["strings"])
if request["mode"] == "digests":
    out = [hashlib.sha1(json.dumps(x, ensure_ascii=False).encode()).hexdigest() for x in spans]
else:
    out = list(spans)
json.dump(out, sys.stdout)
"""


@pytest.fixture
def reference_python(reference_lmc: Path) -> Path:
    python = reference_lmc.parent / "python"
    if not python.exists():
        pytest.skip(f"no python next to the reference lmc ({python})")
    return python


def reference(python: Path, strings: list[str], mode: str = "spans") -> list:
    result = subprocess.run([str(python), "-I", "-c", REFERENCE_DRIVER], capture_output=True,
                            input=json.dumps({"mode": mode, "strings": strings}).encode(),
                            check=False)
    assert result.returncode == 0, result.stderr.decode(errors="replace")[-3000:]
    return json.loads(result.stdout)


def ours(strings: list[str]) -> list[list]:
    """Our [start, token] spans, as the games see them (ASCII strings take the fast path)."""
    return [[[t.character, t.target] for t in find_tokens(s, word_tokenizer())] for s in strings]


def _digest(spans: list) -> str:
    return hashlib.sha1(json.dumps(spans, ensure_ascii=False).encode()).hexdigest()


@pytest.mark.reference
def test_hand_written_expectations_are_the_references(reference_python):
    texts = [text for text, _ in CASES]
    assert [[t for _, t in spans] for spans in reference(reference_python, texts)] == \
        [expected for _, expected in CASES]


@pytest.mark.reference
def test_every_emoji_as_reference(reference_python):
    """Every sequence of today's ``emoji`` package (all versions, qualified or not), alone,
    between letters, after punctuation, doubled, and spelled with spaces between its code
    points (how the reference's list writes sequences)."""
    strings = []
    for e in sorted(emoji.EMOJI_DATA):
        strings += [e, f"x{e}x", f"!{e}", e + e, " ".join(e), f"a {' '.join(e)} b"]
    mismatches = [(s, mine, theirs) for s, mine, theirs
                  in zip(strings, ours(strings), reference(reference_python, strings))
                  if mine != theirs]
    assert not mismatches, f"{len(mismatches)} of {len(strings)} strings differ, first: " \
                           f"{mismatches[0]!r} (string, ours, reference's)"


def code_point_probes(first: int, last: int) -> list[str]:
    """One probe a code point c: "a{c}." tokenizes as "ac", "." if c is a word character,
    as "a", "c." if it is other punctuation or a symbol, as "a", "c", "." if it is an emoji
    and as "a", "." if it is in no class."""
    return ["a" + chr(cp) + "." for cp in range(first, last + 1) if not 0xD800 <= cp <= 0xDFFF]


def assert_code_points_as_reference(python: Path, first: int, last: int) -> None:
    probes = code_point_probes(first, last)
    # one long string per chunk: the reference pays per call, not per character
    chunk = 4096
    joined = [" ".join(probes[i:i + chunk]) for i in range(0, len(probes), chunk)]
    theirs = reference(python, joined, mode="digests")
    mine = [_digest(spans) for spans in ours(joined)]
    bad = [i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b]
    if bad:
        probes = probes[bad[0] * chunk:(bad[0] + 1) * chunk]
        for probe, a, b in zip(probes, ours(probes), reference(python, probes)):
            assert a == b, (f"U+{ord(probe[1]):04X}: ours {[t for _, t in a]}, "
                            f"reference {[t for _, t in b]}")
    assert len(mine) == len(theirs) and not bad


@pytest.mark.slow
@pytest.mark.reference
def test_basic_and_supplementary_planes_as_reference(reference_python):
    """Each code point of planes 0 and 1 (all scripts in common use, all emoji) is in the same
    class as in the reference (word, other punctuation/symbol, emoji or none)."""
    assert_code_points_as_reference(reference_python, 0, 0x1FFFF)


@pytest.mark.slow
@pytest.mark.reference
def test_every_code_point_as_reference(reference_python):
    assert_code_points_as_reference(reference_python, 0x20000, 0x10FFFF)


# --- every string of the real corpora -------------------------------------------------------

def corpus_files() -> list[Path]:
    return sorted(p for p in DATA.rglob("*") if p.is_file()
                  and p.name.endswith((".txt", ".txt.gz", ".jsonl", ".jsonl.gz"))
                  and not p.name.startswith(("README", "COPYING")))


def corpus_strings() -> dict[str, tuple[str, int]]:
    """Every distinct line (text files) or ``text`` (jsonl) of the corpora, in file order,
    with where it first occurs (path relative to the data folder, line number from 1)."""
    found: dict[str, tuple[str, int]] = {}
    for path in corpus_files():
        raw = path.read_bytes()
        lines = (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode("utf-8")
        lines = lines.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        marked_up = ".jsonl" in path.name
        where = str(path.relative_to(DATA))
        for number, line in enumerate(lines, 1):
            found.setdefault(json.loads(line)["text"] if marked_up else line, (where, number))
    return found


def test_corpus_files_found():
    names = {p.name for p in corpus_files()}
    assert {"train.txt.gz", "test.txt", "fortunes.txt.gz", "rails.train.jsonl.gz",
            "rails.test.jsonl.gz", "american-english.txt",
            "american-english-huge.txt.gz"} <= names, names


def assert_strings_as_reference(python: Path, strings: dict[str, tuple[str, int]]) -> None:
    texts = list(strings)
    theirs = reference(python, texts, mode="digests")
    assert len(theirs) == len(texts)
    mismatched = [i for i, (a, b) in enumerate(zip(map(_digest, ours(texts)), theirs)) if a != b]
    if mismatched:
        text = texts[mismatched[0]]
        where, number = strings[text]
        [mine], [their] = ours([text]), reference(python, [text])
        first = next(i for i, (a, b) in enumerate(zip(mine + [None], their + [None])) if a != b)
        pytest.fail(f"{len(mismatched)} of {len(texts)} strings tokenize differently; first "
                    f"{where}:{number} {text[:200]!r}: token {first}: ours "
                    f"{mine[first] if first < len(mine) else None}, reference's "
                    f"{their[first] if first < len(their) else None}")


@pytest.mark.reference
def test_corpus_sample_as_reference(reference_python):
    """Every non-ASCII string of the corpora and every 100th other one (deterministic)."""
    strings = corpus_strings()
    ascii_seen = 0
    sample = {}
    for text, where in strings.items():
        if not text.isascii():
            sample[text] = where
        else:
            ascii_seen += 1
            if ascii_seen % 100 == 1:
                sample[text] = where
    assert sum(not t.isascii() for t in sample) > 2000  # the corpora's non-ASCII lines
    assert_strings_as_reference(reference_python, sample)


@pytest.mark.slow
@pytest.mark.reference
def test_every_corpus_string_as_reference(reference_python):
    assert_strings_as_reference(reference_python, corpus_strings())
