"""The reranker fit's threshold is chosen out of fold: weights fitted on the other packages."""

from __future__ import annotations

import random

from bench.fit_rerank import PRECISION, best_per_item, choose_threshold, cross_validated, fit, threshold_for_every_kind
from context.rerank import FEATURES


def _package(rng: random.Random, first: int, items: int, sign: float) -> tuple[list[list[float]], list[int], list[int]]:
    """`items` items of 4 candidates; the right one (if any) has feature 0 at `sign`, the others
    at -`sign`; other features are noise."""
    rows, labels, groups = [], [], []
    for g in range(first, first + items):
        right = rng.randrange(4) if rng.random() < 0.7 else None
        for c in range(4):
            x = [rng.gauss(0, 0.1) for _ in FEATURES]
            x[0] = sign if c == right else -sign
            rows.append(x)
            labels.append(int(c == right))
            groups.append(g)
    return rows, labels, groups


def _packages(signs: list[float]) -> tuple[list[list[float]], list[int], list[int], list[list[int]]]:
    rng = random.Random(3)
    rows, labels, groups, folds = [], [], [], []
    for k, sign in enumerate(signs):
        r, y, g = _package(rng, k * 30, 30, sign)
        rows, labels, groups = rows + r, labels + y, groups + g
        folds.append(list(range(k * 30, k * 30 + 30)))
    return rows, labels, groups, folds


def test_a_signal_every_package_shares_is_shown_out_of_fold():
    rows, labels, groups, folds = _packages([1.0, 1.0, 1.0])
    threshold, tuned = choose_threshold(cross_validated(rows, labels, groups, folds), PRECISION)
    assert threshold < 1.0
    # 70% of the items have a right candidate, and the shared signal finds it in each
    assert tuned["show_rate"] > 0.9 and tuned["precision_when_shown"] > 0.65


def test_a_signal_that_does_not_carry_to_another_package_abstains_out_of_fold():
    """In one package the feature's sign is reversed. Fitted on all three, the weights show
    something in sample; out of fold, every best-scored candidate of the reversed package is
    wrong, and confidently so, which is what a threshold chosen out of fold gets to see."""
    rows, labels, groups, folds = _packages([1.0, 1.0, -1.0])
    everything = [i for f in folds for i in f]
    _, in_sample = choose_threshold(best_per_item(fit(rows, labels, groups, everything), rows, labels, groups, everything), PRECISION)
    out_of_fold = cross_validated(rows, labels, groups, folds)
    reversed_package = out_of_fold[60:]
    assert in_sample["show_rate"] > 0
    assert not any(right for _, right in reversed_package)
    assert all(p > 0.5 for p, _ in reversed_package if p > 0)


def test_the_threshold_shows_the_most_items_that_keep_the_precision():
    """Scores 0.9..0.1 with right answers at the top two and at 0.5: showing down to 0.2 keeps
    35% (3 right of 8 shown, 37.5%); down to 0.1 it would not (3 of 9)."""
    best = [(0.9, True), (0.8, True), (0.7, False), (0.6, False), (0.5, True), (0.4, False), (0.3, False), (0.2, False), (0.1, False)]
    threshold, tuned = choose_threshold(best, 0.35)
    assert threshold == 0.2
    assert tuned["show_rate"] == 8 / 9 and tuned["precision_when_shown"] == 3 / 8


def test_no_threshold_reaches_the_precision_shows_nothing():
    threshold, tuned = choose_threshold([(0.9, False), (0.5, False), (0.2, True)], 0.5)
    assert threshold == 1.0 and tuned["show_rate"] == 0.0


def test_every_kind_of_item_keeps_the_precision_the_hardest_decides():
    """An easy kind (right at every score) would carry a hard one (right only at the top) down
    to 0.1 over the mix; for every kind, the hard one's own threshold holds."""
    easy = [(p / 10, True) for p in range(1, 10)]
    hard = [(0.9, True), (0.8, False), (0.7, False), (0.6, False), (0.5, False), (0.4, False)]
    mixed_threshold, _ = choose_threshold(easy + hard, 0.5)
    threshold, tuned = threshold_for_every_kind(easy + hard, ["easy"] * len(easy) + ["hard"] * len(hard), 0.5)
    assert mixed_threshold == 0.1
    assert threshold == 0.8  # the hard kind: 1 right of 2 shown
    assert tuned["precision_when_shown"] == 3 / 4  # easy 0.8 and 0.9, hard 0.9 right; hard 0.8 wrong
