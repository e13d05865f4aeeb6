"""``lmc grep``: select tokens of a log by pattern."""

from __future__ import annotations

import sys

import click

from lmchallenge.analysis.grep import KEEP_CHOICES, PatternError, grep
from lmchallenge.cli.options import not_empty, partial_option, single_log
from lmchallenge.logs.files import check_writable
from lmchallenge.logs.io import write_log
from lmchallenge.logs.jsonl import write_jsonlines


@click.command("grep")
@click.argument("pattern")
@click.argument("log", nargs=-1, type=click.Path(exists=True, dir_okay=True, allow_dash=True))
@click.option("-v", "--verbose", default=0, count=True,
              help="How much human-readable detail to print to STDERR.")
@click.option("-k", "--keep", type=click.Choice(KEEP_CHOICES), default="all", show_default=True,
              help="What to output after selecting: every token (tagged with \"select\"), "
                   "whole messages that hold a selected token, or selected tokens only.")
@click.option("-a", "--and", "--and-pattern", "and_pattern", multiple=True,
              help="Another pattern that must also match (repeatable).")
@click.option("-o", "--output", default="-", metavar="FILE", callback=not_empty,
              help="Write the log here (.jsonl, .jsonl.gz or .parquet) instead of stdout; the "
                   "file appears only when the whole input was read (on stdout, an input "
                   "found damaged half-way leaves the lines before it written: check the exit "
                   "status).")
@partial_option
def cli(pattern: str, log: tuple[str, ...], verbose: int, keep: str,
        and_pattern: tuple[str, ...], output: str) -> None:
    """Select tokens of a log (jsonl, jsonl.gz, parquet or run directory) matching PATTERN;
    writes the log (jsonlines on stdout) with "select" set.

    \b
    Patterns:
      REGEX             the target contains a match of REGEX (may not start with $ or ~);
                        anchor it ("^foo$") to match whole targets only
      ~REGEX            the target contains no match of REGEX
      $nospace          targets without whitespace
      $alpha            targets containing a letter
      $alphaonly        targets made of letters only
      $emoji            targets containing an emoji
      $alphaemoji       targets containing a letter or an emoji
      $user=REGEX       the user (null is "None") matches REGEX completely
      $message=REGEX    the message number matches REGEX completely, e.g. "$message=[0-3]"
      $token=REGEX      the token number matches REGEX completely, e.g. "$token=0"
      $character=REGEX  the character offset matches REGEX completely

    A log that already has a selection is sub-selected (both must hold).
    """
    source = single_log(log)
    check_writable(output, (source,))
    try:
        selected = grep(pattern, source, keep=keep, and_patterns=list(and_pattern))
    except PatternError as e:
        raise click.BadParameter(str(e), param_hint="PATTERN") from None
    if output == "-":
        write_jsonlines(selected, sys.stdout)
    else:
        write_log(selected, output)
