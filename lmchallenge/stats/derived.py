"""Figures derived from ``lmc stats`` ones, with their units (issue 14).

* **Cross-entropy** ``entropy.mean`` is in nats (natural-log probabilities, as models
  report them) per scored token: per word for ``we``, per character for ``ce``.  Derived:
  ``entropy.bits`` = nats / ln 2 (bits per word or per character) and
  ``entropy.perplexity`` = exp(nats) (per word or per character).  Both are increasing
  functions of the mean, so a bootstrap interval of the mean (percentile or BCa, which
  respect monotone transformations) maps to theirs (:func:`derived_intervals`).
* **Keystroke savings rate** ``completion.ksr`` (``wc``): as the Presage simulator defines
  it (Presage ``src/simulator/simulator.cpp``, ``Simulator::getKSR``: ``KSR = 1 - (ki +
  ks) / kn``; kn = keystrokes without prediction, every word and a space after it; ki =
  keystrokes with prediction: the characters typed before the word is offered, plus one
  to select it, which also types the space).  Here a word is offered when its rest is
  among the first two completions (``lmc stats``' completion rule), so per token ``kn =
  len + 1`` and ``ki = kn - saved``: KSR = completion characters / (characters + tokens).
  Presage's constant ``ks`` (one selection keystroke counted once per run) is left out.
  ``completion.characters`` (5.x) is the same saving over characters alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

LN2 = math.log(2)


def entropy_unit(game: str | None) -> str:
    """What one scored token of a log is: ``word`` (``we``), ``character`` (``ce``)."""
    return {"we": "word", "ce": "character"}.get(game or "", "token")


def entropy_game(game: str | None, tokens: int, characters: int) -> str | None:
    """``ce`` for an entropy log (detected as ``we``: the datums look alike) whose every
    target is one character, else ``game`` (a ``we`` log of one-letter words only would be
    taken for ``ce``: its units then say per character, which is also true)."""
    if game == "we" and tokens and tokens == characters:
        return "ce"
    return game


def unit_of(key: str, game: str | None) -> str | None:
    """The unit of a human ``lmc stats`` figure (key path), or None for a plain fraction."""
    if key == "entropy.mean":
        return f"nats per {entropy_unit(game)}"
    if key == "completion.ksr":
        return "fraction of keystrokes"
    if key == "completion.characters":
        return "fraction of characters"
    return None


def derived_figures(values: Mapping[str, float], game: str | None) -> dict[str, float]:
    """``{"entropy.bits": .., "entropy.perplexity": ..}`` from ``values["entropy.mean"]``
    (nats), empty when there is no entropy."""
    mean = values.get("entropy.mean")
    if mean is None or not math.isfinite(mean):
        return {}
    return {"entropy.bits": mean / LN2, "entropy.perplexity": perplexity(mean)}


def perplexity(mean_nats: float) -> float:
    """``exp`` of a mean cross-entropy in nats (``inf`` past the largest float)."""
    try:
        return math.exp(mean_nats)
    except OverflowError:
        return math.inf


def derived_intervals(ci: Mapping[str, Sequence[float]]) -> dict[str, list[float]]:
    """The intervals of :func:`derived_figures` from that of ``entropy.mean``."""
    if "entropy.mean" not in ci:
        return {}
    low, high = ci["entropy.mean"]
    return {"entropy.bits": [low / LN2, high / LN2], "entropy.perplexity": [perplexity(low), perplexity(high)]}


def describe_units(game: str | None) -> dict[str, Any]:
    """The units of the derived figures (for ``lmc stats --derived``)."""
    unit = entropy_unit(game)
    return {"entropy.mean": f"nats per {unit}", "entropy.bits": f"bits per {unit}",
            "entropy.perplexity": f"per {unit}", "completion.ksr": "fraction of keystrokes (Presage KSR)"}
