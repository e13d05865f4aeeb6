"""``lmc stats``: summary statistics of logs, one row per log."""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Sequence
from typing import Any

import click

from lmchallenge.cli.options import count, not_empty, partial_option, set_verbosity, stdin_once
from lmchallenge.cli.uncertainty import for_csv, stats_options, uncertain_rows, wanted
from lmchallenge.logs import rundir
from lmchallenge.stats.compute import state_of_log
from lmchallenge.stats.output import OUTPUTS, flatten
from lmchallenge.tuning import keep_freed_memory


@click.command("stats", epilog="""\b
Units: entropy.mean is the cross-entropy in nats (natural log) per scored
token (bits: divide by ln 2 = 0.693; perplexity: exp of it); entropy.hit the
fraction of tokens scored; prediction.hitN is Hit@N and prediction.mrr the mean
reciprocal rank of the next-word predictions; completion.characters the
keystroke savings (fraction of characters); reranking.accuracy is Hit@1 after
reranking (LM Challenge 5.x's fit), reranking.base_accuracy Hit@1 of the error
model alone (--derived adds reranking.accuracy_at_least_base: Hit@1 of a fit
never below it).
--no-human: raw counts and sums (entropy.sum of -logp in nats).
-o text lists them with their units.""")
@click.argument("log", nargs=-1, callback=not_empty)
@click.option("-v", "--verbose", count=True, help="More detail on stderr.")
@click.option("-n", "--lines", type=count(), help="Only the first N datums of each log.")
@click.option("-o", "--output", type=click.Choice(sorted(OUTPUTS)), default="json",
              show_default=True,
              help="Output format: one JSON object per log, CSV (the union of the logs'"
                   " columns), or text with units.")
@click.option("-h/-H", "--human/--no-human", default=True,
              help="Ratios (default) or raw sums.")
@stats_options
@partial_option(says_so=True)
def cli(log: tuple[str, ...], verbose: int, lines: int | None, output: str, human: bool,
        **uncertainty: Any) -> None:
    """Summary statistics of one or more logs (.jsonl, .jsonl.gz, .parquet, an lmc-dist run
    directory, or - / nothing for stdin), one row per log."""
    set_verbosity(verbose)
    keep_freed_memory()
    paths = log or ("-",)
    stdin_once(paths)
    if wanted(uncertainty):
        rows = uncertain_rows(paths, lines, human, **uncertainty)
    else:
        rows = [dict(log=path, **state_of_log(path, lines).result(human=human)) for path in paths]
    coverage = {path: rundir.coverage(path) or {} for path in paths}
    for row in rows:
        row.update(coverage[row["log"]])     # an unfinished run dir read with --partial says so
    for path in paths:      # once per log, not per --by slice
        warn_non_finite(path, [flatten(row) for row in rows if row["log"] == path])
    if output == "csv":
        rows = [for_csv(row) for row in rows]
    sys.stdout.write(OUTPUTS[output](rows))


def warn_non_finite(log: str, rows: Sequence[dict[str, Any]]) -> None:
    """Warn about the figures of ``log`` that are not finite (printed as LM Challenge 5.x
    prints them: ``NaN``, not JSON): the log holds a NaN or infinite score.

    Args:
        log: the log's path.
        rows: its statistics rows, flattened (``{"entropy.mean": float, ...}``).
    """
    bad = list(dict.fromkeys(key for row in rows for key, value in row.items()
                             if isinstance(value, float) and not math.isfinite(value)))
    if bad:
        logging.getLogger(__name__).warning(
            "%s: %s not finite: the log holds a NaN or infinite score (lmc validate %s names "
            "the first), or scores whose sum is beyond the largest float", log, ", ".join(bad), log)
