"""Checking that logs follow the LM Challenge 5.x log schema (``lmc validate``).

The schema (``lmchallenge/log.schema``, JSON Schema 2020-12) encodes the 5.x formats page
(``../shared/seeds/001_a51f61792860ca8b.txt``): the common fields ``user``, ``message``,
``token``, ``character``, ``target`` and optional ``select``, and the game payloads
``completions`` (wc), ``logp`` (we/ce), ``verbatim`` + ``results`` (wr). It checks the form of
a log, not its fairness (for example, that a model's probabilities sum to one).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from importlib import resources
from typing import Any

import click
import jsonschema

from .exceptions import InputError
from .log import read_log


@functools.cache
def schema() -> dict[str, Any]:
    """The log schema, as a JSON object."""
    return json.loads(resources.files(__package__).joinpath("log.schema").read_text("utf-8"))


@functools.cache
def _validator() -> jsonschema.protocols.Validator:
    return jsonschema.Draft202012Validator(schema())


def _field(error: jsonschema.ValidationError) -> str:
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    return path.lstrip(".") or "(datum)"


def problem(datum: Any) -> str | None:
    """What is wrong with one datum (the field and the schema's complaint), or None."""
    error = jsonschema.exceptions.best_match(_validator().iter_errors(datum))
    if error is None:
        return None
    return f"field {_field(error)}: {error.message}"


def validate(data: Iterable[Any], name: str = "<log>") -> int:
    """Check every datum of a log against :func:`schema`.

    Args:
        data: log datums (dicts).
        name: the log's name, for the error message.
    Returns:
        The number of datums checked.
    Raises:
        InputError: ``NAME:N: field F: what is wrong`` for the first bad datum (N counts
            datums from 1: the line number of a jsonlines log without blank lines).
    """
    n = 0
    for n, datum in enumerate(data, start=1):
        reason = problem(datum)
        if reason is not None:
            raise InputError(name, n, reason)
    return n


@click.command("validate")
@click.argument("log", nargs=-1)
@click.option("-v", "--verbose", count=True, help="More detail on stderr.")
def cli(log: tuple[str, ...], verbose: int) -> None:
    """Check that each LOG (.jsonl, .jsonl.gz, .parquet, a run directory; default stdin)
    follows the LM Challenge log schema; the first bad datum is reported as FILE:LINE with
    the field, and the exit code is 2."""
    from .verbosity import set_verbosity

    set_verbosity(verbose)
    for path in log or ("-",):
        n = validate(read_log(path), path)
        if verbose:
            click.echo(f"{path}: {n} datums valid", err=True)
