"""One log datum checked against the LM Challenge 5.x log schema (``log.schema`` beside this
module, JSON Schema 2020-12; docs/formats.md, "Log"): what ``lmc validate`` says of it, and
what every reader says of a datum it cannot take.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from typing import Any

import jsonschema

from lmchallenge.logs.schema import json_schema


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


def _field(error: jsonschema.ValidationError) -> str:
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    return path.lstrip(".") or "(datum)"


def problem(datum: Any) -> str | None:
    """What is wrong with one datum (the field and the schema's complaint, or a number that
    is not finite), or None."""
    error = jsonschema.exceptions.best_match(_validator().iter_errors(datum))
    if error is None:
        return _non_finite(datum)
    return f"field {_field(error)}: {error.message}"


def _non_finite(value: Any, path: str = "") -> str | None:
    """``field F: N is not a finite number`` for the first NaN or infinity in ``value``
    (JSON has no such numbers: ``NaN``/``Infinity`` in a jsonl log, or NaN in a Parquet
    float column, are read as such), or None."""
    if isinstance(value, float):
        if math.isfinite(value):
            return None
        return f"field {path.lstrip('.') or '(datum)'}: {value!r} is not a finite number"
    if isinstance(value, dict):
        items: Iterable[tuple[str, Any]] = ((f".{key}", item) for key, item in value.items())
    elif isinstance(value, (list, tuple)):
        items = ((f"[{index}]", item) for index, item in enumerate(value))
    else:
        return None
    for step, item in items:
        found = _non_finite(item, path + step)
        if found is not None:
            return found
    return None
