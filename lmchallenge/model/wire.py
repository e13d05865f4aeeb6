"""The LM Challenge line protocol, both halves: requests and answers as Python values and as
lines of text.

The protocol (docs/formats.md, "Model protocol"): UTF-8 lines, fields separated by TAB, one request a line:

* ``predict<TAB>CONTEXT[<TAB>CANDIDATE...]`` -> one answer line ``text<TAB>score<TAB>...``
  (an empty line when there is nothing to say);
* ``train<TAB>TEXT`` and ``clear`` -> no answer at all.

The client half (:func:`encode_request`, :func:`parse_answer`) is used by
:class:`lmchallenge.model.shell.ShellModel`; the server half (:func:`parse_request`,
:func:`format_answer`) by :func:`lmchallenge.model.serve.serve`.
"""

from __future__ import annotations

import itertools
import math
import numbers
import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Union

Result = list[tuple[str, float]]
"""A model's answer: ``(text, score)`` pairs; bigger score = more likely."""


# Requests ------------------------------------------------------------------------------

@dataclass(slots=True)
class Predict:
    """A ``predict`` request: ``context`` (untokenized text) and optional candidates."""

    context: str
    candidates: Sequence[str] | None = None


@dataclass(slots=True)
class Train:
    """A ``train`` request: the text of one message."""

    text: str


@dataclass(frozen=True, slots=True)
class Clear:
    """A ``clear`` request."""


Request = Union[Predict, Train, Clear]


def protocol_text(text: str) -> str:
    """``text`` made safe for one protocol field: TAB, LF and CR become spaces."""
    if "\t" in text or "\n" in text or "\r" in text:
        return text.replace("\t", " ").replace("\n", " ").replace("\r", " ")
    return text


def encode_request(request: Request) -> str:
    """One protocol line (with its newline) for ``request``."""
    kind = type(request)
    if kind is Predict:
        if request.candidates is None:
            return "predict\t" + protocol_text(request.context) + "\n"
        return "\t".join(["predict", protocol_text(request.context),
                          *map(protocol_text, request.candidates)]) + "\n"
    if kind is Train:
        return "train\t" + protocol_text(request.text) + "\n"
    return "clear\n"


def parse_answer(line: str, on_duplicates: Callable[[Result], None] | None = None,
                 finite: bool = True) -> Result:
    """Parse ``text<TAB>score<TAB>...`` (without its newline) into pairs.

    A text given more than once keeps its first pair (the later ones are dropped and
    ``on_duplicates``, if given, is called with the pairs as answered).  With
    ``finite=False`` the scores are not checked to be finite: the caller checks many
    answers at once (:func:`first_non_finite`).

    A line ending in CR (a model writing CRLF) is read without it, as LM Challenge 5.x
    reads answers (universal newlines): the last field is a score, never text.

    Raises:
        ValueError: an odd number of fields, a score that is not a number, or (``finite``)
            one that is not finite (``nan``, ``inf``, or beyond the float range such as
            ``1e309``).
    """
    if line.endswith("\r"):    # QA: an empty answer in CRLF was refused ("got 1 fields")
        line = line[:-1]
    if not line:
        return []
    fields = line.split("\t")
    if len(fields) % 2:
        raise ValueError(f"expected text<TAB>score pairs, got {len(fields)} fields")
    texts = fields[0::2]
    try:
        result = list(zip(texts, map(float, fields[1::2])))
    except ValueError:
        raise ValueError("a score is not a number") from None
    if finite:
        total = sum(map(_SCORE, result))
        if total - total != 0:  # an inf or a nan among them (or finite scores past the range)
            _check_finite(texts, fields[1::2])
    n = len(texts)
    if n > 1 and (texts[0] == texts[1] or n > 2 and  # a set only for 3 texts or more
                  (texts[2] in (texts[0], texts[1]) if n == 3 else len(set(texts)) != n)):
        if on_duplicates is not None:
            on_duplicates(result)
        result = first_of_each(result)
    return result


_SCORE = operator.itemgetter(1)


def first_non_finite(answers: list[Result]) -> int | None:
    """The index of the first answer with a score that is not finite (NaN, an infinity),
    or None; one pass in C over all the scores when they are all finite."""
    total = sum(map(_SCORE, itertools.chain.from_iterable(answers)))
    if total - total == 0:
        return None
    for index, answer in enumerate(answers):
        if not all(map(math.isfinite, map(_SCORE, answer))):
            return index
    return None  # finite scores whose sum is past the float range


def _check_finite(texts: list[str], scores: list[str]) -> None:
    for text, score in zip(texts, scores):
        if not math.isfinite(float(score)):
            raise ValueError(f"the score of {text!r} is not a finite number ({score!r})")


def check_result(result: Sequence) -> bool:
    """Raise ``ValueError`` unless ``result`` (an in-process model's answer, a list) is
    ``(text, score)`` pairs, each text a string and each score ``None`` (no score, as
    LM Challenge 5.x's ``wc`` allows) or a finite real number (not a bool).

    Returns:
        whether every score is ``None``, a ``float`` or an ``int``, as a log holds them;
        else some is a real number of another type (NumPy's ``float32``, a ``Fraction``:
        :func:`plain_scores` makes them floats).
    """
    plain = True
    for item in result:
        try:
            text, score = item
        except (TypeError, ValueError):
            raise ValueError(f"{_shown(item)} is not a (text, score) pair") from None
        if not isinstance(text, str):
            raise ValueError(f"the text {_shown(text)} is not a string")
        if score is None or (type(score) is float and score - score == 0):
            continue
        if isinstance(score, bool) or not isinstance(score, numbers.Real):
            raise ValueError(f"the score of {text!r} is not a number ({_shown(score)})")
        if not math.isfinite(score):
            raise ValueError(f"the score of {text!r} is not a finite number ({score!r})")
        plain = plain and type(score) in (float, int)
    return plain


def plain_scores(result: Result) -> Result:
    """``result`` (checked by :func:`check_result`) with every score that is not ``None``, a
    ``float`` or an ``int`` made a ``float`` (NumPy's ``float32``: QA, a log's JSON could
    not hold it)."""
    return [(text, score if score is None or type(score) in (float, int) else float(score))
            for text, score in result]


def _shown(value: object, most: int = 100) -> str:
    text = repr(value)
    return text if len(text) <= most else text[:most] + "..."


def has_duplicates(result: Result) -> bool:
    """True if some text of ``result`` appears more than once."""
    return len(result) > 1 and len({text for text, _ in result}) != len(result)


def first_of_each(result: Result) -> Result:
    """``result`` with only the first pair of each text, in order."""
    seen: set[str] = set()
    kept = []
    for pair in result:
        if pair[0] not in seen:
            seen.add(pair[0])
            kept.append(pair)
    return kept


def format_answer(results: Iterable[tuple[str, float | None]]) -> str:
    """One answer line (with its newline): ``text<TAB>score...``; pairs whose score is
    ``None`` are left out, and TAB/LF/CR in a text become spaces."""
    return "\t".join(f"{protocol_text(text)}\t{float(score)!r}"
                     for text, score in results if score is not None) + "\n"


def parse_request(line: str) -> tuple[str, str, Sequence[str] | None]:
    """Split one request line (without its newline) into ``(command, text, candidates)``.

    ``text`` is the context of ``predict`` or the text of ``train`` (``""`` when missing);
    ``candidates`` is ``None`` unless ``predict`` has fields after its context.
    """
    fields = line.split("\t")
    text = fields[1] if len(fields) > 1 else ""
    candidates = fields[2:] if len(fields) > 2 else None
    return fields[0], text, candidates


__all__ = ["Result", "Predict", "Train", "Clear", "Request", "protocol_text", "encode_request",
           "parse_answer", "first_non_finite", "check_result", "plain_scores", "has_duplicates", "first_of_each", "format_answer",
           "parse_request"]
