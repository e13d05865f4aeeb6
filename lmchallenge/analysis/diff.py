"""``lmc diff``: token by token, how a model (LOG) differs from a baseline on the same text.

The two logs must hold the same tokens in the same order (same ``user``, ``message``,
``token``, ``character``, ``target`` and selection) and the same game; otherwise
:class:`LogMismatchError` says where they first part.

Colours (ANSI as LM Challenge 5.x ``lmc diff``; tokens deselected by ``lmc grep`` blue):

* ``wc``: characters typed with both models black (grey); the characters one model
  had to type and the other completed bold green (LOG typed fewer) or bold red (LOG
  typed more); characters both completed default.  A next-word prediction within
  the top 3 counts as nothing typed.  (LM Challenge 5.x colours every character after
  the common typed prefix; only the differing ones are highlighted here.)
* ``we``/``ce``: ``d = logp(LOG) - logp(BASELINE)`` against the interval ``i``:
  ``d > i/2`` bold green, ``> i/6`` green, ``> -i/6`` yellow, ``> -i/2`` red, else bold
  red; scored by neither magenta; scored by one only white (bold when LOG lost it).
* ``wr`` (each log's own fitted mixture): bold green miscorrected -> unchanged, bold red
  unchanged -> miscorrected, green uncorrected -> corrected, red corrected ->
  uncorrected; no change: black, bold when wrong under both.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any


from lmchallenge.analysis import pretty
from lmchallenge.errors import LmcError
from lmchallenge.analysis.grep import is_selected
from lmchallenge.logs.io import read_log
from lmchallenge.logs.schema import COMMON_COLUMNS, PAYLOAD_COLUMNS, Datum
from lmchallenge.stats.outcomes import DIFF_NEXT_WORD_RANK, typed_characters
from lmchallenge.analysis.pretty import GAME_OF_CHALLENGE, Colour, Details, Page, Renderer, Segment, Style

COMMON_KEYS = COMMON_COLUMNS
NAMES = ("baseline", "log")


class LogMismatchError(LmcError):
    """The two logs of a diff are not of the same data (or not of the same game)."""


def zip_logs(baseline: Iterable[Datum], log: Iterable[Datum]) -> list[Datum]:
    """Pair two logs of the same text datum by datum.

    Args:
        baseline, log: the two logs (iterables of datums).
    Returns:
        Datums with the common keys (``user``, ``message``, ``token``, ``character``,
        ``target``, ``select``) and each log's own keys under ``"baseline"`` / ``"log"``.
    Raises:
        LogMismatchError: as :func:`pairs`.
    """
    return [_zipped(a, b) for a, b in pairs(baseline, log)]


def _zipped(a: Datum, b: Datum) -> Datum:
    datum = {k: a.get(k) for k in COMMON_KEYS}
    datum["select"] = is_selected(a)
    datum["baseline"] = {k: v for k, v in a.items() if k not in COMMON_KEYS + ("select",)}
    datum["log"] = {k: v for k, v in b.items() if k not in COMMON_KEYS + ("select",)}
    return datum


def pairs(baseline: Iterable[Datum], log: Iterable[Datum]) -> Iterator[tuple[Datum, Datum]]:
    """The datums of two logs of the same text, in pairs, checked as they are read (neither
    log is held: ``lmc compare`` checks logs of millions of tokens this way).

    Raises:
        LogMismatchError: (when the pair, or the end of the shorter log, is reached) a
            different number of tokens, a common key that differs (naming the first token
            where they part), a different selection, or different games.
    """
    baseline, log = iter(baseline), iter(log)
    number = 0
    for number, (a, b) in enumerate(itertools.zip_longest(baseline, log), start=1):
        if a is None or b is None:
            more = sum(1 for _ in (baseline if b is None else log))
            lengths = (number + more, number - 1) if b is None else (number - 1, number + more)
            raise LogMismatchError(
                f"the logs are not of the same data: BASELINE has {lengths[0]} tokens, "
                f"LOG has {lengths[1]} (the logs of two models on the same text are compared)")
        if number == 1:
            games = (pretty.detect_game(a), pretty.detect_game(b))
            if games[0] != games[1]:
                raise LogMismatchError(
                    f"the logs are of different games: BASELINE is {games[0]}, LOG is {games[1]}")
        for key in COMMON_KEYS:
            if a.get(key) != b.get(key) or type(a.get(key)) is not type(b.get(key)):
                raise LogMismatchError(
                    f"the logs are not of the same data: token {number} "
                    f"(user {a.get('user')!r}, message {a.get('message')!r}, token "
                    f"{a.get('token')!r}) has {key} {a.get(key)!r} in BASELINE but "
                    f"{b.get(key)!r} in LOG")
        if is_selected(a) != is_selected(b):
            raise LogMismatchError(
                f"the logs have different selections: token {number} is "
                f"{'selected' if is_selected(a) else 'deselected'} in BASELINE only "
                f"(grep both logs the same way)")
        yield a, b


def typed_for_diff(target: str, completions: Sequence[Sequence[str]]) -> int:
    """Characters typed before the target is offered, as ``lmc diff`` counts them
    (:data:`lmchallenge.stats.outcomes.DIFF_NEXT_WORD_RANK`)."""
    return typed_characters(completions, target, next_word_rank=DIFF_NEXT_WORD_RANK)


def diff_completion(datum: Datum) -> list[Segment]:
    """``wc`` diff colours: common typed prefix black, then the differing characters."""
    target = datum["target"]
    base = typed_for_diff(target, datum["baseline"]["completions"])
    new = typed_for_diff(target, datum["log"]["completions"])
    low, high = min(base, new), max(base, new)
    segments = [(target[:low], Style(Colour.BLACK))]
    if base == new:
        return segments + [(target[low:], pretty.DEFAULT)]
    style = Style(Colour.RED, True) if base < new else Style(Colour.GREEN, True)
    segments.append((target[low:high], style))
    if high < len(target):
        segments.append((target[high:], pretty.DEFAULT))
    return segments


def entropy_diff_style(base: float | None, logp: float | None, interval: float) -> Style:
    """``we``/``ce`` diff colour of ``logp - base`` (see the module docstring)."""
    if base is None and logp is None:
        return Style(Colour.MAGENTA)
    if base is None or logp is None:
        return Style(Colour.WHITE, logp is None)
    d = logp - base
    x = interval / 6
    if d > 3 * x:
        return Style(Colour.GREEN, True)
    if d > x:
        return Style(Colour.GREEN)
    if d > -x:
        return Style(Colour.YELLOW)
    if d > -3 * x:
        return Style(Colour.RED)
    return Style(Colour.RED, True)


def diff_entropy(interval: float) -> Renderer:
    return lambda d: [(d["target"], entropy_diff_style(
        d["baseline"].get("logp"), d["log"].get("logp"), interval))]


WR_DIFF = {
    # (correct before reranking, correct under baseline, correct under log)
    (True, True, False): ("unchanged -> miscorrected", Style(Colour.RED, True)),
    (False, True, False): ("corrected -> uncorrected", Style(Colour.RED)),
    (True, False, True): ("miscorrected -> unchanged", Style(Colour.GREEN, True)),
    (False, False, True): ("uncorrected -> corrected", Style(Colour.GREEN)),
    (True, False, False): ("miscorrected by both", Style(Colour.BLACK, True)),
    (False, False, False): ("uncorrected by both", Style(Colour.BLACK, True)),
    (True, True, True): ("correct with both", Style(Colour.BLACK)),
    (False, True, True): ("corrected by both", Style(Colour.BLACK)),
}


def wr_diff_case(datum: Datum, base_model: pretty.ScoreModel, model: pretty.ScoreModel) -> tuple[bool, ...]:
    target = datum["target"]
    return (pretty.is_correct(target, datum["baseline"]["results"], pretty.error_only),
            pretty.is_correct(target, datum["baseline"]["results"], base_model),
            pretty.is_correct(target, datum["log"]["results"], model))


def diff_reranking(base_model: pretty.ScoreModel, model: pretty.ScoreModel) -> Renderer:
    return lambda d: [(d["target"], WR_DIFF[wr_diff_case(d, base_model, model)][1])]


def _unzip(zipped: Sequence[Datum], name: str) -> list[Datum]:
    return [{**{k: d[k] for k in COMMON_KEYS}, "select": d["select"], **d[name]} for d in zipped]


def make_diff_renderer(game: str | None, zipped: Sequence[Datum], interval: float
                       ) -> tuple[Renderer, tuple[pretty.ScoreModel, pretty.ScoreModel] | None]:
    """The diff renderer of ``game`` (and, for ``wr``, the two fitted models)."""
    if game == "wc":
        return diff_completion, None
    if game == "we":
        return diff_entropy(interval), None
    if game == "wr":
        models = (pretty.fit_reranking(_unzip(zipped, "baseline")), pretty.fit_reranking(_unzip(zipped, "log")))
        return diff_reranking(*models), models
    return (lambda d: [(d["target"], pretty.DEFAULT)]), None


def _prepare(baseline: Iterable[Datum] | str, log: Iterable[Datum] | str,
             challenge: str, most: int | None = None) -> tuple[list[Datum], str | None]:
    baseline_data, log_data = pretty.as_data(baseline, most), pretty.as_data(log, most)
    try:
        zipped = zip_logs(baseline_data, log_data)
    except LogMismatchError:    # a line that is no log datum is named as such, first
        for name, data in ((baseline, baseline_data), (log, log_data)):
            pretty.check_data(data, None, pretty.log_name(name))
        raise
    game = pretty.game_of(log_data, challenge, pretty.log_name(log))
    pretty.check_data(baseline_data, game, pretty.log_name(baseline))
    return zipped, game


def ansi(baseline: Iterable[Datum] | str, log: Iterable[Datum] | str,
         entropy_interval: float = 10.0, challenge: str = "auto") -> Iterator[str]:
    """ANSI-coloured lines, one per message, of how LOG differs from BASELINE.

    Args:
        baseline, log: datums, or paths of any log form, of the same text.
        entropy_interval: the ``logp`` difference range of the entropy colours.
        challenge: ``auto``, ``completion``, ``entropy`` or ``reranking``.
    Raises:
        LogMismatchError: the logs are not of the same data (checked before any output:
            two logs given as paths other than ``-`` are read twice, and neither is held
            unless the game is ``wr``, whose mixtures are fitted on the whole logs).
        InputError: a datum that is no log datum (``lmc validate``), or of another game.
    """
    if isinstance(baseline, str) and isinstance(log, str) and "-" not in (baseline, log):
        # (the baseline's first datum: the logs' games, if they differ, are said by pairs)
        game = GAME_OF_CHALLENGE[challenge] if challenge != "auto" else _first_game(baseline)
        if game != "wr":    # two passes over the files, neither held (QA: 2.3 GB for 1M tokens)
            _check_files(baseline, log, game)
            renderer, _ = make_diff_renderer(game, [], entropy_interval)
            zipped = (_zipped(a, b) for a, b in pairs(read_log(baseline), read_log(log)))
            return pretty.render_ansi(zipped, renderer)
    zipped, game = _prepare(baseline, log, challenge)
    renderer, _ = make_diff_renderer(game, zipped, entropy_interval)
    return pretty.render_ansi(zipped, renderer)


def _first_game(path: str) -> str | None:
    """The game of the first datum of the log at ``path`` (None: no datum, or no game)."""
    data = read_log(path)
    try:
        return pretty.detect_game(next(iter(data), None))
    finally:
        getattr(data, "close", lambda: None)()


def _check_files(baseline: str, log: str, game: str | None) -> None:
    """Check the logs at two paths as :func:`_prepare` checks them (``lmc validate``'s
    rules, the payload of ``game``, :func:`pairs`), each read as it is checked.

    Raises:
        InputError: a datum that is no log datum of ``game``.
        LogMismatchError: as :func:`pairs`.
    """
    names = pretty.log_name(baseline), pretty.log_name(log)
    keys = PAYLOAD_COLUMNS.get(game or "", ())
    data = [pretty.checked(read_log(path), None, name) for path, name in zip((baseline, log), names)]
    for number, pair in enumerate(pairs(*data), start=1):     # (games that differ: said here)
        for datum, name in zip(reversed(pair), reversed(names)):       # the log's first
            if any(key not in datum for key in keys):
                next(pretty.checked([datum], game, name, start=number))


def _describe_factory(game: str | None, models, float_format: str, interval: float):
    def both(d: Datum) -> tuple[Datum, Datum]:
        common = {k: d[k] for k in COMMON_KEYS}
        common["select"] = d["select"]
        return {**common, **d["baseline"]}, {**common, **d["log"]}

    def describe(d: Datum) -> tuple[str, Details]:
        base, new = both(d)
        rows = pretty.position_rows(d)
        tables: list[dict[str, Any]] = []
        if game == "wc":
            nb = typed_for_diff(d["target"], d["baseline"]["completions"])
            nl = typed_for_diff(d["target"], d["log"]["completions"])
            rows += [("typed (baseline)", f"{nb} of {len(d['target'])}"),
                     ("typed (log)", f"{nl} of {len(d['target'])}")]
            for name, datum in zip(NAMES, (base, new)):
                table = pretty.completion_details(datum, float_format).tables[0]
                table["caption"] = f"{name}: {table['caption']}"
                tables.append(table)
            tip = f"{d['target']}: typed {nb} (baseline) vs {nl} (log)"
        elif game == "we":
            lb, ll = d["baseline"].get("logp"), d["log"].get("logp")
            delta = ll - lb if lb is not None and ll is not None else None
            rows += [("logp (baseline)", pretty.fmt(lb, float_format)),
                     ("logp (log)", pretty.fmt(ll, float_format)),
                     ("difference (log - baseline)", pretty.fmt(delta, float_format))]
            tip = (f"{d['target']}: logp {pretty.fmt(lb, float_format)} -> {pretty.fmt(ll, float_format)}")
        elif game == "wr":
            label = WR_DIFF[wr_diff_case(d, *models)][0]
            rows += [("verbatim (corrupted)", str(d["baseline"].get("verbatim"))),
                     ("change", label),
                     ("baseline model", str(models[0])), ("log model", str(models[1]))]
            for name, datum, model in zip(NAMES, (base, new), models):
                tables.append(pretty.reranking_table(datum, model, float_format, f"{name}: candidates"))
            tip = f"{d['target']}: {label}"
        else:
            tip = d["target"]
        return tip, Details(rows=rows, tables=tables)
    return describe


DIFF_LEGENDS = {
    "wc": lambda i: [("c0", "typed with both"), ("c2 b", "typed with baseline only"),
                     ("c1 b", "typed with log only"), ("c9", "completed by both")],
    "we": lambda i: [("c2 b", f"logp gain > {i / 2:g}"), ("c2", f"> {i / 6:g}"),
                     ("c3", f"within ±{i / 6:g}"), ("c1", f"loss > {i / 6:g}"),
                     ("c1 b", f"loss > {i / 2:g}"), ("c5", "scored by neither"),
                     ("c7", "scored by log only"), ("c7 b", "scored by baseline only")],
    "wr": lambda i: [("c2 b", "miscorrected -> unchanged"), ("c1 b", "unchanged -> miscorrected"),
                     ("c2", "uncorrected -> corrected"), ("c1", "corrected -> uncorrected"),
                     ("c0", "no change, right"), ("c0 b", "no change, wrong")],
}


def html(baseline: Iterable[Datum] | str, log: Iterable[Datum] | str,
         entropy_interval: float = 10.0, float_format: str = ".4g",
         challenge: str = "auto", max_tokens: int | None = pretty.PAGE_TOKENS) -> str:
    """One self-contained HTML page of how LOG differs from BASELINE (see :func:`ansi`);
    a clicked token shows both logs' details, the summary both logs' statistics.

    Args:
        max_tokens: refuse logs of more tokens (None: no limit).
    Raises:
        LogMismatchError: the logs are not of the same data.
        LmcError: a log has more than ``max_tokens`` (:func:`lmchallenge.analysis.pretty.as_data`).
    """
    zipped, game = _prepare(baseline, log, challenge, max_tokens)
    renderer, models = make_diff_renderer(game, zipped, entropy_interval)
    describe = _describe_factory(game, models, float_format, entropy_interval)
    summary = ({name: pretty.summary_stats(_unzip(zipped, name), float_format) for name in NAMES}
               if zipped else {})
    note = f"baseline model: {models[0]}; log model: {models[1]}" if models else ""
    legend = DIFF_LEGENDS.get(game or "", lambda i: [])(entropy_interval)
    page = Page(title="LM Challenge diff", legend=legend + [("c4 unsel", "not selected (grep)")],
                summary=summary, note=note)
    page.lines = pretty.page_lines(zipped, renderer, describe)
    return pretty.render_page(page)
