"""The progress bar of `lmc run`: counts messages and tokens when shown, costs nothing when not."""

from __future__ import annotations

import io

from lmchallenge.progress import TokenProgress


def test_shown_bar_counts_messages_and_tokens(monkeypatch):
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    progress = TokenProgress(3, enabled=True)
    assert list(progress.messages_of(["a", "b", "c"])) == ["a", "b", "c"]
    assert list(progress.tokens_of(range(4500))) == list(range(4500))
    progress.close()
    assert progress.tokens == 4500
    shown = err.getvalue()
    assert "3/3" in shown and "4000 tok" in shown and "tok/s" in shown


def test_hidden_bar_passes_the_iterables_through():
    progress = TokenProgress(None, enabled=False)
    messages, log = ["a"], iter([{"token": 0}])
    assert progress.messages_of(messages) is messages
    assert progress.tokens_of(log) is log
    progress.close()
