"""The model API of LM Challenge 5.x: the base classes of in-process Python models.

A model answers three requests (docs/formats.md, "Model protocol"):

* ``predict(context, candidates)``: scored continuations of ``context``; with
  ``candidates=None`` the model proposes its own, otherwise it scores those it can;
* ``train(text)``: adapt to a message after it has been evaluated;
* ``clear()``: forget everything learnt by ``train`` (a new user starts).

:class:`Model`, :class:`WordModel` and :class:`FilteringWordModel` have the names and
semantics of LM Challenge 5.x.  Other ways to run a model: :mod:`lmchallenge.model.shell`
(a program speaking the line protocol), :mod:`lmchallenge.model.spec` (``module:Class`` or a
command line), :mod:`lmchallenge.model.session` (answers for a stream of requests).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import regex

from lmchallenge.model.serve import serve
from lmchallenge.model.wire import Result
from lmchallenge.tokenize import word_tokenizer

class Model:
    """Base class of a language model (LM Challenge 5.x API).

    Subclasses implement :meth:`predict`; :meth:`train` and :meth:`clear` default to doing
    nothing.  A model may also offer ``predict_batch(queries)`` (a list of
    ``(context, candidates)`` pairs -> a list of results), which :func:`session` uses to
    score many queries at once, up to its ``predict_batch_size`` attribute (an int, if it
    has one; else 64) a call.  Models are context managers.

    A class may name the games it does not play in :attr:`refuses`; ``lmc run`` and
    ``lmc-dist`` then refuse to start them with it, before it is made, and again once it is
    made if the model sets its own ``refuses`` (what it plays may depend on what it loaded:
    :class:`lmchallenge.model.ngram.NgramModel`).  A shell model reads the game from
    ``LMC_GAME`` in its environment instead (docs/formats.md).
    """

    refuses: Mapping[str, str] = MappingProxyType({})
    """Games (``we``, ``wc``, ``wr``, ``ce``) this model does not play, each with why: a word
    model cannot give ``ce``'s character probabilities, and some of ``ce``'s queries (a
    one-character word after a whole word) look like ``we``'s, so only the game can tell."""

    def predict(self, context: str, candidates: Sequence[str] | None) -> Result:
        """Continuations of ``context`` with scores.

        Args:
            context: the text before the prediction point; it may end inside a word, in
                which case every returned string is the rest of that word (``"I like bi"``
                -> ``"rds"``).
            candidates: ``None`` to let the model propose continuations, or strings to
                score (those the model cannot score are left out of the answer).
        Returns:
            ``[(continuation, score), ...]``, most likely first.  For the entropy games the
            score must be a log-probability (natural log) normalised over the vocabulary.
        """
        raise NotImplementedError

    def train(self, text: str) -> None:
        """Adapt to ``text`` (one message the current user typed).  Default: nothing."""

    def clear(self) -> None:
        """Forget all that :meth:`train` taught (a new user starts).  Default: nothing."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Release resources (processes, files).  Default: nothing."""

    def run_loop(self, input_stream=None, output_stream=None, error_stream=None) -> None:
        """Serve this model over the line protocol (stdin/stdout by default) until EOF."""
        serve(self, input_stream, output_stream, error_stream)


def split_context(context: str, tokenizer: regex.Pattern) -> tuple[list[str], str]:
    """Split ``context`` into finished word tokens and the prefix of the word being typed.

    The last token is the prefix when it reaches the end of ``context``; otherwise the
    prefix is ``""`` (the context ends with a space or a separator).
    """
    matches = list(tokenizer.finditer(context))
    if matches and matches[-1].end() == len(context):
        return [m.group() for m in matches[:-1]], matches[-1].group()
    return [m.group() for m in matches], ""


class WordModel(Model):
    """A model over whole words: subclasses implement :meth:`predict_word` and :meth:`score_word`.

    The context is split by the word tokenizer (or ``token_pattern``) into previous words
    and the prefix of the current word.
    """

    def __init__(self, token_pattern: str | None = None):
        self._tokenizer = word_tokenizer() if token_pattern is None else regex.compile(token_pattern)

    def predict(self, context: str, candidates: Sequence[str] | None) -> Result:
        words, prefix = split_context(context, self._tokenizer)
        if candidates is None:
            return self.predict_word(words, prefix)
        return self.score_word(words, [prefix + c for c in candidates])

    def predict_word(self, context: list[str], prefix: str) -> Result:
        """Next words (``prefix == ""``) or completions: ``[(suffix after prefix, score)]``."""
        raise NotImplementedError

    def score_word(self, context: list[str], candidates: list[str]) -> Result:
        """Scores of whole-word ``candidates`` after the words ``context``: ``[(word, score)]``."""
        raise NotImplementedError

    def train(self, text: str) -> None:
        self.train_word(self._tokenizer.findall(text))

    def train_word(self, text: list[str]) -> None:
        """Adapt to a message given as word tokens.  Default: nothing."""


class FilteringWordModel(WordModel):
    """A :class:`WordModel` whose predictions come from a lazy ranked stream of words.

    Subclasses implement :meth:`predict_word_iter` (and :meth:`WordModel.score_word`);
    :meth:`predict_word` keeps the words that extend the typed prefix (strictly longer),
    match ``filter_pattern`` anywhere, and were not seen before, up to ``n_predictions``
    (None: every one, as in LM Challenge 5.x).
    """

    def __init__(self, n_predictions: int | None, filter_pattern: str = ".", **args: Any):
        super().__init__(**args)
        self.n_predictions = n_predictions
        self.filter_xp = regex.compile(filter_pattern)

    def predict_word_iter(self, context: list[str]) -> Iterable[tuple[str, float]]:
        """Candidate next words after ``context``, most likely first (duplicates allowed)."""
        raise NotImplementedError

    def predict_word(self, context: list[str], prefix: str) -> Result:
        seen: set[str] = set()
        found: Result = []
        limit = self.n_predictions
        if limit is not None and limit <= 0:
            return found
        for word, score in self.predict_word_iter(context):
            if len(word) <= len(prefix) or not word.startswith(prefix):
                continue
            if self.filter_xp.search(word) is None:
                continue
            suffix = word[len(prefix):]
            if suffix in seen:
                continue
            seen.add(suffix)
            found.append((suffix, score))
            if limit is not None and len(found) >= limit:
                break
        return found


__all__ = ["Model", "WordModel", "FilteringWordModel", "Result", "split_context"]
