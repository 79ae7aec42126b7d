"""kohaku.tasks.score.text_match against a faithful copy of the official SQuAD v1.1 evaluation functions."""

from __future__ import annotations

import re
import string
from collections import Counter

import pytest

from kohaku.tasks.score.text_match import exact_match, normalize_answer, token_f1


# --- the reference: evaluate-v1.1.py's functions, kept as the script has them (test only) ---

def ref_normalize_answer(s):
    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    def lower(text):
        return text.lower()

    return white_space_fix(remove_articles(remove_punc(lower(s))))


def ref_f1_score(prediction, ground_truth):
    prediction_tokens = ref_normalize_answer(prediction).split()
    ground_truth_tokens = ref_normalize_answer(ground_truth).split()
    common = Counter(prediction_tokens) & Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    f1 = (2 * precision * recall) / (precision + recall)
    return f1


def ref_exact_match_score(prediction, ground_truth):
    return ref_normalize_answer(prediction) == ref_normalize_answer(ground_truth)


def ref_metric_max_over_ground_truths(metric_fn, prediction, ground_truths):
    scores_for_ground_truths = []
    for ground_truth in ground_truths:
        score = metric_fn(prediction, ground_truth)
        scores_for_ground_truths.append(score)
    return max(scores_for_ground_truths)


# --- cases: (prediction, ground truths) ---

CASES = [
    ("Denver Broncos", ["Denver Broncos", "The Denver Broncos"]),
    ("the Denver Broncos", ["Denver Broncos"]),
    ("Broncos", ["Denver Broncos"]),
    ("Denver Broncos won", ["Denver Broncos"]),
    ("Carolina Panthers", ["Denver Broncos"]),
    ("", ["Denver Broncos"]),
    ("", [""]),
    ("the", ["a"]),                     # both normalise to "": EM 1, F1 0
    ("...", ["!!"]),
    ("Denver", [""]),
    ("A.B.C.", ["abc"]),                # punctuation removed inside words
    ("U.S.", ["us"]),
    ("an apple", ["apple"]),
    ("anthem", ["them"]),               # articles only as whole words
    ("theater", ["the ater"]),
    ("Them and the others", ["them others and"]),
    ("the the the cat", ["cat cat"]),   # multiset counts: one shared "cat"
    ("cat cat dog", ["cat dog dog"]),
    ("  New\tYork \n City ", ["new york city"]),
    ("New-York", ["newyork"]),          # a hyphen is removed, not turned into a space
    ("$1,577.00", ["1577.00"]),
    ("1,577", ["1577"]),
    ("24.26%", ["24.26"]),
    ("Ünïcödé café", ["ünïcödé CAFÉ"]),
    ("“quoted” answer", ['"quoted" answer']),  # curly quotes are not string.punctuation
    ("naïve — approach", ["naïve approach"]),  # an em dash stays a token
    ("THE END", ["end"]),
    ("l'homme", ["lhomme"]),
    ("Éthe a", ["éthe"]),               # \b is Unicode-aware: "éthe" keeps its "the"
    ("1 2 3", ["3 2 1", "1 2"]),
    ("Paris", ["London", "Paris, France", "paris"]),
    ("Mount Everest in Nepal", ["Everest", "Mount Everest"]),
    ("ß", ["SS"]),                      # lower() does not case-fold ß
    ("ΑΒΓ", ["αβγ"]),
]


@pytest.mark.parametrize("pred,truths", CASES)
def test_matches_reference(pred, truths):
    assert normalize_answer(pred) == ref_normalize_answer(pred)
    for t in truths:
        assert normalize_answer(t) == ref_normalize_answer(t)
    em = exact_match(pred, truths)
    f1 = token_f1(pred, truths)
    assert em == float(ref_metric_max_over_ground_truths(ref_exact_match_score, pred, truths))
    assert f1 == pytest.approx(float(ref_metric_max_over_ground_truths(ref_f1_score, pred, truths)),
                               abs=1e-12)
    assert isinstance(em, float) and isinstance(f1, float)


def test_hand_values():
    assert normalize_answer("The  Quick, brown FOX!") == "quick brown fox"
    assert normalize_answer("An a the") == ""
    assert exact_match("the Denver Broncos", ["Denver Broncos"]) == 1.0
    assert token_f1("Broncos", ["Denver Broncos"]) == pytest.approx(2 / 3)
    assert token_f1("Denver Broncos won", ["Denver Broncos"]) == pytest.approx(0.8)
    assert token_f1("cat cat dog", ["cat dog dog"]) == pytest.approx(2 / 3)


def test_empty_normalised_strings_em_1_f1_0():
    assert exact_match("", [""]) == 1.0
    assert token_f1("", [""]) == 0.0
    assert exact_match("The.", ["an"]) == 1.0
    assert token_f1("The.", ["an"]) == 0.0


def test_max_over_ground_truths():
    assert token_f1("Mount Everest", ["Everest", "Mount Everest", "K2"]) == 1.0
    assert exact_match("K2", ["Everest", "k2"]) == 1.0


def test_no_truths_and_none():
    assert exact_match("x", []) == 0.0
    assert token_f1("x", []) == 0.0
    assert exact_match(None, [""]) == 1.0
    assert token_f1(None, ["x"]) == 0.0
    assert exact_match("Paris", "paris") == 1.0   # a single string is one ground truth
    assert token_f1("Paris France", "paris") == pytest.approx(2 / 3)
