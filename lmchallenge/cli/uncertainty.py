"""The ``lmc stats`` options of issue 14, kept apart from the reference-compatible command:
without them ``lmc stats`` prints exactly what it printed before.

* ``--confidence C`` adds ``"ci"``: ``{key path: [low, high]}`` (see
  :mod:`lmchallenge.stats.bootstrap`); ``--resamples``, ``--seed`` and ``--ci-method`` tune it.
* ``--derived`` adds ``entropy.bits``, ``entropy.perplexity``, ``completion.ksr`` and
  ``reranking.accuracy_at_least_base`` in their groups and a ``"units"`` object (see
  :mod:`lmchallenge.stats.derived`, :mod:`lmchallenge.stats.reranking`).
* ``--by user|message-length`` prints one row per slice instead (:mod:`lmchallenge.stats.slices`).
* ``--signature`` adds ``"signature"`` (:mod:`lmchallenge.stats.signature`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

import click
import numpy as np

from lmchallenge.cli.options import FiniteFloatRange
from lmchallenge.stats.bootstrap import MAX_RESAMPLES, METHODS, MIN_RESAMPLES, Settings, few_resamples

DEFAULT_RESAMPLES = Settings.resamples
DEFAULT_SEED = Settings.seed


def bootstrap_options(function: Callable | None = None, seed: str = "--seed") -> Callable:
    """The interval options of ``lmc stats`` and ``lmc-dist run`` (where ``wr`` has a
    ``--seed`` of its own: ``seed="--ci-seed"``); the seed's parameter is ``seed`` either
    way.  Usable as ``@bootstrap_options`` or ``@bootstrap_options(seed=...)``."""
    if function is None:
        return lambda f: bootstrap_options(f, seed)
    options = [
        click.option("--confidence", type=FiniteFloatRange(0, 1, min_open=True, max_open=True),
                     default=None, metavar="C",
                     help="Add bootstrap intervals at this level (e.g. 0.95) under \"ci\", "
                          "resampling users (messages of logs without users)."),
        click.option("--resamples", type=click.IntRange(MIN_RESAMPLES, MAX_RESAMPLES),
                     default=DEFAULT_RESAMPLES, show_default=True,
                     help=f"Bootstrap resamples (at most {MAX_RESAMPLES:,}: each one's totals are held)."),
        click.option(seed, "ci_seed", type=click.IntRange(0), default=DEFAULT_SEED, show_default=True,
                     help="Seed of the resampling."),
        click.option("--ci-method", type=click.Choice(METHODS), default="percentile",
                     show_default=True, help="Bootstrap interval: percentile or BCa."),
    ]
    checked = _tuning_needs_confidence(function, seed)
    for option in reversed(options):
        checked = option(checked)
    return checked


def _tuning_needs_confidence(function: Callable, seed: str) -> Callable:
    """``function``, refusing (a usage error) the options that tune the intervals when none
    are asked for: ``lmc stats --resamples 50 LOG`` printed no intervals, silently (QA)."""

    @functools.wraps(function)
    def checked(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("confidence") is None:
            context = click.get_current_context()
            given = [flag for name, flag in (("resamples", "--resamples"), ("ci_seed", seed),
                                             ("ci_method", "--ci-method"))
                     if context.get_parameter_source(name) not in
                     (None, click.core.ParameterSource.DEFAULT)]
            if given:
                raise click.UsageError(f"{', '.join(given)} tune{'s' if len(given) == 1 else ''} "
                                       "the bootstrap intervals: give --confidence too")
        return function(*args, **kwargs)

    return checked


def stats_options(function: Callable) -> Callable:
    """The options of issue 14 that only ``lmc stats`` takes (with :func:`bootstrap_options`)."""
    options = [
        click.option("--derived", is_flag=True,
                     help="Add bits and perplexity beside the entropy (nats), the keystroke savings "
                          "rate (Presage KSR) beside the completion figures, the wr Hit@1 of a "
                          "fit never below the error model's, and their units (with --by: bits, "
                          "perplexity and KSR per row; the fit is the whole log's)."),
        click.option("--by", type=click.Choice(["user", "message-length"]), default=None,
                     help="One row per user, or per message-length bin (powers of two tokens)."),
        click.option("--signature", is_flag=True,
                     help="Add a reproducibility signature (game, options, model, corpus sha256, "
                          "versions, resampling settings)."),
    ]
    for option in reversed(options):
        function = option(function)
    return bootstrap_options(function)


def wanted(options: dict[str, Any]) -> bool:
    """Whether any option of issue 14 asks for more than the reference output."""
    return (options.get("confidence") is not None or bool(options.get("derived"))
            or options.get("by") is not None or bool(options.get("signature")))


def settings_of(options: dict[str, Any]) -> Any:
    """The :class:`lmchallenge.stats.bootstrap.Settings` of the options."""

    return Settings(confidence=options["confidence"] if options.get("confidence") is not None else 0.95,
                    resamples=options["resamples"], seed=options["ci_seed"], method=options["ci_method"])


def warn_if_few_resamples(settings: Settings) -> None:
    """Warn, once for the command, when ``settings`` give rough intervals whatever the data
    (:func:`lmchallenge.stats.bootstrap.few_resamples`)."""
    why = few_resamples(settings)
    if why is not None:
        logging.getLogger("lmchallenge.stats.bootstrap").warning("%s", why)


def for_csv(row: dict[str, Any]) -> dict[str, Any]:
    """``ci`` pairs as ``ci.KEY.low`` / ``ci.KEY.high`` columns."""
    row = dict(row)
    if "ci" in row:
        row["ci"] = {key: {"low": low, "high": high} for key, (low, high) in row["ci"].items()}
    return row


def uncertain_rows(logs: Sequence[str], lines: int | None, human: bool,
                   **options: Any) -> list[dict[str, Any]]:
    """The ``lmc stats`` rows with the options of issue 14 (``--confidence``, ``--derived``,
    ``--signature``, ``--by``): one per log, or one per slice of each log.

    Raises:
        click.UsageError: ``--by`` with ``--confidence`` or ``--signature``.
    """
    if options.get("by") is not None:
        if options.get("confidence") is not None or options.get("signature"):
            raise click.UsageError("--by prints figures per slice, without intervals or signature")
        from lmchallenge.stats.slices import slices

        with np.errstate(all="ignore"):     # a NaN or infinite score: lmc stats warns
            return [row for path in logs
                    for row in slices(path, options["by"], lines, bool(options.get("derived")))]
    if options.get("confidence") is not None:
        warn_if_few_resamples(settings_of(options))      # once, not per log
    with np.errstate(all="ignore"):
        return [_row(path, lines, human, options) for path in logs]


def _row(path: str, lines: int | None, human: bool, options: dict[str, Any]) -> dict[str, Any]:
    from lmchallenge.stats import bootstrap
    from lmchallenge.stats.derived import derived_figures, derived_intervals, describe_units, entropy_game

    derived = bool(options.get("derived"))
    summary = bootstrap.summarise(path, lines)
    row = dict(log=path, **summary.result(human, extensions=derived))
    game = None
    if derived or options.get("signature"):
        raw = summary.result(human=False)
        game = entropy_game(_game(path) or _game_of_sums(raw), raw["tokens"], raw["characters"])
    if derived:
        figures = derived_figures({"entropy.mean": bootstrap.lookup(summary.result(), "entropy.mean")}, game)
        ksr = [m for m in summary.metrics(derived=True) if m[0] in bootstrap.DERIVED]
        figures.update({key: bootstrap.ratio(*(summary.table.totals()[bootstrap.COLUMN[c]] for c in (num, den))).item()
                        for key, num, den in ksr})
        for key, value in figures.items():
            group, name = key.split(".")
            row.setdefault(group, {})[name] = value
        row["units"] = {k: v for k, v in describe_units(game).items() if bootstrap.lookup(row, k) is not None}
    settings = None
    if options.get("confidence") is not None:
        settings = settings_of(options)
        row["ci"] = bootstrap.intervals(summary.table, summary.metrics(derived), settings, source=path)
        if derived:
            row["ci"].update(derived_intervals(row["ci"]))
        row["ci"] = bootstrap.holding(row["ci"], row)
    if options.get("signature"):
        from lmchallenge.stats.signature import signature

        row["signature"] = signature(path, game, settings)
    return row


def _game_of_sums(raw: dict[str, Any]) -> str | None:
    """The game of a log read once (stdin), from its raw statistics: ``wr`` with candidates,
    ``we`` with scored tokens (:func:`entropy_game` tells ``ce``), else ``wc``; None when
    empty."""
    if not raw["tokens"]:
        return None
    if raw["reranking"]["max_candidates"]:
        return "wr"
    return "we" if raw["entropy"]["tokens"] else "wc"


def _game(path: str) -> str | None:
    """The game of a log, from its first datum (None for stdin or an empty log)."""
    if path == "-":
        return None
    from lmchallenge.logs.io import read_log
    from lmchallenge.analysis.pretty import detect_game

    return detect_game(next(iter(read_log(path)), None))
