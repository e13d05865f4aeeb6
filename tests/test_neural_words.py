"""The word logic of the neural adapter that needs no model (lmchallenge.model.neural.words and
.vocab over a vocabulary written here): which tokens may start a completion."""

from __future__ import annotations

import itertools

from lmchallenge.model.neural.vocab import Vocabulary
from lmchallenge.model.neural.words import WordScorer
from lmchallenge.tokenize import words

TAILS = ["e", "he", "The", "n't", "'s", "-mail", "_x", "#1", "@a", "9s", "e,", "s.", "..", ",",
         '"', " ", "e ", "é", "ée", "e\u0301", "ü", "’s", "日本", "😀", "a😀", "ſ", "Ω", "n\u00a0"]
PREFIXES = ["T", "Th", "don", "do", "e", "caf", "naï", "x_", "#", "-", ".", "'", "1990", "'em", "Ω"]


def scorer() -> WordScorer:
    texts = {p[:k] + tail for p in PREFIXES for k in range(len(p) + 1) for tail in TAILS}
    texts |= {" " + text for text in texts}
    pieces: list[bytes | None] = [None] + sorted(t.encode() for t in texts)
    pieces += [b"\xc3", b"caf\xc3", b" caf\xc3", b"\xa9s"]  # part of a character's UTF-8
    return WordScorer(lambda text: [], Vocabulary(pieces, eos_id=None, start_id=0),
                      continuations=None, path_rows=None)  # type: ignore[arg-type]


def test_tokens_that_cross_the_typed_text_are_the_word_tokenizers():
    """A token that spells the rest of the typed text and goes on may start a completion
    exactly when the typed prefix then the token's bytes after it is one LM Challenge word
    (lmchallenge.tokenize.words), whatever the prefix and the bytes (ASCII or not, part of a
    character)."""
    s = scorer()
    checked = 0
    for gap, prefix in itertools.product(["", " ", ' "'], PREFIXES):
        typed = (gap + prefix).encode()
        for cut in range(len(typed)):
            rest = typed[cut:]
            expected = []
            for token_id in s.vocab.starting_with(rest):
                try:
                    word = prefix + s.vocab.pieces[token_id][len(rest):].decode()
                except UnicodeDecodeError:
                    continue
                if words(word) == [word]:
                    expected.append(token_id)
            assert s._crossing(rest, prefix, gap) == tuple(expected), (rest, prefix)
            checked += len(expected)
    assert checked > 1000
