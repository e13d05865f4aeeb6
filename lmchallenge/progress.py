"""Progress reporting on stderr (tqdm), shown only when stderr is a terminal."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from tqdm import tqdm

T = TypeVar("T")


class TokenProgress:
    """A bar over messages (with ETA when the total is known) showing tokens/s.

    Args:
        total_messages: messages in the corpus, or None if unknown.
        enabled: None = show when stderr is a terminal.
    """

    def __init__(self, total_messages: int | None, enabled: bool | None = None):
        show = sys.stderr.isatty() if enabled is None else enabled
        self._bar = tqdm(total=total_messages, unit="msg", disable=not show, file=sys.stderr,
                         dynamic_ncols=True, smoothing=0.1)
        self._start = time.monotonic()
        self.tokens = 0

    def message(self) -> None:
        """One more message was read."""
        self._bar.update(1)

    def token(self) -> None:
        """One more token was written."""
        self.tokens += 1
        if self.tokens % 2000 == 0 and not self._bar.disable:
            rate = self.tokens / max(1e-9, time.monotonic() - self._start)
            self._bar.set_postfix_str(f"{self.tokens} tok, {rate:,.0f} tok/s", refresh=False)

    def messages_of(self, messages: Iterable[T]) -> Iterable[T]:
        """``messages``, counted as they are read (as they are when the bar is hidden)."""
        if self._bar.disable:
            return messages
        return self._counting(messages, self.message)

    def tokens_of(self, log: Iterable[T]) -> Iterable[T]:
        """``log`` (datums), counted as they are written (as it is when the bar is hidden)."""
        if self._bar.disable:
            return log
        return self._counting(log, self.token)

    @staticmethod
    def _counting(items: Iterable[T], count: Callable[[], None]) -> Iterator[T]:
        for item in items:
            count()
            yield item

    def close(self) -> None:
        self._bar.close()
