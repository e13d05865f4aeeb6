"""The statistics of a log in any form: column-wise where it can be, datum by datum where it
must (``lmc stats``, and the 5.x Python API :func:`stats`)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from lmchallenge.logs.files import log_form, run_dir_parts
from lmchallenge.logs.io import read_log
from lmchallenge.logs.schema import Datum
from lmchallenge.stats.results import RawStats, Stats
from lmchallenge.stats.state import StatsState, state_of_numbered


def state_of(data: Iterable[Datum]) -> StatsState:
    """One pass of :class:`StatsState` over ``data``."""
    state = StatsState()
    for datum in data:
        state.update(datum)
    return state


def stats(data: Iterable[Datum], human: bool = True) -> Stats | RawStats:
    """The ``lmc stats`` statistics of a log.

    Args:
        data: log datums (LM Challenge 5.x schema); unselected ones are counted as skipped.
        human: ratios (default) or raw sums.
    Returns:
        A dict as ``lmc stats`` prints it (without the ``log`` key).
    """
    return state_of(data).result(human=human)


def state_of_log(path: str, lines: int | None = None, groups: Any = None) -> StatsState:
    """The state of a whole log (any form :func:`lmchallenge.logs.io.read_log` reads).

    Read column-wise: Parquet files (:mod:`lmchallenge.stats.columnar`) and jsonlines logs,
    gzipped or from stdin (:mod:`lmchallenge.stats.columnar_jsonl`); a run directory part by
    part, merging the parts' states.  With ``lines``, datum by datum.

    Args:
        path: the log.
        lines: only the first ``lines`` datums (None: all).
        groups: a :class:`lmchallenge.stats.bootstrap.GroupSums` that the same pass adds the
            log's per-group sums to (None: none are made).
    Raises:
        InputError: the log cannot be read, or a datum is not a log datum (naming the file
            and the line of a jsonlines log; with ``lines``, datum N counted from 1).
    """
    from lmchallenge.stats import columnar  # imports pyarrow: not for the datum-by-datum paths

    if lines is not None:
        return state_of_numbered(enumerate(itertools.islice(read_log(path), lines), start=1), path,
                                 groups)
    form = log_form(path)
    if form == "parquet" or (form == "run_dir" and columnar.is_columnar(path)):
        return columnar.state_of_parquet(path, groups=groups)  # raises the InputError of a missing file
    if form == "run_dir":
        state = StatsState()
        for part in run_dir_parts(path):
            state.merge(state_of_log(str(part), groups=groups))
        return state
    from lmchallenge.stats.columnar_jsonl import state_of_jsonl

    return state_of_jsonl(path, groups=groups)
