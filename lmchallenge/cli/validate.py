"""``lmc validate``: check logs against the LM Challenge log schema."""

from __future__ import annotations

import click

from lmchallenge.analysis.validate import validate_files
from lmchallenge.cli.options import not_empty, partial_option, set_verbosity, stdin_once
from lmchallenge.logs.files import log_form, run_dir_parts
from lmchallenge.logs.io import read_log

@click.command("validate")
@click.argument("log", nargs=-1, callback=not_empty)
@click.option("-v", "--verbose", count=True, help="More detail on stderr.")
@partial_option
def cli(log: tuple[str, ...], verbose: int) -> None:
    """Check that each LOG (.jsonl, .jsonl.gz, .parquet, a run directory; default stdin)
    follows the LM Challenge log schema; the first bad datum is reported as FILE:LINE with
    the field, and the exit code is 2."""
    set_verbosity(verbose)
    stdin_once(log)
    for path in log or ("-",):
        files = ([(str(part), read_log(str(part))) for part in run_dir_parts(path)]
                 if log_form(path) == "run_dir" else [(path, read_log(path))])
        n = validate_files(files)   # a run dir's bad datum named by its part file and line
        if verbose:
            click.echo(f"{path}: {n} datums valid", err=True)
