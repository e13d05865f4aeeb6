"""The text of a subword vocabulary, and which tokens end or continue an LM Challenge word.

A causal LM predicts token ids; LM Challenge scores words, as its word tokenizer
(:mod:`lmchallenge.tokenize`) cuts them.  This module maps every token id to the bytes it
stands for and classifies tokens against that tokenizer:

* a token **ends** a word ``w`` (is in the *boundary set* of ``w``) when the text ``w`` then
  the token's text starts with the token ``w`` itself: the word is over (``"earth"`` then
  ``"."`` or ``" and"``).  The end-of-sequence token ends every word.  Tokens whose text
  does not start with a whole character (a byte-level token holding part of a UTF-8
  sequence) and other special tokens are in no boundary set: leaving them out can only
  lower a word's probability, never let two words' events overlap.
* a token **continues** a word of a class when all its characters are characters of that
  word class (rule 2: letters, digits, ``'``, ``-``, ...; rule 3: punctuation and symbols),
  possibly followed by the first bytes of one more character, which the tokens after it
  finish (:meth:`Vocabulary.completing`: byte-level vocabularies spell CJK, emoji and many
  accented letters in several tokens).

Token texts: byte-level BPE (GPT-2, SmolLM2, Llama 3) maps each byte to a printable
character (Radford et al. 2019, GPT-2's ``bytes_to_unicode``); SentencePiece-style
vocabularies write a space as ``▁`` and may spell bytes as ``<0xNN>`` (byte fallback).
"""

from __future__ import annotations

import bisect
import codecs
import json
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from lmchallenge.tokenize import emoji_sequences, word_tokenizer

SPACE_MARK = "\u2581"  # ▁, SentencePiece's word-beginning marker


@lru_cache(maxsize=1)
def byte_level_decoder() -> dict[str, int]:
    """GPT-2's byte-to-printable-character table, inverted: character -> byte value.

    Printable Latin-1 bytes stand for themselves; the other 68 bytes are mapped, in order,
    to code points from U+0100 up (Radford et al. 2019, ``encoder.py``).
    """
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars)}


class UnsupportedTokenizer(ValueError):
    """A tokenizer whose token texts do not say where words begin as this module reads them."""


def _decoder_kind(tokenizer: Any) -> str:
    """``"byte-level"`` or ``"metaspace"``, from the fast tokenizer's normalizer,
    pre-tokenizer and decoder.

    Raises:
        UnsupportedTokenizer: neither (WordPiece's ``##``, a BPE ``</w>`` suffix: the space
            between words is in no token, so no token can end a word: QA, a BERT tokenizer
            ran with every word unscored, exit 0).
    """
    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    text = json.dumps([spec.get("decoder"), spec.get("pre_tokenizer"), spec.get("normalizer")])
    if '"ByteLevel"' in text:
        return "byte-level"
    if '"Metaspace"' in text or "\\u2581" in text:    # Llama 2: Replace " " by "▁"
        return "metaspace"
    decoder = (spec.get("decoder") or {}).get("type") or "none"
    raise UnsupportedTokenizer(
        f"its tokenizer (decoder {decoder}) keeps the space between words in no token, so "
        "no token can end a word: byte-level BPE (GPT-2, Llama 3, SmolLM2) and SentencePiece "
        "('\u2581') tokenizers only")


def _piece_bytes(piece: str, kind: str) -> bytes | None:
    if kind == "byte-level":
        table = byte_level_decoder()
        try:
            return bytes(table[c] for c in piece)
        except KeyError:
            return None
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        return bytes([int(piece[3:5], 16)])
    return piece.replace(SPACE_MARK, " ").encode("utf-8")


def first_char(data: bytes) -> str | None:
    """The first character of ``data`` when it is whole (valid UTF-8), else ``None``."""
    for size in (1, 2, 3, 4):
        try:
            return data[:size].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return None


def split_utf8(data: bytes) -> tuple[str, bytes] | None:
    """``data`` as its whole characters and the bytes of an unfinished last character
    (``b""`` when none), or ``None`` when ``data`` is not valid UTF-8 so far."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        text = decoder.decode(data, final=False)
    except UnicodeDecodeError:
        return None
    return text, decoder.getstate()[0]


def keeps_one_word(before: str, data: bytes) -> bool:
    """Whether the bytes ``data`` after the text ``before`` (a word, or a representative of its
    class; ``""``: they begin the word) keep it one word: valid UTF-8 whose whole characters
    continue it, then perhaps the first bytes of one more character (which the tokens after
    finish), or those first bytes alone."""
    split = split_utf8(data)
    if split is None:
        return False
    whole, unfinished = split
    return single_word(before + whole) if whole else bool(unfinished)


def _head(data: bytes) -> str:
    """A token's text as the word tokenizer reads it after a word: its decoded text, or only
    its first character where the bytes after it do not decode."""
    text = data.decode("utf-8", errors="ignore")
    char = first_char(data)
    return text if char is not None and text.startswith(char) else (char or "")


def _emoji_rests(word: str) -> tuple[str, ...]:
    """What follows ``word`` in each emoji sequence longer than it that starts with it."""
    return _emoji_rests_by_start().get(word, ())


@lru_cache(maxsize=1)
def _emoji_rests_by_start() -> dict[str, tuple[str, ...]]:
    """Every proper beginning of an emoji sequence -> :func:`_emoji_rests` of it."""
    rests: dict[str, list[str]] = {}
    for sequence in emoji_sequences():
        for k in range(1, len(sequence)):
            rests.setdefault(sequence[:k], []).append(sequence[k:])
    return {start: tuple(found) for start, found in rests.items()}


def single_word(text: str) -> bool:
    """True when ``text`` is exactly one LM Challenge word token."""
    match = word_tokenizer().pattern_for(text).match(text)
    return match is not None and match.end() == len(text) > 0


def ends_word(word: str, following: str) -> bool:
    """True when ``word`` followed by ``following`` still starts with the token ``word``."""
    text = word + following
    match = word_tokenizer().pattern_for(text).match(text)
    return match is not None and match.end() == len(word)


@dataclass
class Vocabulary:
    """Every token id's bytes and the boundary sets of word classes.

    Attributes:
        pieces: bytes of each token id (``None``: a special token or an id with no text),
            length = the model's output size.
        eos_id: the end-of-sequence token (ends every word), or ``None``.
        start_id: the token a sequence starts with (BOS, else EOS).
    """

    pieces: list[bytes | None]
    eos_id: int | None
    start_id: int
    _by_bytes: dict[bytes, int] | None = field(default=None, repr=False)
    _sorted: tuple[list[bytes], list[int]] | None = field(default=None, repr=False)
    _continuing: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    _ending_ids: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    _chars: tuple[list[str], np.ndarray] | None = field(default=None, repr=False)
    _completing: dict[tuple[bytes, str | None], np.ndarray] = field(default_factory=dict, repr=False)
    _finishing_ids: np.ndarray | None = field(default=None, repr=False)

    @classmethod
    def from_tokenizer(cls, tokenizer: Any, size: int, start_id: int | None = None) -> "Vocabulary":
        """Read a Hugging Face fast tokenizer; ``size`` is the model's output (logit) size;
        ``start_id``: the token texts start with (default: the tokenizer's BOS, else EOS).

        A token added to the tokenizer that is not special (whitespace runs, a word) is
        its text as given, not in the vocabulary's spelling.

        Raises:
            UnsupportedTokenizer: no token marks where a word begins (:func:`_decoder_kind`).
            ValueError: no ``start_id`` and the tokenizer has neither BOS nor EOS.
        """
        kind = _decoder_kind(tokenizer)
        special = set(tokenizer.all_special_ids)
        added_text: dict[int, str] = {}
        for added_id, added in tokenizer.added_tokens_decoder.items():
            if added.special:
                special.add(added_id)
            else:   # QA: " LORD" or "  " read as byte-level spelling had no text at all
                added_text[added_id] = added.content
        pieces: list[bytes | None] = [None] * size
        names = tokenizer.convert_ids_to_tokens(list(range(min(size, len(tokenizer)))))
        for token_id, piece in enumerate(names):
            if token_id in added_text and token_id not in special:
                text = added_text[token_id]
                pieces[token_id] = (text.replace(SPACE_MARK, " ") if kind == "metaspace"
                                    else text).encode("utf-8")
            elif piece is not None and token_id not in special:
                pieces[token_id] = _piece_bytes(piece, kind)
        eos = tokenizer.eos_token_id
        start = next((i for i in (start_id, tokenizer.bos_token_id, eos) if i is not None), None)
        if start is None:
            raise ValueError("the tokenizer has neither a BOS nor an EOS token to start a text")
        return cls(pieces, eos, start)

    @staticmethod
    def word_class(word: str) -> str:
        """The key of a word's boundary set: ``"w"`` (rule 2 runs), ``"p"`` (rule 3 runs), or
        the word itself (emoji: checked one by one)."""
        if single_word("a" + word):
            return "w"
        if word.isascii() and single_word("." + word):
            return "p"
        return "=" + word  # emoji and other punctuation: their own set

    def _representative(self, key: str) -> str:
        return {"w": "a", "p": "."}.get(key, key[1:])

    def ending(self, word: str) -> tuple[str, np.ndarray]:
        """The name of ``word``'s boundary set (its :meth:`word_class`; its own for a word
        that begins a longer emoji sequence, as the keycaps begin with ``#`` and digits) and
        the set's token ids (int64, ascending): the tokens that end ``word`` (module doc).

        Whether a token ends a word is decided by its first character alone (the word
        tokenizer's runs go on or stop there; an emoji word is whole), except for the tokens
        that go on with the rest of a longer emoji sequence the word begins (``👍`` then
        ``" 🏻"``), which do not end it: so the tokenizer is asked once per distinct first
        character, not once per token."""
        key = self.word_class(word)
        if _emoji_rests(word):
            key = "=" + word
        ids = self._ending_ids.get(key)
        if ids is None:
            rep = self._representative(key)
            chars, starts = self._first_chars()
            ends = np.array([ends_word(rep, c) for c in chars] + [False], dtype=bool)
            mask = ends[starts]  # the last entry: tokens without a whole first character
            longer = _emoji_rests(rep)
            if longer:
                mask &= [not (data and _head(data).startswith(longer)) for data in self.pieces]
            if self.eos_id is not None:
                mask[self.eos_id] = True
            ids = np.flatnonzero(mask).astype(np.int64)
            self._ending_ids[key] = ids
        return key, ids

    def _first_chars(self) -> tuple[list[str], np.ndarray]:
        """The distinct first characters of the tokens, and each token's index into them
        (``len(chars)``: a token without bytes or without a whole first character)."""
        if self._chars is None:
            index: dict[str, int] = {}
            starts = np.empty(len(self.pieces), dtype=np.int64)
            for token_id, data in enumerate(self.pieces):
                char = first_char(data) if data else None
                starts[token_id] = -1 if char is None else index.setdefault(char, len(index))
            starts[starts < 0] = len(index)
            self._chars = (list(index), starts)
        return self._chars

    def continuing(self, word: str) -> np.ndarray:
        """Token ids whose text is whole characters that all continue ``word``'s class,
        possibly then the first bytes of one more character (the next token finishes it:
        :meth:`completing`).  A word of a set of its own (non-ASCII punctuation, an emoji:
        ``”`` goes on as ``”,``; there were none, so such words got no completions: QA) has
        its own, from the tokens whose first character keeps it one word, those that begin
        with part of one, and those that spell the first two characters (a space and one
        more) of the rest of a longer emoji sequence it begins (``👍`` then ``" 🏻"``)."""
        key = self.word_class(word)
        ids = self._continuing.get(key)
        if ids is None:
            if key in ("w", "p"):
                rep = self._representative(key)
                candidates = (i for i, data in enumerate(self.pieces) if data)
            else:
                rep = word
                chars, starts = self._first_chars()
                keeps = np.array([single_word(word + c) for c in chars] + [True])
                candidates = np.flatnonzero(keeps[starts]).tolist()
                for two in {rest[:2].encode("utf-8") for rest in _emoji_rests(word)}:
                    candidates += [i for i in (self.token_id(two), *self.starting_with(two))
                                   if i is not None]
                candidates = sorted(set(candidates))    # ascending, each once
            ids = np.array([i for i in candidates
                            if self.pieces[i] and keeps_one_word(rep, self.pieces[i])],
                           dtype=np.int64)
            self._continuing[key] = ids
        return ids

    def completing(self, unfinished: bytes, word: str) -> np.ndarray:
        """Token ids that go on from a text ending with the first bytes ``unfinished`` of a
        character, after the whole characters ``word`` (``""``: that character begins the
        word): those whose bytes finish it (and possibly more characters, and the first
        bytes of another) so that the word stays one word of ``word``'s class; a token that
        leaves it still unfinished too.  Byte-level vocabularies spell many characters
        (CJK, emoji, accented letters) in several tokens."""
        key = self.word_class(word) if word else None
        ids = self._completing.get((unfinished, key))
        if ids is None:
            if self._finishing_ids is None:   # the tokens that start inside a character
                self._finishing_ids = np.array(
                    [i for i, data in enumerate(self.pieces) if data and 0x80 <= data[0] < 0xC0],
                    dtype=np.int64)
            rep = "" if key is None else self._representative(key)
            ids = np.array([token_id for token_id in self._finishing_ids
                            if keeps_one_word(rep, unfinished + self.pieces[token_id])],
                           dtype=np.int64)
            self._completing[unfinished, key] = ids
        return ids

    def token_id(self, data: bytes) -> int | None:
        """The id of the token whose bytes are ``data`` (the first such id), or ``None``."""
        if self._by_bytes is None:
            self._by_bytes = {}
            for token_id, piece in enumerate(self.pieces):
                if piece and piece not in self._by_bytes:
                    self._by_bytes[piece] = token_id
        return self._by_bytes.get(data)

    def starting_with(self, data: bytes) -> list[int]:
        """Ids of the tokens whose bytes start with ``data`` and are longer than it."""
        if self._sorted is None:
            pairs = sorted((p, i) for i, p in enumerate(self.pieces) if p)
            self._sorted = ([p for p, _ in pairs], [i for _, i in pairs])
        keys, ids = self._sorted
        lo = bisect.bisect_right(keys, data)
        hi = bisect.bisect_left(keys, data + b"\xff\xff\xff\xff\xff")
        return [ids[k] for k in range(lo, hi) if keys[k].startswith(data) and keys[k] != data]
