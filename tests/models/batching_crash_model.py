"""A model served by :func:`lmchallenge.model.serve.serve` (answers flushed in batches) that
dies at once, as in a segfault (``os._exit(3)``: answers not yet flushed are lost), on the
first context containing ``--crash-word``; until then it scores every candidate -1.

Usage: python batching_crash_model.py --crash-word WORD
"""

import argparse
import os
import sys

from lmchallenge.model.serve import serve


class CrashingModel:
    def __init__(self, crash_word: str):
        self.crash_word = crash_word

    def predict(self, context, candidates):
        if self.crash_word in context:
            sys.stderr.write(f"batching crash model: dying on {self.crash_word!r}\n")
            sys.stderr.flush()
            os._exit(3)
        return [(c, -1.0) for c in candidates or ["x"]]


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--crash-word", required=True)
    serve(CrashingModel(parser.parse_args().crash_word))
