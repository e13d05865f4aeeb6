"""Options typed between PREDICTOR and the game, moved to where the command takes them.

``lmc run PREDICTOR -o '{...}' wc corpus.txt`` reads naturally, but click's groups take their
options before their argument (PREDICTOR) and the subcommand takes its own after its name, so
the options in between would be read as the game's name ("No such command '-o'"). The command
groups of ``lmc run`` and ``lmc-dist run`` reorder their arguments before click parses them,
and a game's option typed where it cannot be taken is refused saying where it goes.
"""

from __future__ import annotations

from collections.abc import Iterable

import click


def value_taking(params: Iterable[click.Parameter]) -> dict[str, bool]:
    """Each option string of ``params`` (``-o``, ``--options``, ``--no-train``) -> whether it
    takes a value (a flag or a counter takes none)."""
    return {name: not (param.is_flag or param.count)
            for param in params if isinstance(param, click.Option)
            for name in (*param.opts, *param.secondary_opts)}


def end_of_options(args: list[str], start: int, known: dict[str, bool]) -> int:
    """The index after the run of options of ``known`` that starts at ``args[start]``, their
    values included (``-o VALUE``, ``-oVALUE``, ``--options=VALUE``, ``-vv``); the run stops
    at the first argument that is not such an option."""
    i = start
    while i < len(args):
        token = args[i]
        long = token.startswith("--")
        name = token.split("=", 1)[0] if long else token[:2]
        if not token.startswith("-") or token in ("-", "--") or name not in known:
            return i
        attached = "=" in token if long else len(token) > 2
        i += 2 if known[name] and not attached else 1
    return i


def predictor_and_game(args: list[str], known: dict[str, bool]) -> tuple[int, int] | None:
    """The indices of PREDICTOR and of GAME (a known game or not) in ``[OPTIONS] PREDICTOR
    [OPTIONS] GAME ...``, the options being those of ``known``; None where ``args`` are not of
    that shape (left to click to report)."""
    predictor = end_of_options(args, 0, known)
    if predictor >= len(args) or args[predictor].startswith("-"):
        return None
    game = end_of_options(args, predictor + 1, known)
    if game >= len(args) or args[game].startswith("-"):
        return None
    return predictor, game


def games_with_option(group: click.Group, option: str) -> list[str]:
    """The names of ``group``'s commands that take ``option`` (``-p``, ``--seed``)."""
    return [name for name, command in group.commands.items()
            if any(option in param.opts + param.secondary_opts for param in command.params)]


class GameGroup(click.Group):
    """A group ``... PREDICTOR GAME ...`` whose arguments are put in the order click takes
    them (:meth:`reordered`) before it parses them; a game's option typed where it cannot
    be taken is refused saying that it goes after the game."""

    games_named = True
    """The message names the games that take the option (else "the games", "GAME")."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, self.reordered(ctx, args))
        except click.NoSuchOption as e:
            games = games_with_option(self, e.option_name)
            if games:
                owners, game = ((" and ".join(games), games[0]) if self.games_named
                                else ("the games", "GAME"))
                e.message = (f"{e.option_name} is an option of {owners}: give it after the "
                             f"game ({ctx.command_path} PREDICTOR {game} {e.option_name} ...)")
                e.possibilities = None
            raise

    def reordered(self, ctx: click.Context, args: list[str]) -> list[str]:
        return args


class OptionsBeforePredictor(GameGroup):
    """A group ``[OPTIONS] PREDICTOR GAME ...`` (``lmc run``) whose own options may also be
    typed between PREDICTOR and GAME: they are moved before PREDICTOR."""

    def reordered(self, ctx: click.Context, args: list[str]) -> list[str]:
        where = predictor_and_game(args, value_taking(self.get_params(ctx)))
        if where is None:
            return args
        predictor, game = where
        return [*args[:predictor], *args[predictor + 1:game], args[predictor], *args[game:]]


class OptionsAfterGame(GameGroup):
    """A group ``PREDICTOR GAME [OPTIONS] ...`` (``lmc-dist run``) whose games' options may
    also be typed before PREDICTOR or between PREDICTOR and GAME: they are moved after GAME,
    except where there is no PREDICTOR GAME to put one after, or it takes a value in one
    game and not in another."""

    games_named = False

    def reordered(self, ctx: click.Context, args: list[str]) -> list[str]:
        where = predictor_and_game(args, self._unambiguous())
        if where is None:
            return args
        predictor, game = where
        return [args[predictor], args[game], *args[:predictor], *args[predictor + 1:game],
                *args[game + 1:]]

    def _unambiguous(self) -> dict[str, bool]:
        """The games' options that take a value in every game or in none (``wc -p`` is a flag,
        ``wr -p`` takes a value: before the game, which it is cannot be told)."""
        each = [value_taking(command.params) for command in self.commands.values()]
        names = {name for options in each for name in options}
        return {name: takes.pop() for name in names
                if len(takes := {options[name] for options in each if name in options}) == 1}


__all__ = ["value_taking", "end_of_options", "predictor_and_game", "games_with_option",
           "GameGroup", "OptionsBeforePredictor", "OptionsAfterGame"]
