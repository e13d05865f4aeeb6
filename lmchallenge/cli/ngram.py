"""The ``lmc-ngram`` command: train the built-in n-gram model and serve it over the protocol.

Examples::

    lmc-ngram train data/kjv/train.txt.gz -o kjv.lm
    lmc run "lmc-ngram serve kjv.lm" wc data/kjv/test.sample.txt
    lmc-ngram train --chars --order 6 data/kjv/train.txt.gz -o kjv.chars.lm
    lmc run "lmc-ngram serve kjv.chars.lm" ce data/kjv/test.sample.txt
"""

from __future__ import annotations

import time

import click

from lmchallenge.cli.options import FiniteFloatRange, count, not_empty, run_command
from lmchallenge.errors import InputError, LmcError
from lmchallenge.logs.files import check_writable, written_in_place
from lmchallenge.model import ngram
from lmchallenge.model.serve import refused_game, serve as serve_model

DEFAULT_WORD_ORDER = 3
DEFAULT_CHAR_ORDER = 6


@click.group()
@click.version_option(package_name="lmchallenge-dist")
def cli() -> None:
    """The built-in n-gram language model of LM Challenge (interpolated modified Kneser-Ney
    word or character n-grams with a per-user cache)."""


@cli.command()
@click.argument("corpus", type=click.Path(dir_okay=False, allow_dash=True), callback=not_empty)
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), callback=not_empty,
              help="Model file to write.")
@click.option("--order", type=click.IntRange(1, ngram.MAX_ORDER), default=None,
              help=f"n-gram order [default: {DEFAULT_WORD_ORDER} for words, "
                   f"{DEFAULT_CHAR_ORDER} for --chars].")
@click.option("--chars", is_flag=True, help="A character model (for the ce game).")
@click.option("--min-count", type=count(1), default=1, show_default=True,
              help="Units seen fewer times are not in the vocabulary.")
@click.option("-f", "--format", "fmt", type=click.Choice(["auto", "text", "json"]), default="auto",
              show_default=True,
              help="Corpus format: plain text (a message a line) or marked-up jsonlines "
                   "({\"text\": ...}); auto looks at the first non-blank line.  .gz is read transparently.")
@click.option("-v", "--verbose", is_flag=True, help="Print counts and timings on stderr.")
def train(corpus: str, output: str, order: int | None, chars: bool, min_count: int,
          fmt: str, verbose: bool) -> None:
    """Train a model on CORPUS and write it to the file of -o/--output."""
    if output == "-" or written_in_place(output):
        raise InputError(output, None, "cannot write a model here: it is not a regular file "
                                       "(the model is read back mapped into memory); give a file")
    check_writable(output, [corpus])    # before training: not the corpus, a folder we can write
    unit = "char" if chars else "word"
    if order is None:
        order = DEFAULT_CHAR_ORDER if chars else DEFAULT_WORD_ORDER
    start = time.perf_counter()
    lines = list(ngram.corpus_units(corpus, unit, fmt))
    read = time.perf_counter()
    tables = ngram.train_tables(lines, order=order, unit=unit, min_count=min_count)
    counted = time.perf_counter()
    ngram.save_tables(tables, output)
    if verbose:
        meta = tables.meta
        click.echo(f"lmc-ngram: {meta['lines']} lines, {meta['units']} {unit}s, vocabulary "
                   f"{meta['vocabulary']}, n-grams by order {meta['ngrams']}; read "
                   f"{read - start:.1f} s, trained {counted - read:.1f} s, wrote "
                   f"{time.perf_counter() - counted:.1f} s", err=True)


@cli.command()
@click.argument("model", type=click.Path(exists=True, dir_okay=False))
@click.option("--top", type=count(), default=20, show_default=True,
              help="Predictions returned when no candidates are given (the wc game "
                   "counts hits up to rank 20).")
@click.option("--cache-weight", type=FiniteFloatRange(0, 1, max_open=True), default=0.05,
              show_default=True,
              help="Largest weight of the per-user cache that train adapts, below 1 (0: no "
                   "cache).")
@click.option("--cache-halfway", type=FiniteFloatRange(min=0, min_open=True), default=50.0,
              show_default=True,
              help="Cached units at which the cache has half its largest weight.")
def serve(model: str, top: int, cache_weight: float, cache_halfway: float) -> None:
    """Answer predict/train/clear requests on stdin/stdout (LM Challenge model protocol)."""
    lm = ngram.NgramModel(model, top=top, cache_weight=cache_weight, cache_halfway=cache_halfway)
    why = refused_game(lm.refuses)
    if why:
        raise LmcError(f"{model}: {why}")
    serve_model(lm)


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``lmc-ngram`` (see :func:`lmchallenge.cli.options.run_command`)."""
    run_command(cli, argv, "lmc-ngram")


if __name__ == "__main__":
    main()
