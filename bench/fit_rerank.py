"""Fit the reranker's weights (`context/data/rerank.json`) on the tuning packages, never the evaluation.

Asks a real `lsp_server --stdio` (all components on, no abstaining) for `glm5.explainContext`
at blanked lines of `quality_sets.TUNING_PACKAGES` (half lines using a name from another file of
the package, half random code lines; with `--typed-per-package`, also lines of the first kind
typed up to the cursor, as `repo-typed`), labels every candidate 1 when it equals what the
completion should insert (the blanked line, or its untyped rest),
and fits a logistic regression (numpy: full-batch gradient descent with L2, features as
`context.rerank.FEATURES`). The abstain threshold is then chosen for coverage at a precision:
the lowest one at which `--precision` (35%) of the shown answers are right for every kind of
item (cross-file, random and typed lines; the hardest kind decides), about the share of
shown suggestions that users of completion tools accept: a stricter one shows so little that
the tool looks dead, a looser one mostly junk. It is chosen on leave-one-package-out predictions (each
package's items scored by weights fitted on the other packages), because the evaluation is on
packages the weights never saw: a threshold chosen on the fitted items themselves picks out a
handful of lucky ones (on 515 items: 0.19% shown, all right; out of fold, the top 1% of items
held no right answer). The shipped weights are then fitted on every item, and name the model
they were fitted for (`weights_identity`): the server uses them for that model only.

Usage: python -m bench.fit_rerank [--model DIR] [--per-package 40] [--typed-per-package 0]
                                [--out context/data/rerank.json] [--dump FILE] [--from-dump FILE]

`--from-dump FILE` fits on the items explained in FILE (written by `--dump`); items past its end
(say, typed items added since) are asked of a server first.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import tempfile
from pathlib import Path

import numpy as np

from bench.bench_quality import ROWS
from bench.quality_client import RowServer
from bench.quality_sets import TUNING_PACKAGES, Item, package_items, package_random_items, package_typed_items
from context.rerank import FEATURES, WEIGHTS_PATH, Features, Reranker, names_target
from model_runtime.fingerprint import weights_identity

REPO = Path(__file__).resolve().parents[1]
# The likelihood features' weights stay >= 0: a candidate the model finds likelier never scores
# lower, all else equal. Unconstrained, the total log-likelihood's weight came out negative
# (it and the token count move together), and the longer of two calls with the same evidence won
# for being less likely.
LIKELIHOOD = (FEATURES.index("mean_logprob"), FEATURES.index("logprob"))
PRECISION = 0.35  # about what users accept of the suggestions they are shown (Copilot's ~30%), with a margin


def fit_logistic(
    rows: list[list[float]], labels: list[int], l2: float = 1e-3, epochs: int = 3000, rate: float = 0.5,
    nonnegative: tuple[int, ...] = (),
) -> tuple[list[float], float]:
    """Weights and bias minimising the mean log-loss + l2/2 |w|^2 (positives weighted to balance);
    full-batch gradient descent, projected so that the weights at `nonnegative` stay >= 0."""
    x, y = np.asarray(rows, dtype=np.float64), np.asarray(labels, dtype=np.float64)
    positives = max(1.0, y.sum())
    weight = np.where(y == 1, (len(y) - positives) / positives if positives < len(y) else 1.0, 1.0)
    total = weight.sum()
    w, b = np.zeros(x.shape[1]), 0.0
    for _ in range(epochs):
        p = 1 / (1 + np.exp(-np.clip(x @ w + b, -30.0, 30.0)))
        err = weight * (p - y)
        w -= rate * (x.T @ err / total + l2 * w)
        w[list(nonnegative)] = np.maximum(w[list(nonnegative)], 0.0)
        b -= rate * err.sum() / total
    return [float(v) for v in w], float(b)


def choose_threshold(best: list[tuple[float, bool]], precision: float) -> tuple[float, dict[str, float]]:
    """The lowest threshold (the most shown) at which at least `precision` of the shown items are
    right; 1.0 when no threshold reaches it."""
    ordered = sorted(best, reverse=True)
    right_so_far, threshold = 0, 1.0
    for n, (p, right) in enumerate(ordered, 1):
        right_so_far += right
        if right_so_far / n >= precision and (n == len(ordered) or ordered[n][0] < p):
            threshold = p
    return threshold, at_threshold(best, threshold)


def threshold_for_every_kind(best: list[tuple[float, bool]], kinds: list[str], precision: float) -> tuple[float, dict[str, float]]:
    """The lowest threshold at which every kind of item (lines using a name from another file,
    random lines, typed lines) reaches `precision`: the highest of the kinds' own thresholds.
    One threshold over the mix lets the easy kinds carry a hard one, which then shows mostly
    wrong lines to the user who writes it."""
    threshold = max(choose_threshold([b for b, k in zip(best, kinds) if k == kind], precision)[0] for kind in sorted(set(kinds)))
    return threshold, at_threshold(best, threshold)


def at_threshold(best: list[tuple[float, bool]], threshold: float) -> dict[str, float]:
    """Show rate, precision when shown and exact match of `best` at `threshold`."""
    shown = [r for p, r in best if p >= threshold]
    return {
        "show_rate": len(shown) / max(1, len(best)),
        "precision_when_shown": sum(shown) / len(shown) if shown else 0.0,
        "exact_match": sum(shown) / max(1, len(best)),
    }


async def collect(items: list[Item], model: str, log_dir: Path) -> list[dict]:
    server = await RowServer.start("fit", model, {**ROWS["all"], "abstain": False}, log_dir)
    try:
        await server.wait_ready()
        explained = []
        for n, item in enumerate(items, 1):
            original = item.path.read_text(encoding="utf-8")
            item.path.write_text(item.text, encoding="utf-8")
            try:
                result = await server.explain(item)
            finally:
                item.path.write_text(original, encoding="utf-8")
            explained.append({"target": item.expected, "line_prefix": item.typed, "candidates": result.get("candidates", [])})
            if n % 10 == 0:
                print(f"  {n}/{len(items)}", flush=True)
        return explained
    finally:
        await server.stop()


def candidate_rows(explained: list[dict]) -> tuple[list[list[float]], list[int], list[int]]:
    """Every scored candidate's features, its label (1 when it equals what the completion should
    insert) and its item. A feature added after the dump was written and computable from the
    item's cursor line and the candidate's text (`names_target`) is computed here."""
    rows, labels, groups = [], [], []
    for g, item in enumerate(explained):
        for c in item["candidates"]:
            if c.get("features"):
                values = c["features"] | {
                    "names_target": c["features"].get("names_target", float(names_target(item["line_prefix"], c["text"])))
                }
                rows.append([values[f] for f in FEATURES])
                labels.append(int(c["text"].rstrip() == item["target"].rstrip() and bool(c["text"].strip())))
                groups.append(g)
    return rows, labels, groups


def best_per_item(reranker: Reranker, rows: list[list[float]], labels: list[int], groups: list[int], items: list[int]) -> list[tuple[float, bool]]:
    """For each of `items`: its best candidate's probability and whether that one is right
    ((0, False) for an item without a scored candidate)."""
    wanted = set(items)
    best: dict[int, tuple[float, bool]] = {}
    for x, y, g in zip(rows, labels, groups):
        if g not in wanted:
            continue
        p = reranker.probability(Features(tuple(x)))
        if g not in best or p > best[g][0]:
            best[g] = (p, bool(y))
    return [best.get(g, (0.0, False)) for g in items]


def fit(rows: list[list[float]], labels: list[int], groups: list[int], items: list[int]) -> Reranker:
    """Weights fitted on the candidates of `items` (threshold 0: to be chosen)."""
    keep = set(items)
    picked = [i for i, g in enumerate(groups) if g in keep]
    weights, bias = fit_logistic([rows[i] for i in picked], [labels[i] for i in picked], nonnegative=LIKELIHOOD)
    return Reranker(tuple(weights), bias, 0.0, {})


def cross_validated(rows: list[list[float]], labels: list[int], groups: list[int], folds: list[list[int]]) -> list[tuple[float, bool]]:
    """Out-of-fold `best_per_item`: each fold's items scored by weights fitted on the other folds.
    A threshold chosen on these is one the weights did not see, as on a new package."""
    scored: list[tuple[float, bool]] = []
    for k, fold in enumerate(folds):
        others = [i for j, f in enumerate(folds) if j != k for i in f]
        scored += best_per_item(fit(rows, labels, groups, others), rows, labels, groups, fold)
    return scored


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model")
    parser.add_argument("--per-package", type=int, default=40)
    parser.add_argument("--typed-per-package", type=int, default=0, help="typed items per package (see repo-typed)")
    parser.add_argument("--cache", type=Path, default=REPO / ".cache" / "quality")
    parser.add_argument("--out", type=Path, default=WEIGHTS_PATH)
    parser.add_argument("--dump", type=Path, help="also write the explained candidates here")
    parser.add_argument("--from-dump", type=Path, help="fit on a dump written earlier instead of asking a server")
    parser.add_argument("--precision", type=float, default=PRECISION, help="precision when shown that the threshold keeps")
    args = parser.parse_args(argv)
    from lsp_server.engine_client import embedded_model_path

    model = args.model or embedded_model_path()
    half = args.per_package // 2
    kinds_of = {
        "cross-file": package_items(args.cache, TUNING_PACKAGES, half, "tuning"),
        "random": package_random_items(args.cache, TUNING_PACKAGES, half, "tuning"),
        "typed": package_typed_items(args.cache, TUNING_PACKAGES, args.typed_per_package, "tuning"),
    }
    items = [item for kind in kinds_of.values() for item in kind]
    item_kinds = [kind for kind, its in kinds_of.items() for _ in its]
    explained = json.loads(args.from_dump.read_text()) if args.from_dump else []
    for entry, item in zip(explained, items):  # dumps written before the line prefix was kept
        entry.setdefault("line_prefix", item.typed)
    if len(explained) > len(items):
        raise SystemExit(f"{args.from_dump} has {len(explained)} items; these flags make only {len(items)}")
    if len(explained) < len(items):
        explained += asyncio.run(collect(items[len(explained) :], model, Path(tempfile.mkdtemp(prefix="glm5-fit-"))))
    if args.dump:
        args.dump.write_text(json.dumps(explained, indent=1))
    rows, labels, groups = candidate_rows(explained)
    if not rows or not any(labels):
        raise SystemExit("no scored candidates or no right one: is the engine scoring (model_runtime with score())?")
    everything = list(range(len(explained)))
    folds = [[i for i in everything if items[i].root.name == root] for root in sorted({item.root.name for item in items})]
    kinds = [item_kinds[i] for fold in folds for i in fold]  # in `cross_validated`'s order
    threshold, tuned = threshold_for_every_kind(cross_validated(rows, labels, groups, folds), kinds, args.precision)
    reranker = fit(rows, labels, groups, everything)
    _, in_sample = choose_threshold(best_per_item(reranker, rows, labels, groups, everything), args.precision)
    tuned["oracle"] = len({g for g, y in zip(groups, labels) if y}) / len(explained)
    meta = {
        "fitted": datetime.date.today().isoformat(), "model": Path(model).name, "model_identity": weights_identity(Path(model)),
        "items": len(explained),
        "candidates": len(rows), "positives": sum(labels), "packages": list(TUNING_PACKAGES),
        "typed_items": sum(1 for item in items if item.column),
        "threshold": f"the most shown at precision when shown >= {args.precision:.0%} for every kind of item, on leave-one-package-out predictions",
        "tuning": {k: round(v, 4) for k, v in tuned.items()},
        "in_sample_best": {k: round(v, 4) for k, v in in_sample.items()},
    }
    weights = tuple(round(w, 5) for w in reranker.weights)
    args.out.write_text(Reranker(weights, round(reranker.bias, 5), round(threshold, 5), meta).to_json() + "\n")
    print(json.dumps(meta, indent=1))
    print(dict(zip(FEATURES, (round(w, 3) for w in weights))), "bias", round(reranker.bias, 3), "threshold", round(threshold, 3))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
