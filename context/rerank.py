"""Reranking completion candidates: the model's likelihood plus checks from the IDE state.

Role: each candidate (the model's n-best and the retrieval candidates) gets `Features`:
- its length-normalised log-likelihood under the FIM prompt (from the engine's batched
  `score`), and its total;
- `parses`: the completed line has no syntax error (tree-sitter, over the enclosing top-level
  block with the candidate inserted);
- `undefined`: it uses a name that is not defined at the cursor, or a member its qualifier
  does not have (the scopes of `constraints.Site`; Python only);
- `repeats`: it re-types the next line or the rest of the cursor line;
- where it came from (model rank, retrieval source) and how many sources agree on it;
- retrieval's evidence: whether it is the best similar-line candidate (the baseline's answer),
  its match's similarity, how many good matches are followed by it (support), the
  similar-context match's similarity, and the same rank and similarity for the wider
  "similar-window" search;
- `unfinished`: the model's candidate hit the token limit before the line ended;
- `names_target`: it starts with a name that shares its stem with the name the cursor line
  assigns (`center = centroid(points)`).
A `Reranker` (logistic regression weights, stored as data in `data/rerank.json`, fitted by
`bench/fit_rerank.py` on holes that are not the evaluation's, for one model: `reranker_for`
gives them only to that model, and reads them again when the file changes) turns features into
the probability that the candidate is exactly right; `choose` shows the best one, or nothing
when that probability is under the stored threshold (abstain). A model without fitted weights
gets `own_best`: its own best candidate that passes the text checks.

`ceiling` bounds the probability a candidate can reach before the model has scored it (its
log-likelihood unknown) or proposed it (whether the n-best joins it unknown), `floor` the
lowest a scored candidate can get, and `novel_ceiling` bounds a model candidate no retrieval
source proposed, whatever its text. When the bounds settle the choice (every ceiling under the
threshold, or one floor above the threshold and every other ceiling), the server skips the model
work that cannot change it (see `lsp_server/candidates.py`): the same choice, sooner.

Invariants: pure (but `reranker_for`, which reads the weights file); never raises on
candidate text; the same inputs give the same choice (ties break on candidate order).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from tree_sitter import Tree

from context.constraints import Site
from context.languages import Language

log = logging.getLogger(__name__)

WEIGHTS_PATH = Path(__file__).with_name("data") / "rerank.json"
FEATURES = (
    "mean_logprob", "logprob", "parses", "undefined", "repeats", "blank", "model", "model_top",
    "similar_line", "similar_context", "identifier", "call", "agreement", "tokens", "unfinished",
    "similar_top", "similarity", "support", "context_similarity", "window_top", "window_similarity", "names_target",
)
TEXT_CHECKS = ("parses", "undefined", "repeats", "blank", "names_target")  # set by the candidate's text
_TARGET = re.compile(r"^\s*([A-Za-z_]\w*)\s*(?::[^=]*)?=\s*$")
_FIRST_NAME = re.compile(r"\s*(?:await\s+|self\.|cls\.)?([A-Za-z_]\w*)")
_STRING = re.compile(r"[rbfuRBFU]{0,2}(\"\"\"[\s\S]*?\"\"\"|'''[\s\S]*?'''|\"(?:\\.|[^\"\\])*\"?|'(?:\\.|[^'\\])*'?)")
_LEX = re.compile(r"[A-Za-z_]\w*|\d[\w.]*|==|!=|<=|>=|:=|->|\*\*|//|#.*|[^\s\w]")
_BINDERS = frozenset({"def", "class", "as", "import", "global", "nonlocal", "from"})
_KEYWORDS = frozenset(
    "False None True and as assert async await break class continue def del elif else except finally for from "
    "global if import in is lambda nonlocal not or pass raise return try while with yield match case _ print".split()
) - {"print"}


@dataclass(frozen=True, slots=True)
class Scored:
    """One candidate with what the reranker needs."""

    text: str
    sources: tuple[str, ...]  # every source that proposed this text
    model_rank: int | None  # rank in the model's n-best (0 = best), None if the model did not propose it
    logprob: float  # log p(text + end) under the FIM prompt
    tokens: int
    finished: bool = True  # False for a model candidate cut off by the token limit
    similar_rank: int | None = None  # rank among the similar-line candidates (0 = the baseline's answer)
    similarity: float = 0.0  # the similar-line match's token Jaccard
    support: int = 0  # how many good similar-line matches are followed by this text
    context_similarity: float = 0.0  # the similar-context match's mean Jaccard
    window_rank: int | None = None  # rank among the similar-window candidates
    window_similarity: float = 0.0  # the similar-window match's score (0-1)


@dataclass(frozen=True, slots=True)
class Features:
    values: tuple[float, ...]  # in FEATURES order

    def as_dict(self) -> dict[str, float]:
        return dict(zip(FEATURES, self.values))


def features(site: Site, candidate: Scored) -> Features:
    text = candidate.text
    tokens = max(1, candidate.tokens)
    values = {
        "mean_logprob": candidate.logprob / tokens,
        "logprob": max(-60.0, candidate.logprob) / 10,
        "parses": float(parses(site, text)),
        "undefined": float(undefined_names(site, text) > 0),
        "repeats": float(repeats(site, text)),
        "blank": float(not text.strip()),
        "model": float(candidate.model_rank is not None),
        "model_top": float(candidate.model_rank == 0),
        "similar_line": float("similar-line" in candidate.sources),
        "similar_context": float("similar-context" in candidate.sources),
        "identifier": float("identifier" in candidate.sources),
        "call": float("call" in candidate.sources),
        "agreement": float(len(set(candidate.sources)) - 1),
        "tokens": min(tokens, 40) / 10,
        "unfinished": float(not candidate.finished),
        "similar_top": float(candidate.similar_rank == 0),
        "similarity": candidate.similarity,
        "support": min(candidate.support, 4) / 4,
        "context_similarity": candidate.context_similarity,
        "window_top": float(candidate.window_rank == 0),
        "window_similarity": candidate.window_similarity,
        "names_target": float(names_target(site.line_prefix, text)),
    }
    return Features(tuple(values[name] for name in FEATURES))


@dataclass(frozen=True, slots=True)
class Reranker:
    weights: tuple[float, ...]  # in FEATURES order
    bias: float
    threshold: float  # show only when the best probability is at least this
    meta: dict

    @property
    def model(self) -> str | None:
        """The `weights_identity` of the model these weights were fitted for (None: not named)."""
        return self.meta.get("model_identity")

    def probability(self, feats: Features) -> float:
        return _sigmoid(self.logit(feats.as_dict()))

    def logit(self, values: dict[str, float]) -> float:
        return self.bias + sum(w * values[name] for w, name in zip(self.weights, FEATURES))

    def likelihood_lift(self, tokens: int) -> float:
        """The most the two likelihood features can add for a `tokens`-token continuation, over
        every log-likelihood L <= 0 (mean L / tokens, and max(-60, L) / 10): a linear function
        of L on [-60, 0] and on (-inf, -60], so its maximum is at 0 or -60 (inf when the mean's
        weight is negative)."""
        mean, total = self.weights[FEATURES.index("mean_logprob")], self.weights[FEATURES.index("logprob")]
        if mean < 0:
            return math.inf
        return max(0.0, -60 * mean / tokens - 6 * total)

    def to_json(self) -> str:
        return json.dumps(
            {"features": list(FEATURES), "weights": list(self.weights), "bias": self.bias, "threshold": self.threshold, "meta": self.meta},
            indent=1,
        )


def _sigmoid(z: float) -> float:
    return 1 / (1 + math.exp(-max(-30.0, min(30.0, z))))


def ceiling(site: Site, candidate: Scored, reranker: Reranker, model_may_join: bool, scored: bool = False) -> float:
    """The highest probability `reranker` can give `candidate` once the model scores it
    (`candidate.tokens` is the scored length; its `logprob` is ignored unless `scored`) and, with
    `model_may_join` and the model not among its sources yet, once the model's n-best proposes
    it too, at any rank, finished or not."""
    values = features(site, candidate if scored else replace(candidate, logprob=0.0)).as_dict()
    options = _join_options(values, candidate) if model_may_join else [values]
    lift = 0.0 if scored else reranker.likelihood_lift(max(1, candidate.tokens))
    return _sigmoid(max(reranker.logit(v) for v in options) + lift)


def floor(site: Site, candidate: Scored, reranker: Reranker) -> float:
    """The lowest probability `reranker` can give the scored `candidate` over the ways the model's
    n-best may or may not propose it too."""
    return _sigmoid(min(reranker.logit(v) for v in _join_options(features(site, candidate).as_dict(), candidate)))


def _join_options(values: dict[str, float], candidate: Scored) -> list[dict[str, float]]:
    """`values` as they are, and as they would be if the model's n-best proposed the candidate
    too, at any rank, finished or not."""
    if candidate.model_rank is not None:
        return [values]
    agreement = float(len(set(candidate.sources) | {"model"}) - 1)
    return [values] + [
        values | {"model": 1.0, "model_top": top, "unfinished": cut, "agreement": agreement}
        for top in (0.0, 1.0) for cut in (0.0, 1.0)
    ]


def novel_ceiling(reranker: Reranker) -> float:
    """The highest probability `reranker` can give a model candidate that no retrieval source
    proposed: no evidence, any text checks, any rank, and any length with its likelihood."""
    weight = dict(zip(FEATURES, reranker.weights))
    values = dict.fromkeys(FEATURES, 0.0) | {"model": 1.0}
    for name in (*TEXT_CHECKS, "model_top", "unfinished"):
        values[name] = float(weight[name] > 0)
    base = reranker.logit(values)
    lengths = [base + weight["tokens"] * n / 10 + reranker.likelihood_lift(n) for n in range(1, 41)]
    longest = base + weight["tokens"] * 4 + reranker.likelihood_lift(10**9)  # past 40 tokens the lift only grows
    return _sigmoid(max(*lengths, longest))


def load_reranker(path: Path = WEIGHTS_PATH) -> Reranker:
    """The stored weights; a clear ValueError when the file does not match `FEATURES`."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read reranker weights: {exc}") from exc
    if not isinstance(raw, dict) or raw.get("features") != list(FEATURES) or len(raw.get("weights", ())) != len(FEATURES):
        found = raw.get("features") if isinstance(raw, dict) else type(raw).__name__
        raise ValueError(f"{path}: reranker weights are for features {found}, expected {list(FEATURES)}")
    try:
        return Reranker(tuple(float(w) for w in raw["weights"]), float(raw["bias"]), float(raw["threshold"]), dict(raw.get("meta", {})))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: reranker weights need numeric weights, bias and threshold: {exc!r}") from exc


def reranker_for(model: str, path: str | None = None) -> tuple[Reranker | None, str]:
    """The reranker fitted for the model whose `weights_identity` is `model`, read again when the
    file changes, or None and why. `path` is the `rerankWeights` setting (None: the shipped
    weights). Weights are a model's own: a file that names another model (the shipped one names
    the embedded model) is not used, since its likelihood weights and threshold mean nothing for
    other weights; a file that names none is the user's word that it fits the model in use."""
    file = Path(path).expanduser() if path else WEIGHTS_PATH
    try:
        reranker = _reranker_at(file, file.stat().st_mtime_ns)
    except (OSError, ValueError) as exc:
        log.error("no reranker: %s", exc)
        return None, f"the reranker weights cannot be read: {exc}"
    if reranker.model not in (None, model):
        return None, "no reranker weights were fitted for this model"
    return reranker, ""


@lru_cache(maxsize=8)
def _reranker_at(file: Path, mtime_ns: int) -> Reranker:
    return load_reranker(file)


@dataclass(frozen=True, slots=True)
class Choice:
    index: int | None  # the chosen candidate, None when abstaining
    scores: tuple[float, ...]  # per candidate: probability (reranker) or mean log-likelihood
    abstained: bool


def choose(
    site: Site, candidates: Sequence[Scored], reranker: Reranker | None, abstain: bool
) -> tuple[Choice, list[Features]]:
    """The best candidate by the reranker's probability (or, without one, by mean log-likelihood),
    a blank one only when all are; with `abstain`, none when the best probability is under the
    threshold."""
    feats = [features(site, c) for c in candidates]
    if not candidates:
        return Choice(None, (), abstain), feats
    if reranker is None:
        scores = tuple(f.values[0] if candidates[i].text.strip() else -math.inf for i, f in enumerate(feats))
    else:
        scores = tuple(reranker.probability(f) for f in feats)
    best = max(range(len(candidates)), key=lambda i: (bool(candidates[i].text.strip()), scores[i], -i))
    if abstain and reranker is not None and scores[best] < reranker.threshold:
        return Choice(None, scores, True), feats
    return Choice(best, scores, False), feats


def own_best(site: Site, candidates: Sequence[Scored], always: bool) -> int | None:
    """Without weights fitted for the model: the first of `candidates` (the model's n-best by
    rank, then retrieval's) that is not blank, whose completed line parses and that does not
    re-type the next line. None when none passes, unless `always` (an explicit request): then the
    first that is not blank."""
    for i, candidate in enumerate(candidates):
        if candidate.text.strip() and parses(site, candidate.text) and not repeats(site, candidate.text):
            return i
    return next((i for i, c in enumerate(candidates) if c.text.strip()), None) if always else None


# ---- checks ---------------------------------------------------------------------------------


def parses(site: Site, text: str) -> bool:
    """Whether the cursor line, completed with `text`, has no syntax error (tree-sitter over the
    enclosing top-level block; True for languages without a grammar).

    The block with the cursor line as typed (prefix + suffix) is parsed once per site and
    cached; each candidate is an edit of that tree, so tree-sitter reparses only around it (a
    400-line class: ~0.5 ms a candidate against ~4 ms for a full parse)."""
    language = site.snapshot.language
    if language is None:
        return True
    lines = site.snapshot.text.split("\n")
    row = site.position.line
    first, last = _block(lines, row)
    head = _encode("".join(line + "\n" for line in lines[first:row]) + site.line_prefix)
    tail = _encode("".join("\n" + line for line in lines[row + 1 : last + 1]))
    suffix, new = _encode(site.line_suffix), _encode(text)
    target, column = row - first, len(_encode(site.line_prefix))
    tree = _typed_tree(language, head + suffix + tail).copy()
    end_row = target + new.count(b"\n")
    end_column = len(new) - new.rfind(b"\n") - 1 if b"\n" in new else column + len(new)
    tree.edit(len(head), len(head), len(head) + len(new), (target, column), (target, column), (end_row, end_column))
    tree = language.parse(head + new + suffix + tail, tree)
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.start_point[0] > target or node.end_point[0] < target:
            continue
        if node.is_error or node.is_missing:
            return False
        if node.has_error:
            stack.extend(node.children)
    return True


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


@lru_cache(maxsize=8)
def _typed_tree(language: Language, source: bytes) -> Tree:
    """The tree of a block as typed, for `parses` to edit (copy it first: `Tree.edit` mutates)."""
    return language.parse(source)


def _block(lines: list[str], row: int) -> tuple[int, int]:
    """First and last line of the top-level block around `row` (by indentation), with the
    closing brackets at the margin that end it."""
    first = row
    while first > 0 and not (lines[first - 1][:1].strip() and not lines[first - 1].startswith(("#", ")", "]", "}"))):
        first -= 1
    first = max(0, first - 1)
    while first > 0 and lines[first - 1].startswith("@"):
        first -= 1
    last = row
    while last + 1 < len(lines) and not lines[last + 1][:1].strip():
        last += 1
    while last + 1 < len(lines) and lines[last + 1].startswith((")", "]", "}")):  # the block's closing `}` (brace languages)
        last += 1
    return first, last


def undefined_names(site: Site, text: str) -> int:
    """How many names `text` uses that the cursor's scopes do not define (or members its
    qualifiers lack); 0 when the scopes are unknown."""
    if site.defined is None or site.language != "python":
        return 0
    line = site.line_prefix + text
    tokens = _LEX.findall(_STRING.sub('""', line))
    bound = _bound_in(tokens)
    count = 0
    skip_prefix = len(_LEX.findall(_STRING.sub('""', site.line_prefix)))
    for i, token in enumerate(tokens):
        if i < skip_prefix and not (i == skip_prefix - 1 and site.typed):
            continue
        if not (token[0].isalpha() or token[0] == "_") or token in _KEYWORDS or token in bound:
            continue
        before = tokens[i - 1] if i else ""
        after = tokens[i + 1] if i + 1 < len(tokens) else ""
        if before == ".":
            qualifier = tokens[i - 2] if i >= 2 else ""
            members = site.members.get(qualifier)
            count += members is not None and token not in members
            continue
        if before in _BINDERS or after == "=" or (after == ":" and i == 0):
            continue
        count += token not in site.defined
    return count


def _bound_in(tokens: list[str]) -> set[str]:
    """Names the line itself binds: `for` targets, lambda parameters, walrus targets."""
    bound: set[str] = set()
    mode = None
    for i, token in enumerate(tokens):
        if token in ("for", "lambda"):
            mode = token
        elif mode == "for" and token == "in" or mode == "lambda" and token == ":":
            mode = None
        elif mode and (token[0].isalpha() or token[0] == "_"):
            bound.add(token)
        if token == ":=" and i:
            bound.add(tokens[i - 1])
    return bound


def names_target(line_prefix: str, text: str) -> bool:
    """Whether `text` starts with a name that shares its stem with the name being assigned on
    the cursor line (`center = ` + `centroid(points)`, `user = ` + `get_user(id)`): code names a
    value after what made it, and no other feature sees the left-hand side."""
    target, first = _TARGET.match(line_prefix), _FIRST_NAME.match(text)
    if target is None or first is None:
        return False
    left, right = _stem(target.group(1)), _stem(first.group(1))
    if len(left) < 3 or len(right) < 3:
        return False
    common = len(os.path.commonprefix([left, right]))
    return common >= 4 or common == min(len(left), len(right)) or left in right


def _stem(name: str) -> str:
    return name.lower().replace("_", "").removeprefix("get").removeprefix("make").removeprefix("load")


def repeats(site: Site, text: str) -> bool:
    """Whether `text` re-types the next non-blank line or the rest of the cursor line."""
    body = text.strip()
    if not body:
        return False
    if site.line_suffix.strip() and body.endswith(site.line_suffix.strip()):
        return True
    lines = site.snapshot.text.split("\n")
    for line in lines[site.position.line + 1 :]:
        if line.strip():
            return (site.line_prefix + text).strip() == line.strip()
    return False
