"""The ``lmc-dist`` command: ``run`` (a game on a Dask cluster) and ``stats`` (re-reduce a run dir)."""

from __future__ import annotations

import json
import logging
import os
import sys

import click
from click.core import ParameterSource

from lmchallenge.logs import rundir
from lmchallenge.corpus import FORMATS
from lmchallenge.errors import LmcError
from lmchallenge.games.spec import GameSpec
from lmchallenge.model.spec import PredictorSpec
from lmchallenge.cli.game_options import wr_options
from lmchallenge.cli.order import OptionsAfterGame
from lmchallenge.cli.options import (JsonOption, count, model_options, not_empty, partial_option,
                                     run_command, set_verbosity, start_timeout_option,
                                     seconds, window_option)
from lmchallenge.cli.uncertainty import bootstrap_options, settings_of, wanted, warn_if_few_resamples

from lmc_dist import manifest as mf
from lmc_dist import reduce
from lmc_dist.connection import checked_address
from lmc_dist.job import execute
from lmc_dist.resources import parse_resources
from lmc_dist.spec import DEFAULT_PARTITION_CHARS, DistJob

MAX_WORKERS = 1024
"""The most ``--workers`` of the embedded cluster (worker processes on this machine; QA: 10**31
ran the machine out of memory)."""
MAX_RETRIES = 100
"""The most ``--retries`` (QA: 10**31 overflowed in Dask, which printed tracebacks and hung)."""


class ResourcesParam(click.ParamType):
    """``--resources``: ``NAME=AMOUNT`` items (:func:`lmc_dist.resources.parse_resources`)."""

    name = "NAME=AMOUNT"

    def convert(self, value, param, ctx):
        if isinstance(value, dict):
            return value
        try:
            return parse_resources(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)


class SchedulerParam(click.ParamType):
    """``--scheduler``: a Dask scheduler's address (:func:`lmc_dist.connection.checked_address`)."""

    name = "ADDR"

    def convert(self, value, param, ctx):
        try:
            return checked_address(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)


class CorpusFormat(click.Choice):
    """The corpus format (``auto``, ``text``, ``json``), as ``lmc run --format``; a partition
    file format given here is pointed to ``--part-format``."""

    def __init__(self) -> None:
        super().__init__(FORMATS)

    def convert(self, value, param, ctx):
        if value in ("parquet", "jsonl"):
            self.fail(f"{value!r} is a partition file format: --format is the corpus format"
                      f" ({', '.join(FORMATS)}), as for lmc run; write --part-format {value}",
                      param, ctx)
        return super().convert(value, param, ctx)


def run_options(function):
    """The options every game of ``lmc-dist run`` takes (after the game name)."""
    options = [
        click.option("--input", "input_path", required=True, metavar="CORPUS", callback=not_empty,
                     help="Corpus: a path or fsspec URL every worker can read (.gz ok)."),
        click.option("--run-dir", required=True, metavar="DIR", callback=not_empty,
                     help="Output directory: part-NNNNN files, _manifest.json, _stats.json."),
        click.option("--part-format", "out_format", type=click.Choice(["parquet", "jsonl"]),
                     default="parquet", show_default=True,
                     help="Partition file format (part-NNNNN.parquet or .jsonl.gz)."),
        click.option("-f", "--format", "corpus_format", type=CorpusFormat(), default="auto",
                     show_default=True,
                     help="Corpus format, as for lmc run: plain text lines, marked-up jsonlines,"
                          " or detected from the first non-blank line."),
        click.option("--corpus-format", "old_corpus_format", type=click.Choice(FORMATS),
                     hidden=True, help="Deprecated spelling of --format."),
        click.option("--scheduler", type=SchedulerParam(), metavar="ADDR",
                     help="Dask scheduler address (tcp://HOST:8786); default: an embedded cluster."),
        click.option("--workers", type=count(1, MAX_WORKERS), metavar="N",
                     help="Worker processes of the embedded cluster (default: one per CPU this "
                          "process may use: its affinity and container CPU limit count)."),
        click.option("--resources", type=ResourcesParam(), default=None,
                     help="Dask worker resources each partition task needs, e.g. GPU=1: only "
                          "workers started with `dask worker --resources GPU=1` run partitions "
                          "(the embedded cluster's workers declare them)."),
        click.option("--partition-chars", type=count(1), metavar="N",
                     help="Target characters per partition (smaller near the end of the corpus); "
                          f"e.g. {DEFAULT_PARTITION_CHARS}. Default: partitions of estimated model "
                          "queries, about 4 to 6 per worker (--resume: as recorded)."),
        click.option("-t", "--train/--no-train", default=False,
                     help="Train the model per message, clearing it per user (as lmc run)."),
        click.option("--resume", is_flag=True, help="Finish the run in --run-dir."),
        click.option("--retries", type=count(0, MAX_RETRIES), default=1, show_default=True,
                     help="Extra attempts of a failed partition (and rounds that make again "
                          "the partitions of a model process that failed later)."),
        click.option("--output", metavar="FILE", callback=not_empty,
                     help="Also write the whole log here (.jsonl, .jsonl.gz, .parquet), outside "
                          "the run dir (whose every file is a part of its log)."),
        click.option("-o", "--options", type=JsonOption(), default="{}",
                     help="JSON options of the model, as for lmc run."),
        click.option("--timeout", type=seconds(), default=60.0,
                     show_default=True,
                     help="Seconds a shell model may take to answer (a Python model, "
                          "called in the worker's process, cannot be stopped: a call that "
                          "runs longer is warned about); its first answer: --start-timeout."),
        start_timeout_option,
        window_option,
        click.option("--progress/--no-progress", default=None,
                     help="Progress bar on stderr (default: when stderr is a terminal)."),
        click.option("-v", "--verbose", count=True, help="More detail on stderr."),
    ]
    for option in reversed(options):
        function = option(function)
    return bootstrap_options(function, seed="--ci-seed")      # --confidence: "ci" in _stats.json


@click.group()
@click.version_option(package_name="lmchallenge-dist")
def cli() -> None:
    """LM Challenge games on a Dask cluster, the corpus cut into partitions of consecutive
    messages (a user's stay together with --train)."""


@cli.group("run", cls=OptionsAfterGame)
@click.argument("predictor", callback=not_empty)
@click.pass_context
def run_group(ctx, predictor):
    """Evaluate PREDICTOR (shell command or module:Class) with a game on a Dask cluster.

    The run's options (--input, --run-dir, --workers, ...) follow the game: `lmc-dist run
    PREDICTOR GAME --help` lists them."""
    ctx.obj = {"predictor": predictor}


def _execute(ctx, game: GameSpec, kw: dict) -> None:
    set_verbosity(kw.pop("verbose"))
    old = kw.pop("old_corpus_format")
    if old is not None:
        if ctx.get_parameter_source("corpus_format") == ParameterSource.COMMANDLINE:
            raise click.UsageError("give the corpus format once, as --format", ctx)
        logging.getLogger(__name__).warning("--corpus-format is deprecated: write --format %s", old)
        kw["corpus_format"] = old
    if kw.get("output") == "-":
        raise click.BadParameter("lmc-dist writes its statistics to stdout: give the log a file "
                                 "(or /dev/stdout, to have both there)", ctx, param_hint="'--output'")
    options = model_options(kw.pop("options"))
    predictor = PredictorSpec(ctx.obj["predictor"], options, timeout=kw.pop("timeout"),
                              window=kw.pop("window"), start_timeout=kw.pop("start_timeout"))
    uncertainty = {name: kw.pop(name) for name in ("confidence", "resamples", "ci_seed", "ci_method")}
    intervals = settings_of(uncertainty) if wanted(uncertainty) else None
    if intervals is not None:
        warn_if_few_resamples(intervals)
    job = DistJob(predictor=predictor, game=game, input=kw.pop("input_path"), intervals=intervals, **kw)
    try:
        report = execute(job)
    except KeyboardInterrupt as e:   # Ctrl-C or SIGTERM: after the commit, the run is whole
        begun = mf.load(job.run_dir)
        if begun is None:      # stopped before the run began: nothing to resume
            e.hint = "no run was begun"
        elif begun.get("finished"):
            e.hint = (f"the run had committed: it is complete in {job.run_dir} (statistics in "
                      f"{rundir.STATS})" + (f"; if {job.output} is not there, write it with "
                                            f"`lmc convert {job.run_dir} -o {job.output}`"
                                            if job.output else ""))
        raise
    if report.failed:
        for message in report.failed:
            sys.stderr.write(f"lmc-dist: error: {message}\n")
        raise LmcError(failed_line(report.failed_partitions, report.partitions, job.run_dir,
                                   report.not_run, report.stopped_by))
    sys.stdout.write(json.dumps(report.stats, sort_keys=True) + "\n")
    sys.stderr.write(report.summary_line() + f"; run dir {job.run_dir}\n")


def failed_line(failed: int, partitions: int, run_dir: str, not_run: int = 0,
                stopped_by: str = "") -> str:
    """The last line of a run some of whose ``partitions`` failed (and ``not_run`` were not
    run: it stopped early, ``stopped_by`` saying why)."""
    if not_run:
        done = partitions - failed - not_run
        kept = (f"none is kept in {run_dir}: fix the cause and run again" if not done else
                f"{done} done {'is' if done == 1 else 'are'} kept in {run_dir}: fix the cause "
                "and rerun with --resume")
        return (f"{stopped_by}, so the run stopped: {failed} partition"
                f"{'s' if failed != 1 else ''} failed, {not_run} {'was' if not_run == 1 else 'were'}"
                f" not run and {kept} (the next run there does not stop so)")
    if failed == partitions:
        return (f"all {partitions} partitions failed (none is kept in {run_dir}): fix the cause and "
                "run again")
    return (f"{failed} of {partitions} partitions failed; the others are in {run_dir}: fix the "
            "cause and rerun with --resume")


@run_group.command("wc")
@click.option("-p", "--next-word-only/--no-next-word-only", default=False,
              help="Only next-word predictions (no prefix completions).")
@run_options
@click.pass_context
def run_wc(ctx, next_word_only, **kw):
    """Word completion: next-word prediction and prefix completion (Hit@N, MRR, keystroke savings)."""
    _execute(ctx, GameSpec("wc", {"next_word_only": next_word_only}), kw)


@run_group.command("we")
@run_options
@click.pass_context
def run_we(ctx, **kw):
    """Word entropy: log-probability (nats) of each word (cross-entropy)."""
    _execute(ctx, GameSpec("we"), kw)


@run_group.command("ce")
@run_options
@click.pass_context
def run_ce(ctx, **kw):
    """Character entropy: log-probability (nats) of each character (cross-entropy)."""
    _execute(ctx, GameSpec("ce"), kw)


@run_group.command("wr")
@wr_options
@run_options
@click.pass_context
def run_wr(ctx, vocab, seed, num_candidates, error_chars, p_anykey, **kw):
    """Word reranking: rescoring candidates for corrupted words (Hit@1); VOCAB: a word list
    every worker can read."""
    _execute(ctx, GameSpec("wr", {"vocab": os.path.abspath(vocab), "seed": seed,
                                  "num_candidates": num_candidates, "error_chars": error_chars,
                                  "p_anykey": p_anykey}), kw)


@cli.command("stats")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@partial_option(says_so=True)
@bootstrap_options
def stats_cmd(run_dir, **uncertainty):
    """Re-reduce RUN_DIR's partitions into its statistics (honours grep's select flags);
    with --confidence, the bootstrap intervals of `lmc stats --confidence` under "ci"."""
    if not os.path.isdir(run_dir):      # click lets a device (/dev/null) through
        raise click.BadParameter(f"{run_dir!r} is not a directory", param_hint="'RUN_DIR'")
    set_verbosity(0)      # warnings as every command gives them (WARNING<TAB>...)
    stats = reduce.stats_of_run_dir(run_dir)
    if uncertainty["confidence"] is not None:
        from lmchallenge.stats.bootstrap import holding

        settings = settings_of(uncertainty)
        warn_if_few_resamples(settings)
        stats["ci"] = holding(reduce.run_dir_intervals(run_dir, settings), stats)
    stats.update(rundir.coverage(run_dir) or {})
    sys.stdout.write(json.dumps(stats, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``lmc-dist`` (see :func:`lmchallenge.cli.options.run_command`)."""
    run_command(cli, argv, "lmc-dist", hint="finished partitions are kept: rerun with --resume")


if __name__ == "__main__":
    main()
