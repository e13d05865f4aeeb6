"""The built-in n-gram model doing each prediction K times: a CPU-bound benchmark model.

    python benchmarks/repeat_ngram.py MODEL_FILE --repeat K [--top 20]

It serves :class:`lmchallenge.model.ngram.NgramModel` over the line protocol exactly as
``lmc-ngram serve MODEL_FILE`` does (same answers, same ``train``/``clear``), except that
``predict`` computes its answer ``K`` times and returns the last: the per-query cost is K
times the n-gram model's own honest CPU work, in the model process, while the evaluator's
work per query is unchanged.  It stands in for a model that is more expensive per query than
the n-gram model (a large n-gram or a neural model on a CPU) in ``benchmarks/scaling.py``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from lmchallenge.model.wire import Result
from lmchallenge.model import serve as protocol
from lmchallenge.model.ngram import NgramModel


class RepeatedNgram(NgramModel):
    """An :class:`NgramModel` whose ``predict`` does its work ``repeat`` times."""

    def __init__(self, model: str, repeat: int, top: int = 20):
        super().__init__(model, top=top)
        self.repeat = max(1, repeat)

    def predict(self, context: str, candidates: Sequence[str] | None) -> Result:
        for _ in range(self.repeat - 1):
            super().predict(context, candidates)
        return super().predict(context, candidates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model_file")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args()
    protocol.serve(RepeatedNgram(args.model_file, args.repeat, top=args.top))


if __name__ == "__main__":
    main()
