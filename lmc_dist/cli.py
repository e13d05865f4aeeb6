"""The ``lmc-dist`` command: ``run`` (a game on a Dask cluster) and ``stats`` (re-reduce a run dir)."""

from __future__ import annotations

import gc
import json
import sys

import click

from lmchallenge.corpus import FORMATS
from lmchallenge.errors import DEFAULT_ERROR_CHARS, DEFAULT_P_ANYKEY
from lmchallenge.exceptions import LmcError
from lmchallenge.games.spec import GameSpec
from lmchallenge.model import PredictorSpec
from lmchallenge.run import JsonOption, set_verbosity

from . import reduce
from .run import DEFAULT_PARTITION_CHARS, DistJob, execute


def run_options(function):
    """The options every game of ``lmc-dist run`` takes (after the game name)."""
    options = [
        click.option("--input", "input_path", required=True, metavar="CORPUS",
                     help="Corpus: a path or fsspec URL every worker can read (.gz ok)."),
        click.option("--run-dir", required=True, metavar="DIR",
                     help="Output directory: part-NNNNN files, _manifest.json, _stats.json."),
        click.option("--format", "out_format", type=click.Choice(["parquet", "jsonl"]),
                     default="parquet", show_default=True, help="Partition file format."),
        click.option("-f", "--corpus-format", type=click.Choice(FORMATS), default="auto",
                     show_default=True, help="Corpus format."),
        click.option("--scheduler", metavar="ADDR",
                     help="Dask scheduler address (tcp://HOST:8786); default: an embedded cluster."),
        click.option("--workers", type=click.IntRange(1), metavar="N",
                     help="Worker processes of the embedded cluster (default: one per core)."),
        click.option("--partition-chars", type=click.IntRange(1), default=DEFAULT_PARTITION_CHARS,
                     show_default=True,
                     help="Target characters per partition (smaller near the end of the corpus)."),
        click.option("-t", "--train/--no-train", default=False,
                     help="Train the model per message, clearing it per user (as lmc run)."),
        click.option("--resume", is_flag=True, help="Finish the run in --run-dir."),
        click.option("--retries", type=click.IntRange(0), default=1, show_default=True,
                     help="Extra attempts of a failed partition."),
        click.option("--output", metavar="FILE",
                     help="Also write the whole log here (.jsonl, .jsonl.gz, .parquet)."),
        click.option("-o", "--options", type=JsonOption(), default="{}",
                     help="JSON options of the model, as for lmc run."),
        click.option("--timeout", type=float, default=60.0, show_default=True,
                     help="Seconds a shell model may take to answer."),
        click.option("--progress/--no-progress", default=None,
                     help="Progress bar on stderr (default: when stderr is a terminal)."),
        click.option("-v", "--verbose", count=True, help="More detail on stderr."),
    ]
    for option in reversed(options):
        function = option(function)
    return function


@click.group()
@click.version_option(package_name="lmchallenge-dist")
def cli() -> None:
    """LM Challenge games on a Dask cluster, with the corpus partitioned by user."""


@cli.group("run")
@click.argument("predictor")
@click.pass_context
def run_group(ctx, predictor):
    """Evaluate PREDICTOR (shell command or module:Class) with a game on a Dask cluster."""
    ctx.obj = {"predictor": predictor}


def _execute(ctx, game: GameSpec, kw: dict) -> None:
    set_verbosity(kw.pop("verbose"))
    options = kw.pop("options")
    if not isinstance(options, dict):
        raise click.BadParameter("must be a JSON object", param_hint="--options")
    predictor = PredictorSpec(ctx.obj["predictor"], options, timeout=kw.pop("timeout"))
    job = DistJob(predictor=predictor, game=game, input=kw.pop("input_path"), **kw)
    report = execute(job)
    if report.failed:
        for message in report.failed:
            sys.stderr.write(f"lmc-dist: error: {message}\n")
        raise LmcError(f"{len(report.failed)} of {report.partitions} partitions failed; the others "
                       f"are in {job.run_dir}: fix the cause and rerun with --resume")
    sys.stdout.write(json.dumps(report.stats, sort_keys=True) + "\n")
    sys.stderr.write(report.summary_line() + f"; run dir {job.run_dir}\n")


@run_group.command("wc")
@click.option("-p", "--next-word-only/--no-next-word-only", default=False,
              help="Only next-word predictions (no prefix completions).")
@run_options
@click.pass_context
def run_wc(ctx, next_word_only, **kw):
    """Word completion."""
    _execute(ctx, GameSpec("wc", {"next_word_only": next_word_only}), kw)


@run_group.command("we")
@run_options
@click.pass_context
def run_we(ctx, **kw):
    """Word entropy."""
    _execute(ctx, GameSpec("we"), kw)


@run_group.command("ce")
@run_options
@click.pass_context
def run_ce(ctx, **kw):
    """Character entropy."""
    _execute(ctx, GameSpec("ce"), kw)


@run_group.command("wr")
@click.argument("vocab", type=click.Path(exists=True, dir_okay=False))
@click.option("-r", "--seed", default=42, show_default=True, help="Seed of the corruption.")
@click.option("-n", "--num-candidates", default=100, show_default=True, type=click.IntRange(2))
@click.option("--error-chars", default=DEFAULT_ERROR_CHARS, show_default=True)
@click.option("-p", "--p-anykey", default=DEFAULT_P_ANYKEY, show_default=True,
              type=click.FloatRange(0, 1, min_open=True, max_open=True))
@run_options
@click.pass_context
def run_wr(ctx, vocab, seed, num_candidates, error_chars, p_anykey, **kw):
    """Word reranking (VOCAB: a word list every worker can read)."""
    import os
    _execute(ctx, GameSpec("wr", {"vocab": os.path.abspath(vocab), "seed": seed,
                                  "num_candidates": num_candidates, "error_chars": error_chars,
                                  "p_anykey": p_anykey}), kw)


@cli.command("stats")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
def stats_cmd(run_dir):
    """Re-reduce RUN_DIR's partitions into its statistics (honours grep's select flags)."""
    stats = reduce.stats_of_run_dir(run_dir)
    sys.stdout.write(json.dumps(stats, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> None:
    """Entry point: errors of the project become a message and exit code 2; Ctrl-C 130.
    The process is expected to exit when this returns: the garbage collector's objects are
    then frozen (:func:`gc.freeze`)."""
    try:
        cli.main(args=argv, prog_name="lmc-dist", standalone_mode=False)
        # exit frees everything by reference counts; frozen, Dask's and NumPy's objects are
        # not traversed again by the collections at exit
        gc.freeze()
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except LmcError as e:
        sys.stderr.write(f"lmc-dist: error: {e}\n")
        sys.exit(2)
    except (KeyboardInterrupt, click.exceptions.Abort):
        sys.stderr.write("lmc-dist: interrupted; finished partitions are kept: rerun with --resume\n")
        sys.exit(130)


if __name__ == "__main__":
    main()
