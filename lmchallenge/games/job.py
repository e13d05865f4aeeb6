"""One evaluation in one process (``lmc run``): a game over a corpus with a model, writing the
log."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from lmchallenge.corpus import (FileVersion, Message, UserGroups, check_unchanged, file_version,
                                input_name, is_stream, read_corpus)
from lmchallenge.games.runner import run_game
from lmchallenge.games.spec import GameSpec
from lmchallenge.logs.files import check_writable, is_parquet_name
from lmchallenge.logs.io import write_log
from lmchallenge.logs.jsonl import write_jsonlines
from lmchallenge.model.session import InProcessModel
from lmchallenge.model.shell import ShellModel
from lmchallenge.model.spec import PredictorSpec, close_model
from lmchallenge.progress import TokenProgress

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunJob:
    """Everything one ``lmc run`` needs.

    Attributes:
        predictor: how to start the model.
        game: the game and its options.
        corpus: corpus path or ``-``.
        corpus_format: ``auto``, ``text`` or ``json``.
        train: train the model on each message after evaluating it.
        output: log destination (``-`` = stdout).
    """

    predictor: PredictorSpec
    game: GameSpec
    corpus: str = "-"
    corpus_format: str = "auto"
    train: bool = False
    output: str = "-"


def validated_messages(path: str, fmt: str, parquet: bool = False
                       ) -> tuple[int, Iterator[Message] | list[Message]]:
    """Check the whole corpus before the model starts (so bad input costs no model time and
    leaves no half-written output); returns the message count and a fresh message source.
    Standard input and pipes (:func:`lmchallenge.corpus.is_stream`) are read once, into
    memory; a file is read twice, and the second read fails when it is over if the file
    changed since the first began (:func:`lmchallenge.corpus.check_unchanged`: truncated,
    rewritten or replaced under the run, it would give a log of part of the corpus).  A json
    corpus whose users' rows are not each together is warned about
    (:class:`lmchallenge.corpus.UserGroups`).

    Raises:
        InputError: the corpus is not one (``FILE:LINE: what is wrong``), or, with
            ``parquet`` (the log is written as Parquet), its users are not of one type
            that a Parquet log's user column holds
            (:meth:`lmchallenge.logs.parquet.UserTypes.check_parquet`: QA, the run stopped
            at the first user of the other type, naming the log's datum, not the corpus'
            line, after the model's work on the rows before it).
    """
    groups = UserGroups()
    source: Iterator[Message] | list[Message]
    if is_stream(path):
        source = list(read_corpus(path, fmt))
        count = groups.add_all((m.user, m.line) for m in source)
    else:
        before = file_version(path)
        count = groups.add_all((m.user, m.line) for m in read_corpus(path, fmt))
        source = _checked(path, fmt, before, count)
    if parquet:
        from lmchallenge.logs.parquet import UserTypes
        UserTypes.of_users(groups.users).check_parquet(input_name(path), "write the log as jsonl")
    warning = groups.warning(input_name(path))
    if warning is not None:
        LOG.warning("%s", warning)
    return count, source


def _checked(path: str, fmt: str, before: FileVersion | None, count: int) -> Iterator[Message]:
    read = 0
    for message in read_corpus(path, fmt):
        read += 1
        yield message
    check_unchanged(path, before, count, read)


def finished(log: Iterator[Any], model: Any) -> Iterator[Any]:
    """``log``, then, before whoever consumes the log takes it as complete, for a shell model
    :meth:`ShellModel.finish` (it answered no more than it was asked, and exited without an
    error), for a Python model its :meth:`InProcessModel.close` (it closed without one)."""
    yield from log
    if isinstance(model, ShellModel):
        model.finish()
    elif isinstance(model, InProcessModel):
        model.close()


def execute(job: RunJob) -> int:
    """Run ``job``; returns the number of log datums written.

    Raises:
        InputError: bad corpus or vocabulary, or an output that cannot be written (nothing
            is written).
        ModelError: the model failed (a file output is not created).
    """
    check_writable(job.output, (job.corpus, job.game.options.get("vocab")))
    total, messages = validated_messages(job.corpus, job.corpus_format,
                                         parquet=is_parquet_name(job.output))
    game = job.game.build(warn=True)
    stdout = sys.stdout
    # what a Python model prints goes to stderr: standard output is the log's (QA: a model's
    # debugging prints made a log on stdout that lmc stats could not read, and the run exit 0)
    with contextlib.redirect_stdout(sys.stderr if job.predictor.is_python else stdout):
        progress = TokenProgress(total)
        # a shell model's stderr is shown as it comes (as 5.2, whose model shared it: QA, a
        # model's warnings were seen only with -v)
        model = job.predictor.create(pass_stderr=True, game=job.game.name)
        try:
            log = finished(progress.tokens_of(run_game(game, model, progress.messages_of(messages),
                                                       train=job.train)), model)
            if job.output == "-":
                n = write_jsonlines(log, stdout)
            else:
                n = write_log(log, job.output, game=job.game.name)
        except BaseException:
            if isinstance(model, ShellModel):   # interrupted, its answers unread, or failed: it
                model.kill()                    # must not be waited for (a full pipe blocks it)
            with contextlib.suppress(Exception):    # the first error is the one to tell
                close_model(model)
            raise
        finally:
            progress.close()
        close_model(model)      # a Python model was closed before its log was complete
    if n == 0:      # (as 5.2, the empty log is written; said, so it is not taken for a result)
        warn_empty_log(input_name(job.corpus), total)
    LOG.info("wrote %d log lines", n)
    return n


def warn_empty_log(corpus: str, messages: int) -> None:
    """Say that the log of ``corpus`` (its name as the user gave it), of ``messages``
    messages, is empty: a run over a corpus without a token to evaluate (``lmc run`` and
    ``lmc-dist run`` alike)."""
    LOG.warning("%s: %s: the log is empty", corpus, "it holds no message" if messages == 0 else
                f"none of its {messages:,} messages has a token to evaluate")
