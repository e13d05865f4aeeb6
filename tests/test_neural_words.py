"""The word logic of the neural adapter that needs no model (lmchallenge.model.neural.words and
.vocab over a vocabulary written here): which tokens may start a completion, and which end a
word, each checked token by token against the word tokenizer."""

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
    character), where those bytes may end with the first bytes of one more character (the
    next token finishes it)."""
    import codecs

    s = scorer()
    checked = 0
    for gap, prefix in itertools.product(["", " ", ' "'], PREFIXES):
        typed = (gap + prefix).encode()
        for cut in range(len(typed)):
            rest = typed[cut:]
            expected = []
            for token_id in s.vocab.starting_with(rest):
                decoder = codecs.getincrementaldecoder("utf-8")()
                try:
                    word = decoder.decode(prefix.encode() + s.vocab.pieces[token_id][len(rest):])
                except UnicodeDecodeError:
                    continue
                unfinished = decoder.getstate()[0]
                if (words(word) == [word]) if word else unfinished:
                    expected.append(token_id)
            assert s._crossing(rest, prefix, gap) == tuple(expected), (rest, prefix)
            checked += len(expected)
    assert checked > 1000


def test_a_words_boundary_set_is_the_word_tokenizers():
    """The tokens that end a word (its boundary set) are those after which the word
    tokenizer still reads the word alone: checked token by token with
    lmchallenge.tokenize.words, for words of letters, punctuation, and emoji that begin
    longer emoji sequences (👍 then " 🏻" does not end 👍: the sequence is one word)."""
    from lmchallenge.tokenize import emoji_sequences
    targets = ["a", "don't", ".", "…", "’", "👍", "❤", "🇺", "👨", "#", "1", "日本", "😀"]
    rests = {e[len(w):] for w in targets for e in emoji_sequences()
             if e.startswith(w) and len(e) > len(w)}
    texts = sorted({*TAILS, *rests, *(r[:2] for r in rests), *(" " + t for t in TAILS)})
    pieces: list[bytes | None] = [None, b""] + [t.encode() for t in texts]
    pieces += [b"\xc3", b"\xa9s", "é".encode() + b"\xc3"]
    vocab = Vocabulary(pieces, eos_id=0, start_id=0)
    assert len(rests) > 20
    for word in targets:
        expected = [0]  # the end of the sequence ends every word
        for token_id, data in enumerate(pieces[1:], start=1):
            text = data.decode("utf-8", errors="ignore") if data else ""
            if not text or not data.startswith(text[0].encode()):
                continue  # no whole first character: in no boundary set
            whole = text if data.decode("utf-8", errors="replace").startswith(text) else text[0]
            if words(word + whole)[0] == word:
                expected.append(token_id)
        assert vocab.ending(word)[1].tolist() == expected, word


def test_a_split_kept_for_the_next_context_gives_a_fresh_split_s_pieces_and_tokens():
    """The queries of a line extend each other's contexts: the last split's pieces and tokens
    are kept for the next (splitting a 1,000-word line was quadratic), up to a margin before
    its end, where appended text may extend or join a token (a word, an emoji sequence, a
    run of punctuation; ASCII text turning into text that is not).  Every context, extending
    the last or not, splits as on its own, and its tokens are its pieces' tokens."""
    from lmchallenge.model.neural.words import SPLIT_MARGIN, _LastSplit, pieces
    text = ("The 👨‍👩‍👧 family's café-au-lait, don't... naïve 🇬🇧 flags!!! "
            + "a" * (SPLIT_MARGIN + 5) + "é ---" + "👍🏽" * 3 + " end") * 4
    ends = list(range(0, len(text), 3)) + [len(text), 40, 7, len(text), 0, len(text)]

    def encode(piece: str) -> tuple[int, ...]:
        return tuple(map(ord, piece))

    last = _LastSplit(start_id=-1)
    for end in ends:
        context = text[:end]
        found, gap = last.split(context)
        assert (found, gap) == pieces(context)
        for count in sorted({0, len(found) // 2, len(found)}):
            assert last.tokens_of(found[:count], encode) == (-1, *map(ord, "".join(found[:count])))
    assert last.tokens_of(["not", "these"], encode) is None


def test_an_ascii_context_extended_splits_as_on_its_own():
    """ASCII text keeps every piece of the last split but the one that reaches its end (runs
    of word and punctuation characters, and the characters in both, go on across the end):
    every prefix of a text of such runs splits as on its own."""
    from lmchallenge.model.neural.words import _LastSplit, pieces
    text = ("don't... #1 a-b--c __x@y.z 'quoted' (a)b!!!? 3.14,5 e-mail's -- x_ " * 3).strip()
    assert text.isascii()
    last = _LastSplit(start_id=-1)
    for end in range(len(text) + 1):
        assert last.split(text[:end]) == pieces(text[:end])
