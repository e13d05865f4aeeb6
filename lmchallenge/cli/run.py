"""``lmc run``: evaluate a model on a corpus with one game, writing the log.

``lmc run [OPTIONS] PREDICTOR GAME [GAME OPTIONS] [CORPUS] [OPTIONS]`` as LM Challenge 5.x,
plus a corpus path (default: stdin), ``--output`` (``.jsonl``, ``.jsonl.gz``, ``.parquet``),
``--timeout`` and ``--window`` for shell models; the run's options are accepted before
PREDICTOR (as 5.x), between PREDICTOR and the game, and after the game.
"""

from __future__ import annotations

import faulthandler
from collections.abc import Callable
from typing import Any

import click
from click.core import ParameterSource

from lmchallenge.corpus import FORMATS
from lmchallenge.games.job import RunJob, execute
from lmchallenge.games.spec import GameSpec
from lmchallenge.model.spec import PredictorSpec
from lmchallenge.cli.game_options import wr_options
from lmchallenge.cli.options import (JsonOption, model_options, not_empty, set_verbosity,
                                      seconds, start_timeout_option, window_option)
from lmchallenge.cli.order import OptionsBeforePredictor


def run_options(function: Callable) -> Callable:
    """The options of a run, on ``lmc run`` (before PREDICTOR, as LM Challenge 5.x) and on
    each game (after GAME and CORPUS, where users type them): see :func:`given_options`."""
    options = [
        click.option("-v", "--verbose", count=True,
                     help="More detail on stderr (-v info, -vv debug)."),
        click.option("-t", "--train/--no-train", default=False,
                     help="Train the model on each message after evaluating it (all rows sharing"
                          " a timestamp are evaluated first), clearing it before each user's"
                          " messages."),
        click.option("-f", "--format", "corpus_format", type=click.Choice(FORMATS),
                     default="auto", show_default=True,
                     help="Corpus format: plain text lines, marked-up jsonlines"
                          ' ({"user"|"userId", "timestamp", "text"}), or detected from the first'
                          " non-blank line."),
        click.option("-o", "--options", type=JsonOption(), default="{}",
                     help="JSON options (or a JSON file): keyword arguments of a module:Class"
                          ' model, or arguments of a shell model ("--key value", quoted; the'
                          ' "positional" list first, as written: the shell expands $VAR in it).'),
        click.option("--output", default="-", metavar="FILE", callback=not_empty,
                     help="Write the log here (.jsonl, .jsonl.gz or .parquet) instead of stdout;"
                          " the file appears only when the run completes."),
        click.option("--timeout", default=60.0, show_default=True, type=seconds(),
                     help="Seconds a shell model may take to answer before it is killed "
                          "(a Python model, called in this process, cannot be: a call that "
                          "runs longer is warned about); its first answer: --start-timeout."),
        start_timeout_option,
        window_option,
    ]
    for option in reversed(options):
        function = option(function)
    return function


RUN_OPTIONS = ("verbose", "train", "corpus_format", "options", "output", "timeout", "start_timeout",
               "window")
"""The parameter names of :func:`run_options`."""


@click.group("run", cls=OptionsBeforePredictor)
@run_options
@click.argument("predictor", callback=not_empty)
@click.pass_context
def cli(ctx, predictor, **run):
    """Evaluate PREDICTOR on a corpus with a game, writing an LM Challenge log.

    PREDICTOR is a shell command speaking the LM Challenge protocol (for example
    "lmc-ngram serve kjv.lm") or a Python class or function as module:Name.  The options
    may come before or after PREDICTOR, or after the game and its CORPUS:
    lmc run "lmc-ngram serve kjv.lm" wc corpus.txt --output log.jsonl.gz
    """
    ctx.obj = dict(predictor=predictor)


def given_options(ctx: click.Context) -> dict[str, Any]:
    """The run options of a game command ``ctx``: each from where it was given, after the
    game or before it (``-v`` counts in both places).

    Raises:
        click.UsageError: an option is given in both places.
    """
    group = ctx.parent
    assert group is not None
    values: dict[str, Any] = {"verbose": ctx.params["verbose"] + group.params["verbose"]}
    for name in RUN_OPTIONS[1:]:
        here, there = _given(ctx, name), _given(group, name)
        if here and there:
            flag = next(p.opts[-1] for p in ctx.command.params if p.name == name)
            raise click.UsageError(f"{flag} is given twice, before the game and after it:"
                                   " give it once", ctx)
        values[name] = ctx.params[name] if here else group.params[name]
    return values


def _given(ctx: click.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is not None and source not in (ParameterSource.DEFAULT,
                                                 ParameterSource.DEFAULT_MAP)


def _run(ctx, game: GameSpec, corpus: str, run: dict[str, Any]) -> None:
    o = given_options(ctx)
    set_verbosity(o["verbose"])
    predictor = PredictorSpec(ctx.obj["predictor"], model_options(o["options"]), timeout=o["timeout"],
                              window=o["window"], start_timeout=o["start_timeout"])
    if predictor.is_python:     # a model that crashes this process: its Python stack on stderr
        faulthandler.enable(all_threads=False)
    execute(RunJob(predictor=predictor, game=game, corpus=corpus,
                   corpus_format=o["corpus_format"], train=o["train"], output=o["output"]))


corpus_argument = click.argument("corpus", default="-", required=False, callback=not_empty)


@cli.command("wc")
@click.option("-p", "--next-word-only/--no-next-word-only", default=False,
              help="Only next-word predictions (no prefix completions): faster.")
@corpus_argument
@run_options
@click.pass_context
def cli_wc(ctx, next_word_only, corpus, **run):
    """Word completion: next-word prediction and prefix completion (Hit@N, MRR, keystroke savings)."""
    _run(ctx, GameSpec("wc", {"next_word_only": next_word_only}), corpus, run)


@cli.command("we")
@corpus_argument
@run_options
@click.pass_context
def cli_we(ctx, corpus, **run):
    """Word entropy: log-probability (nats) of each word (cross-entropy)."""
    _run(ctx, GameSpec("we"), corpus, run)


@cli.command("ce")
@corpus_argument
@run_options
@click.pass_context
def cli_ce(ctx, corpus, **run):
    """Character entropy: log-probability (nats) of each character (cross-entropy)."""
    _run(ctx, GameSpec("ce"), corpus, run)


@cli.command("wr")
@wr_options
@corpus_argument
@run_options
@click.pass_context
def cli_wr(ctx, vocab, seed, num_candidates, error_chars, p_anykey, corpus, **run):
    """Word reranking: rescoring candidates for corrupted words (Hit@1).

    VOCAB is a word list, one word per line; candidates are drawn from it.
    """
    _run(ctx, GameSpec("wr", {"vocab": vocab, "seed": seed, "num_candidates": num_candidates,
                              "error_chars": error_chars, "p_anykey": p_anykey}), corpus, run)
