"""Dask worker resources for the partition tasks (``lmc-dist run --resources GPU=1``).

A partition task hosts the model; with ``--resources`` it runs only on workers that declare
at least those amounts (``dask worker ADDR --resources "GPU=1"``; Dask's abstract resources,
https://distributed.dask.org/en/stable/resources.html), e.g. the workers of a machine with a
GPU when the model runs with ``--device cuda``.  Each task holds the amounts while it runs,
so a worker declaring ``GPU=1`` runs one partition task at a time.  The workers of the
embedded cluster all declare the amounts given.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lmchallenge.errors import LmcError

Resources = dict[str, float]


def parse_resources(text: str) -> Resources:
    """``"GPU=1"`` or ``"GPU=1,MEMORY=8e9"`` (commas or spaces between) to ``{name: amount}``.

    Raises:
        ValueError: an item is not ``NAME=AMOUNT`` with a positive number, or a name repeats.
    """
    resources: Resources = {}
    for item in text.replace(",", " ").split():
        name, sep, amount = item.partition("=")
        try:
            value = float(amount)
        except ValueError:
            value = float("nan")
        if not sep or not name or not value > 0:
            raise ValueError(f"{item!r} is not NAME=AMOUNT with a positive AMOUNT (e.g. GPU=1)")
        if name in resources:
            raise ValueError(f"{name} is given twice")
        resources[name] = value
    if not resources:
        raise ValueError("no resources given (e.g. GPU=1)")
    return resources


def format_resources(resources: Mapping[str, float]) -> str:
    """``{"GPU": 1.0}`` as ``GPU=1`` (the form ``dask worker --resources`` takes)."""
    return " ".join(f"{name}={amount:g}" for name, amount in resources.items())


def offering(workers: Mapping[str, Mapping[str, Any]], resources: Mapping[str, float]) -> list[str]:
    """The addresses of the workers (``Client.scheduler_info()["workers"]``) that declare at
    least ``resources``."""
    return [address for address, info in workers.items()
            if all((info.get("resources") or {}).get(name, 0) >= amount
                   for name, amount in resources.items())]


def require_offered(workers: Mapping[str, Mapping[str, Any]], resources: Mapping[str, float],
                    where: str) -> int:
    """How many workers offer ``resources``.

    Raises:
        LmcError: none does (the partition tasks would wait for ever), naming how to start one.
    """
    found = len(offering(workers, resources))
    if not found:
        wanted = format_resources(resources)
        raise LmcError(f"no worker of {where} declares the resources {wanted} that --resources asks "
                       f"for ({len(workers)} workers); start workers with "
                       f"`dask worker SCHEDULER --resources \"{wanted}\"`")
    return found
