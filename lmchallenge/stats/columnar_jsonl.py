"""Column-wise ``lmc stats`` of jsonlines logs (``.jsonl``, ``.jsonl.gz``, ``-`` for stdin).

:func:`state_of_jsonl` reads the log in blocks of whole lines, each parsed with Arrow's JSON
reader into columns where Arrow reads it exactly as the datum-by-datum reader would
(:func:`lmchallenge.logs.jsonl_columns.parsed_blocks`), reduces them with
:func:`lmchallenge.stats.columnar.batch_state`, and merges the block states in log order.  A
block without columns is read datum by datum (:func:`lmchallenge.stats.state_of_lines`),
which gives the same numbers or the error naming the file and line.  Memory stays bounded
by a few blocks.
"""

from __future__ import annotations

import io
import os

from lmchallenge.stats import columnar
from lmchallenge.stats import state as stats
from lmchallenge.errors import InputError
from lmchallenge.logs.files import read_errors
from lmchallenge.logs.jsonl_columns import BLOCK_BYTES, located, parsed_blocks


def state_of_jsonl(path: str, block_bytes: int = BLOCK_BYTES, groups=None) -> stats.StatsState:
    """The :class:`~lmchallenge.stats.StatsState` of a jsonlines log, column-wise.

    Args:
        path: a ``.jsonl`` file, a gzipped one (``.gz``), or ``-`` for stdin.
        block_bytes: about this many bytes are parsed and reduced at once (positive).
        groups: a :class:`lmchallenge.stats.bootstrap.GroupSums` to add the per-group sums to.
    Returns:
        The state of the datum-by-datum loop over the log, exactly.
    Raises:
        InputError: the log cannot be read (missing, not gzip, not UTF-8), or a line is not
            JSON or not an LM Challenge log datum (naming the file and line).
    """
    state = stats.StatsState()
    cache: dict[str, int] = {}
    try:
        with read_errors(path):
            for block in columnar.prefetched(parsed_blocks(path, block_bytes)):
                if block.table is None:
                    text = io.TextIOWrapper(io.BytesIO(block.data), encoding="utf-8", newline="\n")
                    state.merge(stats.state_of_lines(text, path, block.first_line, groups))
                else:
                    for batch in block.table.to_batches():
                        state.merge(columnar.batch_state(batch, cache, groups))
    except InputError as e:
        if e.line is None and path != "-" and os.path.exists(path):
            located(path)       # read in blocks, a damaged file is named without its line
        raise
    return state
