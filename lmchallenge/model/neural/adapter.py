"""A causal transformer LM as an LM Challenge model: ``lmchallenge.model.neural.adapter:CausalLM``.

In process::

    lmc run lmchallenge.model.neural.adapter:CausalLM -o '{"model": "models/SmolLM2.gguf"}' we data.txt

or over the line protocol with ``lmc-neural serve MODEL`` (the same class behind it).

What each request means (sources in :mod:`lmchallenge.model.neural.words`):

* ``predict(context, candidates)`` (``we``, ``wr``): for each candidate that is one LM
  Challenge word token, the natural-log probability of that whole word after the context,
  word-boundary term included (Pimentel & Meister 2024); over any set of distinct words they
  sum to at most 1, so ``we`` entropies compare with other models'.  Candidates that are
  not one word token are left out (the log gets ``null``).  All candidates of a query, and
  all queries of a batch, go through shared forward passes: one candidate (``we``) in
  chunked passes the line's next word shares, several (``wr``) in one-token passes after
  the context, ``search_width`` tokens a pass
  (:meth:`lmchallenge.model.neural.words.WordScorer.score_batch`).
* ``predict(context, None)`` (``wc``): the ``top`` most probable words continuing what is
  typed at the end of the context (the next word after a gap), as the rest of the word,
  by a best-first search over tokens (exact unless ``max_expansions`` stops it).
* ``ce`` is refused before the model loads (:attr:`CausalLM.refuses`; ``lmc-neural serve``
  reads the game from ``LMC_GAME``), and so are character queries (a context ending inside
  a word and one candidate continuing it; among several candidates, as ``wr`` may send,
  such a candidate is left out), with :class:`~lmchallenge.errors.ModelError`: exact character
  probabilities need a sum over every tokenization covering the next character (Vieira et
  al. 2024, "From Language Models over Tokens to Language Models over Characters"), which
  is not implemented, and an approximation is never given silently.
* ``train``/``clear``: nothing (no adaptation: the model's weights and answers stay fixed).
* a word whose context and tokens are longer than the model's positions
  (``max_position_embeddings``, rounded down to whole chunks) is not scored, as a word the
  tokenizer cannot spell is not: past its positions a model either fails or extrapolates,
  and no number is better than a wrong one; completions stop there too.  A warning says so
  (once).

Answers are a function of the query alone (:mod:`lmchallenge.model.neural.engine`), for a given
model, ``chunk``, ``batch_size``, device and dtype.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from types import MappingProxyType
from typing import Any

from lmchallenge.errors import ModelError
from lmchallenge.model.api import Model
from lmchallenge.model.neural import REFUSED_GAMES
from lmchallenge.model.neural.engine import ChunkedLM
from lmchallenge.model.neural.loading import load
from lmchallenge.model.neural.prefix import NoPlainCopy, encoder
from lmchallenge.model.neural.vocab import UnsupportedTokenizer, Vocabulary
from lmchallenge.model.neural.words import RefusedQuery, WordScorer
from lmchallenge.model.wire import Result, protocol_text
from lmchallenge.tuning import own_limits, usable_cpus

CHUNK = 32
"""Default tokens per forward-pass row: KJV lines are about 40 tokens, so 32 pads less of each
pass than 64 (BENCHMARKS.md, "neural")."""


SEARCH_WIDTH = 16
"""Default paths per forward pass of the completion search: on the 2-core dev machine a pass
of 16 one-token rows costs about twice one row's (BENCHMARKS.md, "neural")."""


BATCH_SIZE = 4
"""Default rows of a forward pass: on the 2-core dev machine 1.6-1.8x one row for ``we``
under ``lmc run`` with its default ``--window`` (BENCHMARKS.md, "neural"); on a GPU give 16."""


QUERIES_PER_ROW = 64
"""Scoring queries a ``predict_batch`` call takes for each row of a forward pass: about
2.5 KJV lines of ``we`` a row, so the passes of a batch fill with chunks of different lines
(BENCHMARKS.md, "neural")."""


class CausalLM(Model):
    """A Hugging Face causal LM (directory or ``.gguf``) answering LM Challenge queries.

    Args (the ``-o`` JSON keys of ``lmc run``):
        model: path of a model directory or a ``.gguf`` file.
        device: ``cpu`` or ``cuda`` (``cuda:N``).
        dtype: ``auto`` (float32 on CPU, bfloat16 on CUDA), ``float32``, ``bfloat16``, ``float16``.
        batch_size: sequences per forward pass (every pass has this many rows); the model
            asks for ``64 * batch_size`` queries a ``predict_batch`` call
            (:attr:`predict_batch_size`), so that the rows can be filled.
        chunk: tokens per forward pass row.
        top: words returned for a query without candidates (``wc`` counts up to 20).
        max_expansions: paths the completion search may expand per query (>= 2: the first
            is the context itself).
        search_width: paths the completion search expands together, in one forward pass
            (of ``search_width`` rows of one token each).
        threads: CPU threads of torch (``None``: torch's default, one per core, also in
            ``lmc run``'s process, whose one-thread limit for NumPy's BLAS torch would read:
            :func:`lmchallenge.tuning.own_limits`); one thread is often faster on a busy
            machine, and is what a model gets in an ``lmc-dist`` worker.
        start_token: the token every text starts with (default: the tokenizer's BOS, else
            EOS); e.g. ``"<|endoftext|>"`` for a chat model whose BOS opens a chat turn.
        random_weights: the architecture and tokenizer of ``model`` with weights drawn at
            random (:func:`lmchallenge.model.neural.loading.load`): for speed measurements
            only, its answers mean nothing.
    Raises:
        ModelError: the model cannot be loaded.
    """

    refuses = MappingProxyType(REFUSED_GAMES)

    def __init__(self, model: str, device: str = "cpu", dtype: str = "auto",
                 batch_size: int = BATCH_SIZE, chunk: int = CHUNK, top: int = 20,
                 max_expansions: int = 64, threads: int | None = None,
                 start_token: str | None = None, random_weights: bool = False,
                 search_width: int = SEARCH_WIDTH):
        check_options(model, batch_size=batch_size, chunk=chunk, top=top,
                      max_expansions=max_expansions, search_width=search_width, threads=threads)
        check_kinds(model, model=model, device=device, dtype=dtype, start_token=start_token,
                    random_weights=random_weights)
        if threads is None and "MKL_NUM_THREADS" in own_limits():  # lmc's limit, not the user's
            threads = usable_cpus()
        if threads is not None:
            import torch
            torch.set_num_threads(threads)
        loaded = load(model, device=device, dtype=dtype, random_weights=random_weights)
        self._setup(loaded.model, loaded.tokenizer, name=model, batch_size=batch_size,
                    chunk=chunk, top=top, max_expansions=max_expansions, start_token=start_token,
                    search_width=search_width)

    @classmethod
    def from_objects(cls, model: Any, tokenizer: Any, name: str = "causal-lm",
                     **options: Any) -> "CausalLM":
        """A :class:`CausalLM` around an already loaded transformers model and fast tokenizer."""
        check_options(name, **{key: value for key, value in options.items() if key in _LEAST})
        check_kinds(name, **{key: value for key, value in options.items() if key in _KINDS})
        self = cls.__new__(cls)
        self._setup(model, tokenizer, name=name, **options)
        return self

    def _setup(self, model: Any, tokenizer: Any, name: str, batch_size: int = BATCH_SIZE,
               chunk: int = CHUNK, top: int = 20, max_expansions: int = 64,
               start_token: str | None = None, search_width: int = SEARCH_WIDTH) -> None:
        self.name = name
        self.predict_batch_size = QUERIES_PER_ROW * batch_size
        self.top = top
        self.max_expansions = max_expansions
        size = model.get_output_embeddings().weight.shape[0]
        start = None
        if start_token is not None:
            start = tokenizer.convert_tokens_to_ids(start_token)
            # an unknown token maps to the unk id, whose text is another (unless it is the unk)
            if start is None or tokenizer.convert_ids_to_tokens(start) != start_token:
                raise ModelError(name, f"start_token {start_token!r} is not a token of the model",
                                 stderr_tail=None)
        try:
            vocab = Vocabulary.from_tokenizer(tokenizer, size, start_id=start)
        except UnsupportedTokenizer as e:
            raise ModelError(name, f"not supported: {e}", stderr_tail=None) from None
        except ValueError as e:
            raise ModelError(name, f"{e}: name the token texts start with (--start-token, "
                             "start_token)", stderr_tail=None) from None
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else vocab.start_id
        self.engine = ChunkedLM(model, chunk=chunk, batch=batch_size, pad_id=pad,
                                width=search_width)
        unsupported = self.engine.unsupported()
        if unsupported is not None:
            raise ModelError(name, "not supported: every layer must keep keys and values "
                             f"(attention), and this model's do not ({unsupported})",
                             stderr_tail=None)
        positions = getattr(model.config, "max_position_embeddings", None)
        if positions is not None and positions < chunk:    # no token would fit: all null
            raise ModelError(name, f"chunk {chunk} is more than the model's {positions} positions "
                             f"(max_position_embeddings): give --chunk (chunk) {positions} or "
                             f"less", stderr_tail=None)
        fits = None if positions is None else positions // chunk * chunk  # padded chunks too
        try:
            spelling = encoder(tokenizer, vocab.pieces)
        except NoPlainCopy as e:
            raise ModelError(name, f"not supported: {e}", stderr_tail=None) from None
        self.scorer = WordScorer(spelling.encode, vocab, self.engine.continuations,
                                 self.engine.path_rows, width=search_width, max_tokens=fits,
                                 lead=spelling.lead)

    def _refused(self, error: RefusedQuery, context: str,
                 candidates: Sequence[str] | None) -> ModelError:
        query = "\t".join(["predict", protocol_text(context),
                           *map(protocol_text, candidates or [])])
        return ModelError(self.name, f"refused: {error}", query=query, stderr_tail=None)

    def predict(self, context: str, candidates: Sequence[str] | None) -> Result:
        return self.predict_batch([(context, candidates)])[0]

    def predict_batch(self, queries: Sequence[tuple[str, Sequence[str] | None]]) -> list[Result]:
        """Answers to ``(context, candidates)`` queries, in order; scored queries share
        forward passes.

        Raises:
            ModelError: a refused query (see the module doc), naming it.
        """
        answers: list[Result | None] = [None] * len(queries)
        first_beyond = self.scorer.beyond == 0  # nothing left out before: warn once
        first_unspellable = self.scorer.unspellable == 0
        scored = [i for i, (_, candidates) in enumerate(queries) if candidates is not None]
        try:
            results = self.scorer.score_batch([(queries[i][0], queries[i][1]) for i in scored])
        except RefusedQuery as e:
            bad = next((i for i in scored if _refuses(self.scorer, *queries[i])), scored[0])
            raise self._refused(e, *queries[bad]) from None
        for i, result in zip(scored, results):
            answers[i] = sorted(result, key=lambda pair: -pair[1])
        for i, (context, candidates) in enumerate(queries):
            if candidates is None:
                try:
                    answers[i] = self.scorer.complete(context, self.top, self.max_expansions)
                except RefusedQuery as e:
                    raise self._refused(e, context, None) from None
        if first_beyond and self.scorer.beyond:
            logging.getLogger(__name__).warning(
                "%s: a context and word longer than the model's %d tokens (its positions, in "
                "whole chunks of %d): such words are not scored (null in the log, counted "
                "out of the entropy's hit ratio) and completions stop there", self.name,
                self.scorer.max_tokens, self.engine.chunk)
        if first_unspellable and self.scorer.unspellable:
            logging.getLogger(__name__).warning(
                "%s: a context holds text the tokenizer does not spell back as itself (such as "
                "'\u2581' in a SentencePiece vocabulary, which comes back as a space): the words "
                "after it in its message are not scored (null in the log, counted out of the "
                "entropy's hit ratio) and get no completions", self.name)
        return answers  # type: ignore[return-value]

    def train(self, text: str) -> None:
        """Nothing: this model does not adapt (documented semantics of ``train``)."""

    def clear(self) -> None:
        """Nothing: there is nothing learnt to forget."""


_LEAST = {"batch_size": 1, "chunk": 1, "search_width": 1, "threads": 1, "top": 0,
          "max_expansions": 2}
"""The least value of each numeric option (``threads`` may also be None; ``max_expansions``
counts the context's own expansion, so 1 would find no word)."""


def check_options(name: str, **options: Any) -> None:
    """Refuse a numeric option of :class:`CausalLM` that is not a whole number at least its
    least value (:data:`_LEAST`), before the model is loaded: ``-o`` JSON reaches the class
    unchecked, and a zero batch or a negative chunk would fail obscurely at the first query.

    Raises:
        ModelError: naming the model (``name``), the option and the value.
    """
    for option, value in options.items():
        least = _LEAST[option]
        if value is None and option == "threads":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ModelError(name, f"option {option} must be a whole number >= {least}, not "
                             f"{value!r}", stderr_tail=None)


_KINDS: dict[str, tuple[type, ...]] = {"model": (str,), "device": (str,), "dtype": (str,),
                                        "start_token": (str, type(None)), "random_weights": (bool,)}
"""The JSON types each option of :class:`CausalLM` other than the numeric ones takes."""


def check_kinds(name: str, **options: Any) -> None:
    """Refuse an option of :class:`CausalLM` of the wrong JSON type (:data:`_KINDS`) before
    the model is loaded: ``-o`` JSON reaches the class unchecked, and ``"random_weights":
    "false"`` is a true value.

    Raises:
        ModelError: naming the model (``name``), the option, the type it takes and the value.
    """
    shown = {str: "a string", bool: "true or false", type(None): "null"}
    for option, value in options.items():
        if not isinstance(value, _KINDS[option]):
            kinds = " or ".join(shown[kind] for kind in _KINDS[option])
            raise ModelError(name if isinstance(name, str) else repr(name),
                             f"option {option} must be {kinds}, not {value!r}", stderr_tail=None)


def _refuses(scorer: WordScorer, context: str, candidates: Sequence[str]) -> bool:
    try:
        scorer.score_batch([(context, candidates)])
    except RefusedQuery:
        return True
    return False
