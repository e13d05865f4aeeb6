"""The wr game's candidate search (lmchallenge.games.candidates.CandidateSearch): exact answers on
hand-made vocabularies, a plain-Python definition on the real word list, and the
reference's search (lmchallenge==5.2, in its own venv) on the same queries."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest

from conftest import DATA
from lmchallenge.games.typos import ErrorModel, read_vocabulary
from lmchallenge.games.candidates import CandidateSearch

VOCAB = DATA / "vocab" / "american-english.txt"


def nearest(vocab: list[str], typed: str, n: int) -> list[str]:
    """The definition: same-length words by matching positions descending, then list order."""
    seen = list(dict.fromkeys(w for w in vocab if len(w) == len(typed)))
    ranked = sorted(enumerate(seen), key=lambda iw: (-sum(map(str.__eq__, iw[1], typed)), iw[0]))
    return [w for _, w in ranked[:max(n, 0)]]


def test_most_matching_positions_first_then_vocabulary_order():
    search = CandidateSearch(["cat", "cot", "dog", "cab", "cut", "act", "at", "cart"])
    assert search("cat", 10) == ["cat", "cot", "cab", "cut", "act", "dog"]
    assert search("cut", 3) == ["cut", "cat", "cot"]
    assert search("xyz", 2) == ["cat", "cot"]  # nothing matches: vocabulary order


def test_ties_at_the_threshold_keep_the_first_words():
    words = [f"a{c}" for c in "bcdefgh"] + ["zz", "ab"]
    assert CandidateSearch(words)("aq", 3) == ["ab", "ac", "ad"]


def test_other_lengths_duplicates_and_empty_words_are_never_candidates():
    search = CandidateSearch(["", "the", "then", "the", "thy", "she"])
    assert search.size == 4
    assert search("tho", 5) == ["the", "thy", "she"]
    assert search("these", 5) == []
    assert search("the", 0) == [] and search("the", -1) == []


def test_words_of_256_characters_or_more_count_every_match():
    """256 matching positions counted in 8 bits wrapped to 0: the word typed exactly, or
    half right, fell behind words with fewer matches (a vocabulary's URLs, base64)."""
    typed = "a" * 256
    words = ["b" * 256, typed, "a" * 255 + "b", "a" * 128 + "b" * 128]
    search = CandidateSearch(words)
    assert search(typed, 3) == nearest(words, typed, 3) == [typed, "a" * 255 + "b", "a" * 128 + "b" * 128]
    assert search("a" * 300, 1) == [] and CandidateSearch(["a" * 300])("a" * 300, 1) == ["a" * 300]


def test_the_error_score_is_lm_challenge_5_2_s_to_the_last_digit():
    """n log(1 - p) + m log p: with log1p(-p) the scores differed in the last digit where
    the candidate is the typed word (LM Challenge 5.2's logs hold log(1 - p))."""
    import math

    model = ErrorModel(p_anykey=0.1)
    assert model.score("An", "An") == -0.21072103131565256 == 2 * math.log(0.9)
    assert model.score("An", "Ab") == math.log(0.9) + math.log(0.1)


def test_code_points_beyond_latin_1():
    # buckets of uint8, uint16 and uint32 code points; typed characters wider than a bucket's
    # dtype match nothing there
    search = CandidateSearch(["naïve", "naive", "наив", "\U0001f600\U0001f600", "\U0001f600a",
                              "ab", "ке"])
    assert search("naïvé", 5) == ["naïve", "naive"]
    assert search("нaив", 2) == ["наив"]
    assert search("a\U0001f600", 5) == ["\U0001f600\U0001f600", "ab", "\U0001f600a", "ке"]
    assert search("ъ\U0001f600", 2) == ["\U0001f600\U0001f600", "\U0001f600a"]
    assert search("aб", 5) == ["ab", "\U0001f600\U0001f600", "\U0001f600a", "ке"]


@pytest.fixture(scope="module")
def vocabulary() -> list[str]:
    return read_vocabulary(str(VOCAB))


def typed_words(vocabulary: list[str], count: int) -> list[str]:
    rng = random.Random(7)
    typist = ErrorModel(p_anykey=0.3)
    return [typist.corrupt(rng.choice(vocabulary), rng) for _ in range(count)]


def test_real_word_list_as_the_definition(vocabulary):
    search = CandidateSearch(vocabulary)
    for typed in typed_words(vocabulary, 40):
        for n in (1, 7, 100):
            assert search(typed, n) == nearest(vocabulary, typed, n), (typed, n)


# Runs in the reference venv: {"vocab", "queries", "n"} on stdin, answers each query's list.
REFERENCE_DRIVER = r"""
import json, sys
from lmchallenge.core.errors import Search
request = json.load(sys.stdin)
search = Search(words=request["vocab"])
json.dump([search(q, request["n"]) for q in request["queries"]], sys.stdout)
"""


@pytest.mark.reference
def test_same_candidates_as_reference(reference_lmc: Path, vocabulary):
    queries = typed_words(vocabulary, 150)
    out = subprocess.run([str(reference_lmc.parent / "python"), "-I", "-c", REFERENCE_DRIVER],
                         input=json.dumps({"vocab": vocabulary, "queries": queries, "n": 100}),
                         capture_output=True, text=True, check=True)
    search = CandidateSearch(vocabulary)
    assert json.loads(out.stdout) == [search(q, 100) for q in queries]
