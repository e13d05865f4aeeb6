"""``lmc pretty``: show how a model did on every token of a log, in ANSI colour or as
one self-contained HTML page.

Colours (ANSI, as LM Challenge 5.x ``lmc pretty``; tokens deselected by ``lmc grep``
are blue in ANSI, dimmed blue in HTML):

* ``wc``: next word predicted at rank 1 bold green, at rank 2-3 green; otherwise
  the characters typed before the word is offered in the top 2 completions red,
  the completed rest black (grey);
* ``we``/``ce``: by ``-logp`` in fifths of the entropy interval ``i``: below i/5
  bold green, i/5 green, 2i/5 yellow, 3i/5 red, 4i/5 and more bold red; not scored
  (``logp`` null) magenta;
* ``wr``: under the mixture fitted on the log (:mod:`lmchallenge.stats.reranking`):
  corrected green, miscorrected red, left uncorrected yellow, correct before and
  after default (a target is correct when it outscores every other candidate; 5.x's
  compares it with the candidates listed after it only: docs/statistics.md, "wr").

The ANSI escape sequences follow LM Challenge 5.x exactly: a colour change writes
``ESC[3Cm``, turning bold on ``ESC[1;3Cm`` and off ``ESC[0;3Cm``; the space between
two tokens is written in the colour of the token before it; every line ends with the
default colour.

The HTML page (``-o html``) inlines its CSS, script and data (JSON) and refers to no
URL at all, so it works offline.  It shows the summary statistics
(:func:`lmchallenge.stats.stats`), a legend, the text coloured as in ANSI, and the
details of a token (rank and completions, logp, candidates and scores) on click; a
hover shows a one-line summary.  ``page.html#token=N`` opens with token N (0-based,
in log order) selected.
"""

from __future__ import annotations

import enum
import html as html_escape
import itertools
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any


from lmchallenge.corpus import input_name
from lmchallenge.errors import InputError, LmcError
from lmchallenge.analysis.grep import is_selected
from lmchallenge.logs.io import log_argument, read_log
from lmchallenge.logs.schema import PAYLOAD_COLUMNS, Datum, payload_games
from lmchallenge.stats.outcomes import rank_of
from lmchallenge.stats.outcomes import typed_characters as outcomes_typed_characters


GAME_OF_CHALLENGE = {"completion": "wc", "entropy": "we", "reranking": "wr"}
CHALLENGES = ("auto", "completion", "entropy", "reranking")


class Colour(enum.IntEnum):
    """ANSI foreground colours (the escape code is 30 + value)."""

    BLACK = 0
    RED = 1
    GREEN = 2
    YELLOW = 3
    BLUE = 4
    MAGENTA = 5
    CYAN = 6
    WHITE = 7
    DEFAULT = 9


@dataclass(frozen=True, slots=True)
class Style:
    """A colour and a weight."""

    colour: Colour = Colour.DEFAULT
    bold: bool = False

    @property
    def css(self) -> str:
        """CSS classes of this style in the HTML page (``cN`` colour, ``b`` bold)."""
        return f"c{int(self.colour)}" + (" b" if self.bold else "")


DEFAULT = Style()
UNSELECTED = Style(Colour.BLUE)

Segment = tuple[str, Style]
"""A run of a token's text and its style."""

Renderer = Callable[[Datum], list[Segment]]
"""Colours a selected datum: returns its target split into styled segments."""


class AnsiWriter:
    """Writes text and the minimal ANSI escapes between styles (LM Challenge 5.x rules)."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.style = DEFAULT

    def set(self, style: Style) -> None:
        """Switch to ``style``; writes nothing if it is the current style."""
        code = 30 + int(style.colour)
        if self.style.bold and not style.bold:
            self.parts.append(f"\x1b[0;{code}m")
        elif style.bold and not self.style.bold:
            self.parts.append(f"\x1b[1;{code}m")
        elif self.style.colour != style.colour:
            self.parts.append(f"\x1b[{code}m")
        self.style = style

    def write(self, text: str) -> None:
        self.parts.append(text)

    def getvalue(self) -> str:
        return "".join(self.parts)


# --- per-game classification ------------------------------------------------------------

def completion_ranks(datum: Datum) -> list[float]:
    """For each prefix length i of the target, the rank of the rest of the target among
    ``completions[i]`` (``inf`` when not offered)."""
    target = datum["target"]
    return [rank_of(cs, target[i:]) or math.inf for i, cs in enumerate(datum["completions"])]


def typed_characters(datum: Datum) -> int:
    """Characters typed before the target is offered in the top completions
    (:func:`lmchallenge.stats.outcomes.typed_characters`)."""
    return outcomes_typed_characters(datum["completions"], datum["target"])


def render_completion(datum: Datum) -> list[Segment]:
    """``wc`` colours: bold green (predicted @1), green (@3), else red typed + black completed."""
    target = datum["target"]
    ranks = completion_ranks(datum)
    if not ranks:
        return [(target, DEFAULT)]
    if ranks[0] <= 1:
        return [(target, Style(Colour.GREEN, True))]
    if ranks[0] <= 3:
        return [(target, Style(Colour.GREEN))]
    typed = typed_characters(datum)
    return [(target[:typed], Style(Colour.RED)), (target[typed:], Style(Colour.BLACK))]


def entropy_style(logp: float | None, interval: float) -> Style:
    """``we``/``ce`` colour band of ``-logp`` in fifths of ``interval``."""
    if logp is None:
        return Style(Colour.MAGENTA)
    x = interval / 5
    bands = [Style(Colour.GREEN, True), Style(Colour.GREEN), Style(Colour.YELLOW),
             Style(Colour.RED)]
    for k, style in enumerate(bands, start=1):
        if -logp < k * x:
            return style
    return Style(Colour.RED, True)


def entropy_renderer(interval: float) -> Renderer:
    """A renderer colouring each token by its entropy band (see :func:`entropy_style`)."""
    return lambda datum: [(datum["target"], entropy_style(datum.get("logp"), interval))]


ScoreModel = Callable[[float, "float | None"], float]
"""A reranking model: ``model(error_score, lm_score_or_None) -> combined score``."""


def error_only(error: float, lm: float | None) -> float:
    """The ranking before correction: the error model's score alone."""
    return error


def is_correct(target: str, results: Iterable[Sequence[Any]], model: ScoreModel) -> bool:
    """True if ``target`` scores strictly higher than every other candidate under ``model``.

    Args:
        target: the intended word.
        results: ``[candidate, error_score, lm_score_or_None]`` triples of a ``wr`` datum.
        model: the scoring function.
    Returns:
        False also when the target is not among the candidates.
    """
    scores = [(r[0], model(r[1], r[2])) for r in results]
    target_scores = [s for c, s in scores if c == target]
    if not target_scores:
        return False
    best = target_scores[0]
    return all(s < best for c, s in scores if c != target)


class WrOutcome(enum.Enum):
    """What reranking did to a token: correct before (error model only) / after (mixture)."""

    UNCHANGED = (True, True)
    CORRECTED = (False, True)
    MISCORRECTED = (True, False)
    UNCORRECTED = (False, False)


WR_STYLES = {
    WrOutcome.UNCORRECTED: Style(Colour.YELLOW),
    WrOutcome.CORRECTED: Style(Colour.GREEN),
    WrOutcome.MISCORRECTED: Style(Colour.RED),
    WrOutcome.UNCHANGED: DEFAULT,
}


def wr_outcome(datum: Datum, model: ScoreModel) -> WrOutcome:
    """Classify a ``wr`` datum by correctness before and after reranking with ``model``."""
    pre = is_correct(datum["target"], datum["results"], error_only)
    post = is_correct(datum["target"], datum["results"], model)
    return WrOutcome((pre, post))


def reranking_renderer(model: ScoreModel) -> Renderer:
    """A renderer colouring ``wr`` tokens by :func:`wr_outcome` under ``model``."""
    return lambda datum: [(datum["target"], WR_STYLES[wr_outcome(datum, model)])]


def fit_reranking(data: Iterable[Datum]) -> ScoreModel:
    """The interpolation mixture fitted on the selected tokens of a ``wr`` log
    (:mod:`lmchallenge.stats.reranking`); returns a callable ``model(error, lm)``."""
    from lmchallenge.stats import reranking

    return reranking.fit_model(d for d in data if is_selected(d))


# --- detecting the game -----------------------------------------------------------------

def detect_game(datum: Datum | None) -> str | None:
    """``wc``, ``we`` (entropy, also ``ce``) or ``wr`` from a datum's payload keys.

    Raises:
        LmcError: the datum has none, or more than one, of the game payloads.
    """
    if datum is None:
        return None
    found = payload_games(datum)
    if len(found) != 1:
        raise LmcError("cannot tell the game of this log from its first token "
                       "(expected exactly one of completions, logp, results): "
                       "use --challenge")
    return found[0]


def game_of(data: Sequence[Datum], challenge: str = "auto", name: str = "<log>") -> str | None:
    """The game to render ``data`` as: from ``challenge`` (completion / entropy /
    reranking) or detected from the first datum (``auto``), every datum checked
    (:func:`check_data`)."""
    game = GAME_OF_CHALLENGE[challenge] if challenge != "auto" else detect_game(data[0] if data else None)
    check_data(data, game, name)
    return game


def check_data(data: Sequence[Datum], game: str | None, name: str) -> None:
    """Raise ``InputError`` (``NAME:N: ...``, N counting datums from 1) for the first datum
    of ``data`` that ``lmc validate`` refuses or that lacks the payload of ``game`` (a log
    of another game, or of several)."""
    for _ in checked(data, game, name):
        pass


def checked(data: Iterable[Datum], game: str | None, name: str, start: int = 1) -> Iterator[Datum]:
    """The datums of ``data``, each checked as it comes (:func:`check_data`); ``start``: the
    number errors give the first."""
    from lmchallenge.logs.check import problem

    keys = PAYLOAD_COLUMNS.get(game or "", ())
    for n, datum in enumerate(data, start=start):
        reason = problem(datum)
        if reason is None and any(key not in datum for key in keys):
            found = payload_games(datum)
            shown = {"we": "we/ce"}.get(found[0], found[0]) if found else "payload-less"
            reason = f"no {'/'.join(keys)}: a {shown} datum in a log shown as {game}"
        if reason is not None:
            raise InputError(name, n, reason)
        yield datum


def make_renderer(game: str | None, data: Sequence[Datum], entropy_interval: float) -> Renderer:
    """The renderer for ``game``; for ``wr`` the mixture is fitted on ``data``."""
    if game == "wc":
        return render_completion
    if game == "we":
        return entropy_renderer(entropy_interval)
    if game == "wr":
        return reranking_renderer(fit_reranking(data))
    return lambda datum: [(datum["target"], DEFAULT)]


# --- ANSI -------------------------------------------------------------------------------

def messages(data: Iterable[Datum]) -> Iterator[list[Datum]]:
    """Consecutive datums of one ``(user, message)``."""
    for _, group in itertools.groupby(data, key=lambda d: (d.get("user"), d.get("message"))):
        yield list(group)


def token_segments(datum: Datum, renderer: Renderer) -> list[Segment]:
    """The styled segments of a datum: the renderer's, or blue when deselected."""
    if is_selected(datum):
        return renderer(datum)
    return [(datum["target"], UNSELECTED)]


def spaced(message: list[Datum]) -> Iterator[tuple[bool, Datum]]:
    """``(space_before, datum)``: a space goes before a token that does not start where
    the previous one ended."""
    end = 0
    for datum in message:
        yield end < datum["character"], datum
        end = datum["character"] + len(datum["target"])


def render_ansi(data: Iterable[Datum], renderer: Renderer) -> Iterator[str]:
    """One ANSI-coloured line (no newline) per message of ``data``."""
    for message in messages(data):
        out = AnsiWriter()
        for space, datum in spaced(message):
            if space:
                out.write(" ")
            for text, style in token_segments(datum, renderer):
                out.set(style)
                out.write(text)
        out.set(DEFAULT)
        yield out.getvalue()


def as_data(log: Iterable[Datum] | str, most: int | None = None) -> list[Datum]:
    """The datums of ``log`` (datums, or a path of any log form) as a list.

    Args:
        most: at most this many datums, or None.
    Raises:
        LmcError: ``log`` holds more than ``most`` (:data:`PAGE_TOKENS`): read no further.
    """
    data = read_log(log) if isinstance(log, str) else log
    if most is None:
        return list(data)
    held = list(itertools.islice(data, most + 1))
    if len(held) > most:
        size = PAGE_BYTES_PER_TOKEN * most
        about = f"{size // 10**6:,} MB" if size >= 10**6 else f"{max(1, size // 10**3)} kB"
        raise LmcError(f"{log_name(log)}: more than {most:,} tokens for one HTML page (about "
                       f"{about}: a browser cannot open pages "
                       "much larger): show fewer (lmc grep -k message PATTERN, or head -n on a "
                       "jsonl log), use ansi output, or raise --max-tokens")
    return held


PAGE_TOKENS = 100_000
"""Tokens an HTML page shows at most by default (``--max-tokens``): QA, a page of 210k
tokens was 56 MB and took 730 MB to make; of 17M tokens, it ran out of memory."""
PAGE_BYTES_PER_TOKEN = 270
"""About what a token adds to an HTML page (we: 56 MB for 210k tokens)."""


def log_name(log: Iterable[Datum] | str) -> str:
    """How errors name ``log``."""
    return input_name(log) if isinstance(log, str) else "<log>"


def ansi(log: Iterable[Datum] | str | None = None, entropy_interval: float = 10.0,
         challenge: str = "auto", *, data: Iterable[Datum] | str | None = None) -> Iterator[str]:
    """ANSI-coloured lines, one per message, of an LM Challenge log.

    Args:
        log: datums, or a path of any log form (:func:`lmchallenge.logs.io.read_log`).
        data: the same, by LM Challenge 5.x's name for it (give one of the two).
        entropy_interval: the ``-logp`` range (nats, as the log's ``logp``) spread over
            the five entropy colour bands.
        challenge: ``auto`` (from the first token), ``completion``, ``entropy`` or
            ``reranking``.
    Returns:
        An iterator of lines without newlines: a message's line as soon as its datums are
        read (QA: a log of 1M tokens took 832 MB, of 17M it would have taken 14 GB), except
        for ``wr``, whose mixture is fitted on the whole log first.
    Raises:
        LmcError: the game cannot be told from the log; a datum ``lmc validate`` refuses,
            or of another game (for ``wr`` before any line, else when it is reached).
        TypeError: both ``log`` and ``data`` given, or neither.
    """
    log = log_argument(log, data, "ansi")
    name = log_name(log)
    stream = iter(read_log(log) if isinstance(log, str) else log)
    first = next(stream, None)
    game = GAME_OF_CHALLENGE[challenge] if challenge != "auto" else detect_game(first)
    datums = itertools.chain([] if first is None else [first], stream)
    if game == "wr":
        held = list(datums)
        check_data(held, game, name)
        return render_ansi(held, make_renderer(game, held, entropy_interval))
    return render_ansi(checked(datums, game, name), make_renderer(game, [], entropy_interval))


# --- HTML -------------------------------------------------------------------------------

@dataclass
class Details:
    """What the page shows for a clicked token: label/value rows and tables.

    A table is ``{"caption", "head": [...], "rows": [[...]], "marks": {row: css class}}``.
    """

    rows: list[tuple[str, str]] = field(default_factory=list)
    tables: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"rows": [list(r) for r in self.rows], "tables": self.tables}


def fmt(value: float | None, float_format: str) -> str:
    """A number for the page (``float_format``, e.g. ``.4g``); ``-`` for None."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return format(value, float_format)
    return str(value)


def position_rows(datum: Datum) -> list[tuple[str, str]]:
    """Where the token is: user (as JSON: ``null``, ``"7"`` and ``7`` are three users),
    message, token, character."""
    return [("target", repr(datum["target"])[1:-1] if "\n" in datum["target"] else datum["target"]),
            ("user", json.dumps(datum.get("user"), ensure_ascii=False)),
            ("message", str(datum.get("message"))),
            ("token", str(datum.get("token"))), ("character", str(datum.get("character"))),
            ("selected", "yes" if is_selected(datum) else "no (deselected by grep)")]


def completion_summary(datum: Datum) -> str:
    """One line: next-word rank and characters typed."""
    ranks = completion_ranks(datum)
    first = ranks[0] if ranks else math.inf
    typed = typed_characters(datum)
    nwp = f"rank {int(first)}" if first != math.inf else "not predicted"
    return f"{datum['target']}: next word {nwp}; typed {typed} of {len(datum['target'])} characters"


def completion_details(datum: Datum, float_format: str) -> Details:
    """Rank, typed/completed characters and the completions offered after each prefix."""
    target = datum["target"]
    completions = datum["completions"]
    ranks = completion_ranks(datum)
    first = ranks[0] if ranks else math.inf
    typed = typed_characters(datum)
    details = Details(rows=position_rows(datum) + [
        ("next-word rank", str(int(first)) if first != math.inf else "- (not in the predictions)"),
        ("characters typed", f"{typed} of {len(target)}"),
        ("characters completed", str(len(target) - typed)),
    ])
    width = max((len(cs) for cs in completions), default=0)
    rows, marks = [], {}
    for i, cs in enumerate(completions):
        r = ranks[i]
        rows.append([target[:i] or "(nothing)"] + [target[:i] + c for c in cs]
                    + [""] * (width - len(cs)) + [str(int(r)) if r != math.inf else "-"])
        if r <= (3 if i == 0 else 2):
            marks[str(i)] = "hit"
    details.tables.append({
        "caption": "completions offered after typing each prefix",
        "head": ["typed"] + [f"#{j + 1}" for j in range(width)] + ["rank"],
        "rows": rows, "marks": marks})
    return details


def entropy_details(datum: Datum, float_format: str) -> Details:
    """logp and -logp (nats: natural-log probabilities, as the log holds them)."""
    logp = datum.get("logp")
    return Details(rows=position_rows(datum) + [
        ("logp (nats)", fmt(logp, float_format) if logp is not None else "- (not scored)"),
        ("-logp (nats)", fmt(-logp, float_format) if logp is not None else "-"),
    ])


def entropy_summary(datum: Datum, float_format: str) -> str:
    logp = datum.get("logp")
    return f"{datum['target']}: logp " + (fmt(logp, float_format) + " nats" if logp is not None
                                          else "- (not scored)")


WR_LABELS = {
    WrOutcome.UNCHANGED: "correct before and after reranking",
    WrOutcome.CORRECTED: "corrected",
    WrOutcome.MISCORRECTED: "miscorrected",
    WrOutcome.UNCORRECTED: "uncorrected",
}


def reranking_table(datum: Datum, model: ScoreModel, float_format: str,
                    caption: str) -> dict[str, Any]:
    """The candidates of a ``wr`` datum, best combined score first."""
    scored = sorted(((r[0], r[1], r[2], model(r[1], r[2])) for r in datum["results"]),
                    key=lambda x: -x[3])
    rows, marks = [], {}
    for k, (candidate, error, lm, score) in enumerate(scored):
        rows.append([str(k + 1), candidate, fmt(float(score), float_format),
                     fmt(error, float_format), fmt(lm, float_format)])
        if candidate == datum["target"]:
            marks[str(k)] = "target"
        elif candidate == datum.get("verbatim"):
            marks[str(k)] = "verbatim"
    return {"caption": caption, "head": ["rank", "candidate", "score", "error score", "lm score"],
            "rows": rows, "marks": marks}


def reranking_details(datum: Datum, model: ScoreModel, float_format: str) -> Details:
    """Verbatim, outcome and the candidates with their scores."""
    outcome = wr_outcome(datum, model)
    details = Details(rows=position_rows(datum) + [
        ("verbatim (corrupted)", datum.get("verbatim", "")),
        ("outcome", WR_LABELS[outcome]),
        ("model", str(model)),
    ])
    details.tables.append(reranking_table(datum, model, float_format, "candidates"))
    return details


@dataclass
class Page:
    """Everything the HTML page shows; serialised as the page's JSON data."""

    title: str
    legend: list[tuple[str, str]]
    summary: dict[str, dict[str, Any]]
    lines: list[dict[str, Any]] = field(default_factory=list)
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        from lmchallenge.stats.output import stat_unit

        units = {k: stat_unit(k) for stats in self.summary.values() for k in stats}
        return {"title": self.title, "legend": [list(x) for x in self.legend],
                "summary": self.summary, "units": units, "lines": self.lines, "note": self.note}


def page_lines(data: Sequence[Datum], renderer: Renderer,
               describe: Callable[[Datum], tuple[str, Details]]) -> list[dict[str, Any]]:
    """The page's lines: per message a label and its tokens, each with its segments,
    a hover text (``tip``) and its details (``d``)."""
    lines = []
    index = 0
    for message in messages(data):
        tokens = []
        for space, datum in spaced(message):
            selected = is_selected(datum)
            tip, details = describe(datum)
            tokens.append({
                "i": index, "sp": space, "sel": selected, "tip": tip, "d": details.to_json(),
                "s": [[text, style.css] for text, style in token_segments(datum, renderer)
                      if text],
            })
            index += 1
        lines.append({"label": message_label(message[0]), "tokens": tokens})
    return lines


def message_label(datum: Datum) -> str:
    """The label of a message's line on a page: ``USER · MESSAGE``, or ``message MESSAGE``
    for a log without users (plain-text corpora have user null)."""
    if datum.get("user") is None:
        return f"message {datum.get('message')}"
    return f"{datum['user']} · {datum.get('message')}"


def flat_stats(stats: dict[str, Any], float_format: str, prefix: str = "") -> dict[str, str]:
    """Nested statistics as ``{"a.b": formatted value}``."""
    out: dict[str, str] = {}
    for key, value in stats.items():
        if isinstance(value, dict):
            out.update(flat_stats(value, float_format, f"{prefix}{key}."))
        else:
            out[prefix + key] = fmt(value, float_format) if value is not None else "-"
    return out


def summary_stats(data: Sequence[Datum], float_format: str) -> dict[str, str]:
    """The ``lmc stats`` summary of ``data`` (humanized), flattened for display."""
    from lmchallenge import stats

    return flat_stats(stats.stats(data, human=True), float_format)


LEGENDS: dict[str, Callable[[float], list[tuple[str, str]]]] = {
    "wc": lambda i: [("c2 b", "predicted @1"), ("c2", "predicted @2-3"),
                     ("c1", "typed before completion"), ("c0", "completed")],
    "we": lambda i: [("c2 b", f"-logp < {i / 5:g}"), ("c2", f"< {2 * i / 5:g}"),
                     ("c3", f"< {3 * i / 5:g}"), ("c1", f"< {4 * i / 5:g}"),
                     ("c1 b", f">= {4 * i / 5:g}"), ("c5", "not scored")],
    "wr": lambda i: [("c9", "correct before and after"), ("c2", "corrected"),
                     ("c1", "miscorrected"), ("c3", "uncorrected")],
}


def build_page(data: Sequence[Datum], game: str | None, entropy_interval: float,
               float_format: str, title: str = "LM Challenge log") -> Page:
    """The page model of a single log."""
    renderer = make_renderer(game, data, entropy_interval)
    note = ""
    if game == "wc":
        def describe(d: Datum) -> tuple[str, Details]:
            return completion_summary(d), completion_details(d, float_format)
    elif game == "we":
        def describe(d: Datum) -> tuple[str, Details]:
            return entropy_summary(d, float_format), entropy_details(d, float_format)
    elif game == "wr":
        model = fit_reranking(data)
        note = f"reranking model: {model}"

        def describe(d: Datum) -> tuple[str, Details]:
            outcome = wr_outcome(d, model)
            return (f"{d['target']}: {WR_LABELS[outcome]} (verbatim {d.get('verbatim')})",
                    reranking_details(d, model, float_format))
    else:
        def describe(d: Datum) -> tuple[str, Details]:
            return d["target"], Details(rows=position_rows(d))
    legend = LEGENDS.get(game or "", lambda i: [])(entropy_interval)
    legend = legend + [("c4 unsel", "not selected (grep)")]
    summary = {"log": summary_stats(data, float_format)} if data else {}
    page = Page(title=title, legend=legend, summary=summary, note=note)
    page.lines = page_lines(data, renderer, describe)
    return page


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath("html", name).read_text(encoding="utf-8")


def script_json(value: Any) -> str:
    """JSON safe inside an HTML ``<script>`` element: ``<``, ``>``, ``&`` and the
    line/paragraph separators are written as ``\\uXXXX`` escapes, so no ``</script>``
    or ``<!--`` can appear in it."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    for char, escape in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                         ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(char, escape)
    return text


def render_page(page: Page) -> str:
    """The standalone HTML document of ``page`` (inline CSS, script and JSON data)."""
    values = {"TITLE": html_escape.escape(page.title), "STYLE": _asset("page.css"),
              "SCRIPT": _asset("page.js"), "DATA": script_json(page.to_json())}
    return re.sub(r"\{\{([A-Z]+)\}\}", lambda m: values[m.group(1)], _asset("page.html"))


def html(log: Iterable[Datum] | str, entropy_interval: float = 10.0, float_format: str = ".4g",
         challenge: str = "auto", max_tokens: int | None = PAGE_TOKENS) -> str:
    """One self-contained HTML page showing an LM Challenge log.

    Args:
        log: datums, or a path of any log form.
        entropy_interval: as :func:`ansi`.
        float_format: Python format spec of numbers on the page.
        challenge: as :func:`ansi`.
        max_tokens: refuse a log of more tokens (None: no limit).
    Returns:
        The HTML document (no external URL; works offline).
    Raises:
        LmcError: the game cannot be told from the log, or it has more than ``max_tokens``.
    """
    data = as_data(log, max_tokens)
    return render_page(build_page(data, game_of(data, challenge, log_name(log)), entropy_interval,
                                  float_format))


# --- CLI --------------------------------------------------------------------------------
