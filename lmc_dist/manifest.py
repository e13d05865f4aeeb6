"""The run directory's ``_manifest.json``: what a run is and which partitions are finished.

It is rewritten atomically (by the client, the run dir's one writer) as the client learns
that partitions have finished (:class:`Saver`: at once while a save is cheap, and no more
than a tenth of the client's time once the manifest is large); the partition's file in
``_temporary/`` is the record itself (:mod:`lmchallenge.logs.rundir`), so even a client
killed before it could save the manifest loses no finished partition, and ``--resume`` runs
only what is missing.
"""

from __future__ import annotations

import json
import os
import platform
import time
import uuid
from datetime import datetime, timezone
from importlib import metadata
from typing import Any, Literal, NotRequired, TypedDict

from lmchallenge.errors import LmcError
from lmchallenge.logs.files import atomic_path
from lmchallenge.logs.rundir import MANIFEST

from lmc_dist.partition import Partition, ScanResult

class PartitionRecord(TypedDict, total=False):
    """One partition in the manifest: its cut (the fields of :class:`Partition`), its part
    file, and what became of it.

    Attributes:
        index, start, end, first_line, first_message, messages, characters, users: the cut
            (:class:`lmc_dist.partition.Partition`; ``start``/``end`` are byte offsets).
        file: the part file's name (``part-NNNNN.parquet``/``.jsonl.gz``).
        state: ``pending``, ``done`` or ``failed``.
        rows: log datums written (done); bytes: the part file's size (done; readers refuse
            a part of another size); elapsed: seconds the task took; began: when it started
            (ISO 8601, UTC); worker: the Dask worker's address; error: why it failed.
    """

    index: int
    start: int
    end: int
    first_line: int
    first_message: int
    messages: int
    characters: int
    users: int
    file: str
    state: Literal["pending", "done", "failed"]
    rows: int
    bytes: int
    elapsed: float
    began: str
    worker: str
    error: str | None


class Manifest(TypedDict):
    """``_manifest.json``: what ran and which partitions are done (docs/formats.md, "Run
    directory").

    Attributes:
        game, game_options, seed: the game (``wc``/``we``/``ce``/``wr``), its options and
            the wr corruption seed (None for other games).
        predictor: the model's command line or ``module:Class``.
        corpus, corpus_sha256, corpus_format: the input, the SHA-256 of its bytes, and
            ``text``/``json``.
        train: whether the model was trained per message; partition_chars: the target
            partition size; format: ``parquet`` or ``jsonl``.
        messages, characters: totals of the corpus.
        versions: Python's and the packages' versions; started, finished: ISO 8601 UTC
            times (``finished`` is None until the run commits).
        run: the run's identity (a random hex string), kept by ``--resume`` and new when a run
            dir is started anew: the tasks of another run write nothing there.
        partitions: one record per partition, in corpus order.
        partition_size: the size the corpus was cut at (:mod:`lmc_dist.sizing`).
        predictor_files: the files the model's command names (weights, vocabulary), by
            absolute path, with their size and modification time when the run began
            (:mod:`lmchallenge.model.files`; ``--resume`` warns if one changed).
        user_type: ``string`` or ``integer``: the type of the users in the Parquet parts
            (absent in runs of an lmc-dist before it was recorded: strings); ``mixed`` for
            jsonl parts of a corpus with both.
        vocabulary_sha256: ``wr``: the SHA-256 of the word list's bytes (the candidates come
            from it; ``--resume`` refuses another); None for the other games.
    """

    game: str
    game_options: dict[str, Any]
    seed: int | None
    predictor: str
    corpus: str
    corpus_sha256: str
    corpus_format: str
    train: bool
    partition_chars: int
    format: str
    messages: int
    characters: int
    versions: dict[str, str]
    started: str
    finished: str | None
    run: NotRequired[str]
    partitions: list[PartitionRecord]
    partition_size: NotRequired[dict[str, Any]]
    predictor_files: NotRequired[dict[str, Any]]
    user_type: NotRequired[str]
    vocabulary_sha256: NotRequired[str | None]


IDENTITY_KEYS = ("game", "game_options", "predictor", "predictor_options", "corpus_sha256",
                 "corpus_format", "train", "partition_chars", "format", "vocabulary_sha256")
LATER_IDENTITY_KEYS = ("predictor_options", "vocabulary_sha256")
"""Identity keys an earlier lmc-dist did not record: a run dir without one resumes."""

IDENTITY_DIFFERS = {
    "game": "the game differs", "game_options": "the game's options differ",
    "predictor": "the model (PREDICTOR) differs",
    "predictor_options": "the model's -o options differ",
    "corpus_sha256": "the corpus (its contents) differs", "corpus_format": "--format differs",
    "train": "--train differs", "partition_chars": "--partition-chars differs",
    "format": "--part-format differs",
    "vocabulary_sha256": "the vocabulary (its contents) differs"}
"""What differs, in a user's words, for each of :data:`IDENTITY_KEYS` (the error of a resume)."""


def versions() -> dict[str, str]:
    """Versions of Python and of the packages that shape the results."""
    found = {"python": platform.python_version()}
    for package in ("lmchallenge-dist", "dask", "distributed", "numpy", "scipy", "pyarrow",
                    "regex", "emoji"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    return found


def new_manifest(*, game: str, game_options: dict, predictor: str, corpus: str,
                 scan: ScanResult, train: bool, partition_chars: int, out_format: str,
                 part_names: list[str]) -> Manifest:
    """A manifest with every partition pending."""
    return {
        "game": game, "game_options": game_options, "seed": game_options.get("seed"),
        "predictor": predictor, "corpus": corpus, "corpus_sha256": scan.sha256,
        "corpus_format": scan.corpus_format, "train": train, "partition_chars": partition_chars,
        "format": out_format, "messages": scan.messages, "characters": scan.characters,
        "versions": versions(), "started": now(), "finished": None, "run": uuid.uuid4().hex,
        "partitions": [dict(p.to_json(), file=name, state="pending")
                       for p, name in zip(scan.partitions, part_names)],
    }


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def load(run_dir: str) -> Manifest | None:
    """The run dir's manifest, or None if it has none."""
    path = os.path.join(run_dir, MANIFEST)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def save(run_dir: str, manifest: Manifest) -> None:
    """Write the manifest atomically (:func:`text`)."""
    with atomic_path(os.path.join(run_dir, MANIFEST)) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text(manifest))


def text(manifest: Manifest) -> str:
    """The manifest as JSON: its fields one a line (keys sorted), then ``partitions``, one
    record a line.  JSON with ``indent`` is encoded in pure Python: 0.10 s for 10,000
    partitions, against 0.04 s for records encoded one by one by the C encoder."""
    head = json.dumps({k: v for k, v in manifest.items() if k != "partitions"}, indent=1,
                      sort_keys=True)
    rows = ",\n".join("  " + json.dumps(p, sort_keys=True) for p in manifest.get("partitions", []))
    opening = head[:-2] + ",\n" if head != "{}" else "{\n"
    return f'{opening} "partitions": [\n{rows}\n ]\n}}\n'


class Saver:
    """Saves a run's manifest as its partitions end, so that a save costs no more than a
    :attr:`share` of the client's time: after a save that took ``t`` seconds, the next
    waits until ``t * (1 / share - 1)`` seconds have passed (QA: with 5,500 partitions, a
    save of the whole manifest each time a partition ended took the client all its time, so
    that the run never finished and the manifest trailed the finished files by thousands).
    A small manifest (a few ms to save) is saved as each partition ends.

    Attributes:
        pending: a change not saved yet (:meth:`flush` saves it).
    """

    share = 0.1

    def __init__(self, run_dir: str) -> None:
        self.run_dir = run_dir
        self.pending = False
        self._next = 0.0     # time.monotonic() after which a change is saved at once

    def changed(self, manifest: Manifest) -> None:
        """``manifest`` changed: saved now, or at a later change or :meth:`flush`."""
        if time.monotonic() >= self._next:
            self.save(manifest)
        else:
            self.pending = True

    def flush(self, manifest: Manifest) -> None:
        """Save a pending change."""
        if self.pending:
            self.save(manifest)

    def save(self, manifest: Manifest) -> None:
        """Save ``manifest`` now."""
        began = time.monotonic()
        save(self.run_dir, manifest)
        ended = time.monotonic()
        self._next = ended + (ended - began) * (1 / self.share - 1)
        self.pending = False


def check_resumable(old: Manifest, new: Manifest) -> None:
    """Refuse to resume a run with a different game, model (its command, or its class and
    ``-o`` options), corpus or partitioning.

    Raises:
        LmcError: naming the first difference.
    """
    for key in IDENTITY_KEYS:
        if key in LATER_IDENTITY_KEYS and key not in old:
            continue
        if old.get(key) != new.get(key):
            raise LmcError(f"cannot resume: {IDENTITY_DIFFERS[key]} from the run in this "
                           f"directory ({key} {old.get(key)!r} there, {new.get(key)!r} now); use "
                           "a new --run-dir")
    # the same corpus and --partition-chars, cut otherwise (another version of lmc-dist): a
    # finished part file would stand for other lines
    if _cuts(old) != _cuts(new):
        raise LmcError("cannot resume: the corpus is cut into other partitions than the run in "
                       f"this directory ({len(old['partitions'])} partitions there, "
                       f"{len(new['partitions'])} now; written by lmc-dist "
                       f"{old.get('versions', {}).get('lmchallenge-dist', '?')}); "
                       "use a new --run-dir")


def _cuts(manifest: dict[str, Any]) -> list[tuple[int, int]]:
    return [(p["start"], p["end"]) for p in manifest["partitions"]]


def partitions_of(manifest: Manifest) -> list[Partition]:
    """The partitions recorded in ``manifest``."""
    fields = Partition.__dataclass_fields__
    return [Partition(**{k: p[k] for k in fields}) for p in manifest["partitions"]]


