"""``lmc run``: evaluate a model on a corpus with one game, writing the log.

``lmc run [OPTIONS] PREDICTOR GAME [GAME OPTIONS] [CORPUS]`` as LM Challenge 5.x, plus a
corpus path (default: stdin), ``--output`` (``.jsonl``, ``.jsonl.gz``, ``.parquet``),
``--timeout`` and ``--window`` for shell models.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import click

from .corpus import FORMATS, Message, read_corpus
from .errors import DEFAULT_ERROR_CHARS, DEFAULT_P_ANYKEY
from .games.runner import run_game
from .games.spec import GameSpec
from .log import write_jsonlines, write_log
from .model import PredictorSpec, close_model
from .progress import TokenProgress
from .verbosity import set_verbosity

LOG = logging.getLogger(__name__)


class JsonOption(click.ParamType):
    """A JSON value, or the path of a file holding one."""

    name = "json"

    def convert(self, value: Any, param, ctx) -> Any:
        if not isinstance(value, str):
            return value
        try:
            if os.path.isfile(value):
                with open(value, encoding="utf-8") as f:
                    return json.load(f)
            return json.loads(value)
        except ValueError as e:
            self.fail(f"not JSON: {e}", param, ctx)

    def get_metavar(self, param, ctx=None) -> str:
        return "JSON"


@dataclass(frozen=True)
class RunJob:
    """Everything one ``lmc run`` needs.

    Attributes:
        predictor: how to start the model.
        game: the game and its options.
        corpus: corpus path or ``-``.
        corpus_format: ``auto``, ``text`` or ``json``.
        train: train the model on each message after evaluating it.
        output: log destination (``-`` = stdout).
    """

    predictor: PredictorSpec
    game: GameSpec
    corpus: str = "-"
    corpus_format: str = "auto"
    train: bool = False
    output: str = "-"


def validated_messages(path: str, fmt: str) -> tuple[int, Iterator[Message] | list[Message]]:
    """Check the whole corpus before the model starts (so bad input costs no model time and
    leaves no half-written output); returns the message count and a fresh message source."""
    if path == "-":
        messages = list(read_corpus(path, fmt))
        return len(messages), messages
    count = sum(1 for _ in read_corpus(path, fmt))
    return count, read_corpus(path, fmt)


def execute(job: RunJob) -> int:
    """Run ``job``; returns the number of log datums written.

    Raises:
        InputError: bad corpus or vocabulary (nothing is written).
        ModelError: the model failed (a file output is not created).
    """
    total, messages = validated_messages(job.corpus, job.corpus_format)
    game = job.game.build()
    progress = TokenProgress(total)
    model = job.predictor.create(echo_stderr=LOG.isEnabledFor(logging.INFO))
    try:
        log = progress.tokens_of(run_game(game, model, progress.messages_of(messages),
                                          train=job.train))
        if job.output == "-":
            import sys
            n = write_jsonlines(log, sys.stdout)
        else:
            n = write_log(log, job.output, game=job.game.name)
    finally:
        progress.close()
        close_model(model)
    LOG.info("wrote %d log lines", n)
    return n


@click.group("run")
@click.argument("predictor")
@click.option("-v", "--verbose", count=True, help="More detail on stderr (-v info, -vv debug).")
@click.option("-t", "--train/--no-train", default=False,
              help="Train the model on each message after evaluating it (all rows sharing a"
                   " timestamp are evaluated first), clearing it before each user's messages.")
@click.option("-f", "--format", "corpus_format", type=click.Choice(FORMATS), default="auto",
              help="Corpus format: plain text lines, marked-up jsonlines"
                   ' ({"user"|"userId", "timestamp", "text"}), or auto-detect from the first line.')
@click.option("-o", "--options", type=JsonOption(), default="{}",
              help="JSON options (or a JSON file): keyword arguments of a module:Class model, or"
                   ' arguments of a shell model ("--key value", "positional" list first).')
@click.option("--output", default="-", metavar="FILE",
              help="Write the log here (.jsonl, .jsonl.gz or .parquet) instead of stdout;"
                   " the file appears only when the run completes.")
@click.option("--timeout", default=60.0, show_default=True, type=float,
              help="Seconds a shell model may take to answer before it is killed.")
@click.option("--window", default=256, show_default=True, type=click.IntRange(1),
              help="Predict requests in flight to a shell model.")
@click.pass_context
def cli(ctx, predictor, verbose, train, corpus_format, options, output, timeout, window):
    """Evaluate PREDICTOR on a corpus with a game, writing an LM Challenge log.

    PREDICTOR is a shell command speaking the LM Challenge protocol (for example
    "lmc-ngram serve kjv.lm") or a Python class or function as module:Name.
    """
    set_verbosity(verbose)
    if not isinstance(options, dict):
        raise click.BadParameter("must be a JSON object", param_hint="--options")
    ctx.obj = dict(predictor=PredictorSpec(predictor, options, timeout=timeout, window=window),
                   train=train, corpus_format=corpus_format, output=output)


def _run(ctx, game: GameSpec, corpus: str) -> None:
    o = ctx.obj
    execute(RunJob(predictor=o["predictor"], game=game, corpus=corpus,
                   corpus_format=o["corpus_format"], train=o["train"], output=o["output"]))


corpus_argument = click.argument("corpus", default="-", required=False)


@cli.command("wc")
@click.option("-p", "--next-word-only/--no-next-word-only", default=False,
              help="Only next-word predictions (no prefix completions): faster.")
@corpus_argument
@click.pass_context
def cli_wc(ctx, next_word_only, corpus):
    """Word completion: next-word prediction and prefix completion (Hit@N, MRR, keystrokes)."""
    _run(ctx, GameSpec("wc", {"next_word_only": next_word_only}), corpus)


@cli.command("we")
@corpus_argument
@click.pass_context
def cli_we(ctx, corpus):
    """Word entropy: log-probability of each word (cross-entropy)."""
    _run(ctx, GameSpec("we"), corpus)


@cli.command("ce")
@corpus_argument
@click.pass_context
def cli_ce(ctx, corpus):
    """Character entropy: log-probability of each character (cross-entropy)."""
    _run(ctx, GameSpec("ce"), corpus)


@cli.command("wr")
@click.argument("vocab", type=click.Path(exists=True, dir_okay=False))
@click.option("-r", "--seed", default=42, show_default=True,
              help="Seed of the corruption (with user and message number).")
@click.option("-n", "--num-candidates", default=100, show_default=True, type=click.IntRange(2),
              help="Most candidates per word.")
@click.option("--error-chars", default=DEFAULT_ERROR_CHARS, show_default=True,
              help="Characters a corrupted character is replaced by.")
@click.option("-p", "--p-anykey", default=DEFAULT_P_ANYKEY, show_default=True,
              type=click.FloatRange(0, 1, min_open=True, max_open=True),
              help="Probability that a character is corrupted.")
@corpus_argument
@click.pass_context
def cli_wr(ctx, vocab, seed, num_candidates, error_chars, p_anykey, corpus):
    """Word reranking: rescoring candidates for corrupted words (accuracy).

    VOCAB is a word list, one word per line; candidates are drawn from it.
    """
    _run(ctx, GameSpec("wr", {"vocab": vocab, "seed": seed, "num_candidates": num_candidates,
                              "error_chars": error_chars, "p_anykey": p_anykey}), corpus)
