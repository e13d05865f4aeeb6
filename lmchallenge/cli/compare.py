"""``lmc compare BASELINE LOG...``: the command line of :mod:`lmchallenge.analysis.compare`."""

from __future__ import annotations

import sys

import click
import numpy as np

from lmchallenge.cli.options import FiniteFloatRange, partial_option
from lmchallenge.cli.uncertainty import (DEFAULT_RESAMPLES, DEFAULT_SEED, MAX_RESAMPLES, METHODS,
                                         MIN_RESAMPLES, warn_if_few_resamples)


@click.command("compare")
@click.argument("baseline", type=click.Path(exists=True, dir_okay=True, allow_dash=False))
@click.argument("log", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=True, allow_dash=False))
@click.option("-o", "--output", type=click.Choice(["text", "markdown", "csv", "json", "html"]), default="text",
              show_default=True, help="Output format (json: one object per line per LOG).")
@click.option("--confidence", type=FiniteFloatRange(0, 1, min_open=True, max_open=True), default=0.95,
              show_default=True, help="Level of the bootstrap intervals.")
@click.option("--resamples", type=click.IntRange(MIN_RESAMPLES, MAX_RESAMPLES), default=DEFAULT_RESAMPLES,
              show_default=True, help="Bootstrap resamples (randomisation trials with --paired-ar; at "
                                      f"most {MAX_RESAMPLES:,}: each one's totals are held).")
@click.option("--seed", type=click.IntRange(0), default=DEFAULT_SEED, show_default=True,
              help="Seed of the resampling.")
@click.option("--ci-method", type=click.Choice(METHODS), default="percentile", show_default=True,
              help="Bootstrap interval: percentile or BCa.")
@click.option("--paired-ar", is_flag=True,
              help="p-values by approximate randomisation instead of the paired bootstrap.")
@click.option("-v", "--verbose", count=True, help="More detail on stderr.")
@partial_option
def cli(baseline: str, log: tuple[str, ...], output: str, confidence: float, resamples: int, seed: int,
        ci_method: str, paired_ar: bool, verbose: int) -> None:
    """Compare models (LOG...) with a BASELINE on the same data: each figure of lmc stats
    with its bootstrap interval (resampling users, or messages where there are none), and
    against the baseline the paired difference, its interval and a two-sided p-value."""
    from lmchallenge.analysis import compare
    from lmchallenge.stats.bootstrap import Settings
    from lmchallenge.cli.options import set_verbosity

    set_verbosity(verbose)
    settings = Settings(confidence, resamples, seed, ci_method)
    warn_if_few_resamples(settings)
    test = "randomisation" if paired_ar else "bootstrap"
    with np.errstate(all="ignore"):     # a NaN or infinite score: "not comparable" notes say so
        rows = compare.compare(baseline, list(log), settings, test)
    sys.stdout.write(compare.WRITERS[output](rows, settings, test))
