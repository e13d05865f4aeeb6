"""The dummy prefix of SentencePiece-style tokenizers, made an explicit space.

SentencePiece (Kudo & Richardson 2018, its ``add_dummy_prefix`` option) and the fast
tokenizers converted from it for Llama 2, Mistral, TinyLlama or Phi-3 put a ``▁`` (a space)
before the text they encode: ``"In the"`` is ``▁In ▁the``, as if it were ``" In the"``.  The
model was trained on texts encoded so.  Word probabilities are computed piece by piece (a
context's pieces, then a word's, :mod:`lmchallenge.model.neural.words`), and such a tokenizer
puts the prefix before every piece it is given: ``","`` becomes ``▁ ,``, a space that is in
no text.  (A byte-level tokenizer with ``add_prefix_space`` does the same with ``Ġ``.)

So for such a tokenizer every text is given a leading space (:attr:`Encoder.lead`), and its
pieces are encoded by a copy of the tokenizer without the prefix: the pieces of ``" " +
text`` then join into the tokens the tokenizer gives ``text`` whole, which is what the model
saw.  The prefix is found by its effect (a test encoding, not the tokenizer's name) and the
copy is checked to give the same tokens before it is used; a tokenizer that puts a space
before every text and cannot be copied without it is refused (:class:`NoPlainCopy`): every
text's first word would be.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

PROBES = ("In the beginning", "light, and", "x", "God's 2 days.")
"""Texts whose tokens, with and without the prefix, tell whether the copy is faithful."""


class NoPlainCopy(ValueError):
    """The tokenizer puts a space before every text, and no copy of it without that space
    gives the tokens the model reads."""


@dataclass(frozen=True)
class Encoder:
    """How to turn text into the model's tokens piece by piece.

    Attributes:
        encode: text -> token ids (no special tokens), for any piece of a text.
        lead: put before every text (a context, or the start of one) first: ``" "`` for a
            tokenizer with a dummy prefix, else ``""``.
    """

    encode: Callable[[str], list[int]]
    lead: str = ""


def encoder(tokenizer: Any, pieces: list[bytes | None]) -> Encoder:
    """The :class:`Encoder` of a transformers fast tokenizer whose token ids spell
    ``pieces`` (:attr:`lmchallenge.model.neural.vocab.Vocabulary.pieces`).

    Raises:
        NoPlainCopy: it puts a space before every text and cannot be copied without it.
    """
    def plain(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False)

    if not _adds_a_space(pieces, plain):
        return Encoder(plain)
    backend = _without_prefix(tokenizer.backend_tokenizer)

    def bare(text: str) -> list[int]:
        return backend.encode(text, add_special_tokens=False).ids

    if backend is None or _adds_a_space(pieces, bare) or any(
            bare(" " + probe) != plain(probe) for probe in PROBES):
        raise NoPlainCopy("the tokenizer puts a space before every text it encodes (a "
                          "dummy prefix) in a way this adapter cannot undo, so no text's "
                          "first word could be scored")
    return Encoder(bare, lead=" ")


def _adds_a_space(pieces: list[bytes | None], encode: Callable[[str], list[int]]) -> bool:
    """True when ``encode`` writes a space before a text that has none."""
    ids = encode("x")
    return bool(ids) and (pieces[ids[0]] or b"").startswith(b" ")


def _without_prefix(backend: Any) -> Any:
    """A copy of a ``tokenizers.Tokenizer`` with no dummy prefix: a ``Prepend("▁")``
    normalizer dropped, a ``Metaspace`` pre-tokenizer's ``prepend_scheme`` set to ``never``,
    a ``ByteLevel`` one's ``add_prefix_space`` unset (``None``: the prefix is not made in
    any of these ways)."""
    from tokenizers import Tokenizer
    spec = json.loads(backend.to_str())
    bare = {**spec, "normalizer": _bare(spec.get("normalizer")),
            "pre_tokenizer": _bare(spec.get("pre_tokenizer"))}
    return None if bare == spec else Tokenizer.from_str(json.dumps(bare))


def _bare(node: Any) -> Any:
    """A normalizer's or pre-tokenizer's JSON without what puts a prefix before a text."""
    if not isinstance(node, dict):
        return node
    kind = node.get("type")
    if kind == "Sequence":
        key = "normalizers" if "normalizers" in node else "pretokenizers"
        kept = [_bare(child) for child in node.get(key, [])]
        return {**node, key: [child for child in kept if child is not None]}
    if kind == "Prepend":
        return None
    if kind == "ByteLevel" and node.get("add_prefix_space"):
        return {**node, "add_prefix_space": False}
    if kind == "Metaspace":
        return {**node, "prepend_scheme": "never",
                **({"add_prefix_space": False} if "add_prefix_space" in node else {})}
    return node
