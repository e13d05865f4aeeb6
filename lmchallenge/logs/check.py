"""One log datum checked against the LM Challenge 5.x log schema (``log.schema`` beside this
module, JSON Schema 2020-12; docs/formats.md, "Log"): what ``lmc validate`` says of it, and
what every reader says of a datum it cannot take; and a log's files checked datum by datum
(:func:`validate_files`, :func:`checked`).

The schema is checked twice over: first by ``jsonschema-rs`` (a compiled validator, about
0.4 us a datum), which only lets a datum through; a datum it does not let through, or one
whose Python types it does not tell apart as the readers do, is judged by ``jsonschema``
(about 40 us a datum), whose message is the one given (BENCHMARKS.md, "validate").
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable, Iterator
from typing import Any

import jsonschema
import jsonschema_rs

from lmchallenge.errors import InputError
from lmchallenge.logs.schema import json_schema, payload_games


def schema() -> dict[str, Any]:
    """The log schema, as a JSON object (:func:`lmchallenge.logs.schema.json_schema`)."""
    return json_schema()


def _is_integer(checker: Any, instance: Any) -> bool:
    """JSON Schema's ``integer`` as the log readers take it: a JSON number written without a
    fraction or exponent (``7``; not ``7.0`` nor ``1e30``, which JSON Schema counts as
    integers but which Python reads as floats, and which ``lmc stats`` refuses)."""
    return isinstance(instance, int) and not isinstance(instance, bool)


_LogValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer))


@functools.cache
def _validator() -> jsonschema.protocols.Validator:
    return _LogValidator(schema())


@functools.cache
def _fast_validator() -> jsonschema_rs.Draft202012Validator:
    return jsonschema_rs.Draft202012Validator(schema())


@functools.cache
def _properties_of_type(kind: str) -> tuple[str, ...]:
    """The schema's properties whose type is, or may be, ``kind`` (a JSON Schema type)."""
    def types(spec: dict[str, Any]) -> list[str]:
        found = spec.get("type", [])
        return found if isinstance(found, list) else [found]
    return tuple(name for name, spec in schema()["properties"].items() if kind in types(spec))


def _surely_valid(datum: Any) -> bool:
    """Whether ``datum`` is valid by the schema as :func:`_schema_problem` judges it, decided
    quickly: ``jsonschema-rs`` lets it through, no property that may be an integer is a float
    (it takes ``7.0`` for an integer, as JSON Schema does; the readers do not,
    :func:`_is_integer`) and every array property is a list of lists (it takes a tuple for an
    array; ``jsonschema`` only a list).  False means "ask ``jsonschema``", not "invalid"."""
    try:
        if not _fast_validator().is_valid(datum):
            return False
    except ValueError:        # a type with no JSON form (bytes, NumPy scalars, int keys)
        return False
    if any(isinstance(datum.get(key), float) for key in _properties_of_type("integer")):
        return False
    for key in _properties_of_type("array"):
        value = datum.get(key)
        if value is not None and (type(value) is not list
                                  or any(type(item) is not list for item in value)):
            return False
    return True


def _field(error: jsonschema.ValidationError) -> str:
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    return path.lstrip(".") or "(datum)"


def problem(datum: Any) -> str | None:
    """What is wrong with one datum (the field and the schema's complaint, or a number that
    is not finite), or None."""
    if _surely_valid(datum):    # (a number can be only where the schema allows one)
        without = _properties_without_numbers()
        return _non_finite({key: value for key, value in datum.items() if key not in without})
    return _schema_problem(datum)


@functools.cache
def _properties_without_numbers() -> frozenset[str]:
    """The schema's properties that hold no ``number`` at any depth (an ``integer`` is
    not a float in a datum :func:`_surely_valid` lets through): no NaN or infinity can be
    in them, and :func:`problem` does not look (``completions``' strings were 3 of
    ``lmc validate``'s 6 s for a ``wc`` log of 157,492 datums)."""
    return frozenset(name for name, spec in schema()["properties"].items()
                     if '"number"' not in json.dumps(spec))


def _schema_problem(datum: Any) -> str | None:
    """:func:`problem`, judged by ``jsonschema`` alone (and the finite numbers)."""
    error = jsonschema.exceptions.best_match(_validator().iter_errors(datum))
    if error is None:
        return _non_finite(datum)
    return f"field {_field(error)}: {error.message}"


def _non_finite(value: Any) -> str | None:
    """``field F: N is not a finite number`` for the first NaN or infinity in ``value``
    (JSON has no such numbers: ``NaN``/``Infinity`` in a jsonl log, or NaN in a Parquet
    float column, are read as such), or None."""
    found = _first_non_finite(value)
    if found is None:
        return None
    steps, number = found
    return f"field {''.join(steps).lstrip('.') or '(datum)'}: {number!r} is not a finite number"


def _first_non_finite(value: Any) -> tuple[list[str], float] | None:
    """The first NaN or infinity in ``value``, at any depth, with the steps to it (``.key``,
    ``[index]``; made only on the way back from one found), or None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else ([], value)
    if isinstance(value, dict):
        items: Iterable[tuple[Any, Any]] = value.items()
        step = ".{}"
    elif isinstance(value, (list, tuple)):
        items, step = enumerate(value), "[{}]"
    else:
        return None
    for key, item in items:
        if isinstance(item, float) and math.isfinite(item):
            continue
        if isinstance(item, (float, dict, list, tuple)):
            found = _first_non_finite(item)
            if found is not None:
                found[0].insert(0, step.format(key))
                return found
    return None


def validate_files(files: Iterable[tuple[str, Iterable[Any]]]) -> int:
    """Check every datum of the files of one log in order (a run directory's parts:
    ``(file name, datums)`` pairs) against the schema (:func:`problem`), each bad datum
    named by its file and its number there, and every datum of the one game of the first
    (``lmc validate``; :func:`lmchallenge.analysis.validate.validate` for one file).

    Returns:
        The number of datums checked, in all.
    Raises:
        InputError: ``NAME:N: field F: what is wrong`` for the first bad datum (N counts
            datums from 1: the line number of a jsonlines log without blank lines), or for
            the first datum of another game than the first datum's.
    """
    return sum(1 for _ in checked(files))


def checked(files: Iterable[tuple[str, Iterable[Any]]]) -> Iterator[Any]:
    """The datums of the files of one log, in order, each checked as :func:`validate_files`
    checks it before it is yielded (``lmc convert``: no log is written that ``lmc validate``
    refuses).

    Raises:
        InputError: as :func:`validate_files`, when the bad datum is reached.
    """
    games = None
    for name, data in files:
        for n, datum in enumerate(data, start=1):
            reason = problem(datum)
            found = payload_games(datum) if reason is None and isinstance(datum, dict) else []
            if found:      # (a datum without payload goes with any game)
                games = games or found
                if found != games:
                    reason = (f"a datum of {'/'.join(found)} after datums of "
                              f"{'/'.join(games)}: a log holds one game")
            if reason is not None:
                raise InputError(name, n, reason)
            yield datum
