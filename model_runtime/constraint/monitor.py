"""The per-request decode-time monitor: a `ConstraintSpec` plus the vocabulary, compiled.

Role: `compile_constraint` turns the plain-data spec (built by `context/` from the IDE state),
the tokenizer's vocabulary and the text before the cursor into a `Compiled` constraint (Python's
rules, `lexer.PyRules`; any other language's, `clike.BraceRules`: JavaScript, TypeScript, Go and
Rust read as such, others with the plain rules); each
sequence of the request (n-best branches included) drives its own `Monitor` over it. At every
decode step the engine asks the monitor for the legal tokens it wants (`choose`), picks among
them, and tells it what was accepted (`advance`).

Invariants:
- Greedy picks are exact: the monitor checks the model's tokens best first, each one char by
  char through the lexer, and stops at the first legal one; it walks the vocabulary trie for the
  full mask only when none of the top `LAZY_TOP` is legal. Sampled picks draw from the legal
  tokens among the `LAZY_TOP` most likely (a top-k truncation), or the full mask when none is.
- Transitions are memoised per (state, char) and per (state, token); full masks per state.
- It never blocks output: when no token is legal it releases its rules (keeping the heal prefix,
  which a byte vocabulary can always spell), and when even that fails it switches itself off.
  Both count as `released` in the report.
"""

from __future__ import annotations

import re
import time
from collections import OrderedDict
from dataclasses import dataclass, field

import torch

from model_runtime.api import ConstraintReport, ConstraintSpec, SamplingParams
from model_runtime.constraint.clike import BraceRules, BraceState, dialect_for
from model_runtime.constraint.lexer import Frame, LexState, PyRules
from model_runtime.constraint.vocab import END, Vocab

LAZY_TOP = 256  # tokens checked best first before falling back to the full mask
CONTEXT_CHARS = 4000  # text before the cursor scanned for strings and comments
# what changes the lexical mode: an escape, a quote, a comment, a newline
_MODE_MARKS = re.compile(r"""\\.|\"\"\"|'''|["'#\n]""", re.S)
MEMO_LIMIT = 200_000
State = LexState | BraceState
MASK_CACHE = 256


class Compiled:
    """The rules of one request over one vocabulary, with memoised transitions."""

    def __init__(self, spec: ConstraintSpec, vocab: Vocab, stop_ids: frozenset[int], context: str) -> None:
        self.python = spec.language == "python"
        if self.python:
            scopes: dict[str, tuple[str, ...]] = {}
            for scope in spec.member_scopes:
                scopes[scope.qualifier] = scopes.get(scope.qualifier, ()) + scope.members
            self.rules: PyRules | BraceRules = PyRules(spec.defined_names, scopes, spec.single_line)
        else:  # names and members are Python's only: brackets, line end and healing
            self.rules = BraceRules(dialect_for(spec.language), spec.single_line)
        self.vocab, self.stop_ids = vocab, stop_ids
        self._chars: dict[tuple[State, str, bool], tuple[State | None, str]] = {}
        self._tokens: dict[tuple[State, int, bool], tuple[State | None, str]] = {}
        self._masks: OrderedDict[tuple[State, bool, int], torch.Tensor] = OrderedDict()
        self.start = self._start_state(spec, context)

    def _start_state(self, spec: ConstraintSpec, context: str) -> State:
        """Lex the text before the cursor as facts (Python: from its last line that starts outside
        a string or comment); brackets reconcile with `spec.open_brackets`."""
        cut = context[-CONTEXT_CHARS:]
        if len(context) > CONTEXT_CHARS and "\n" in cut:
            cut = cut[cut.index("\n") + 1 :]
        if self.python:
            cut = cut[_last_code_line(cut) :]
        state: State
        if isinstance(self.rules, BraceRules):
            state = self.rules.facts(cut)
        else:
            single, self.rules.single_line = self.rules.single_line, False
            state = LexState()
            for ch in cut:
                state = self.rules.step(state, ch, check=False)[0] or state
            self.rules.single_line = single
        lexed = tuple(f._replace(own=False) for f in state.stack)
        chars, wanted = "".join(f.char for f in lexed), spec.open_brackets
        if wanted.endswith(chars):
            outer = tuple(Frame(c, "call" if c == "(" else "sub", False) for c in wanted[: len(wanted) - len(chars)])
            stack = outer + lexed
        elif chars.endswith(wanted):
            stack = lexed
        else:
            stack = tuple(Frame(c, "call" if c == "(" else "sub", False) for c in wanted)
        return self.rules.settle(state)._replace(stack=stack, own_string=False, heal=spec.heal_prefix)

    def move(self, state: State, ch: str, check: bool) -> tuple[State | None, str]:
        key = (state, ch, check)
        hit = self._chars.get(key)
        if hit is None:
            if len(self._chars) > MEMO_LIMIT:
                self._chars.clear()
            hit = self._chars[key] = self.rules.step(state, ch, check)
        return hit

    def token(self, state: State, token_id: int, check: bool) -> tuple[State | None, str]:
        """The state after `token_id` (unchanged for a stop token), or (None, the rule refusing it)."""
        if token_id in self.stop_ids:
            why = self.rules.can_end(state) if check else ("heal" if state.heal else "")
            return (None, why) if why else (state, "")
        if token_id >= len(self.vocab) or token_id in self.vocab.special:
            return None, "heal" if state.heal else "line"
        key = (state, token_id, check)
        hit = self._tokens.get(key)
        if hit is None:
            if len(self._tokens) > MEMO_LIMIT:
                self._tokens.clear()
            hit = self._tokens[key] = self._run(state, self.vocab.strings[token_id], check)
        return hit

    def _run(self, state: State, text: str, check: bool) -> tuple[State | None, str]:
        for ch in text:
            nxt, why = self.move(state, ch, check)
            if nxt is None:
                return None, why
            state = nxt
        return state, ""

    def mask(self, state: State, check: bool, size: int) -> torch.Tensor:
        """Exact legal-token mask [size] (bool) at `state`: one pruned walk of the vocabulary trie."""
        key = (state, check, size)
        hit = self._masks.get(key)
        if hit is not None:
            self._masks.move_to_end(key)
            return hit
        ids = [i for i in self.stop_ids if i < size and self.token(state, i, check)[0] is not None]
        todo = [(self.vocab.trie, state)]
        while todo:
            node, at = todo.pop()
            for ch, child in node.items():
                if ch == END:
                    continue
                nxt = self.move(at, ch, check)[0]
                if nxt is None:
                    continue
                ids.extend(child.get(END, ()))
                todo.append((child, nxt))
        mask = torch.zeros(size, dtype=torch.bool)
        ids = [i for i in ids if i < size]
        if ids:
            mask[torch.tensor(ids)] = True
        self._masks[key] = mask
        if len(self._masks) > MASK_CACHE:
            self._masks.popitem(last=False)
        return mask


def _last_code_line(text: str) -> int:
    """Where the last line that begins in code (not inside a string) starts: a regex scan over
    the marks that change the lexical mode, so only that line is lexed char by char."""
    quote, comment, start = "", False, 0
    for mark in _MODE_MARKS.finditer(text):
        token = mark.group()
        if comment:
            comment = token != "\n"
            start = start if comment else mark.end()
        elif quote:
            quote = "" if token == quote or (token == "\n" and len(quote) == 1) else quote
        elif token == "\n":
            start = mark.end()
        elif token == "#":
            comment = True
        elif token[0] != "\\":
            quote = token
    return start


@dataclass
class Monitor:
    """One sequence's walk through a `Compiled` constraint."""

    compiled: Compiled
    state: State
    checking: bool = True  # False once released: only the heal prefix is still enforced
    active: bool = True  # False once even the heal prefix found no legal token
    steps: int = 0
    masked_steps: int = 0
    released: bool = False
    fired: set[str] = field(default_factory=set)
    seconds: float = 0.0

    def fork(self) -> Monitor:
        return Monitor(self.compiled, self.state, self.checking, self.active, self.steps, self.masked_steps,
                       self.released, set(self.fired), self.seconds)

    def choose(self, logits: torch.Tensor, k: int, sampling: SamplingParams, generator: torch.Generator | None) -> list[int] | None:
        """Up to `k` distinct legal tokens for this step (greedy: best first; sampled: drawn
        without replacement); None when the monitor is off and the caller samples freely."""
        if not self.active:
            return None
        start = time.perf_counter()
        try:
            self.steps += 1
            while self.active:
                picks = self._pick(logits, k, sampling, generator)
                if picks:
                    return picks
                self._release()
            return None
        finally:
            self.seconds += time.perf_counter() - start

    def advance(self, token_id: int) -> None:
        if not self.active:
            return
        start = time.perf_counter()
        nxt, _ = self.compiled.token(self.state, token_id, self.checking)
        if nxt is None:  # the engine took a token the monitor did not offer (it was off)
            nxt, _ = self.compiled.token(self.state, token_id, False)
        if nxt is None:
            self.active, self.released = False, True
        else:
            self.state = nxt
        self.seconds += time.perf_counter() - start

    def report(self) -> ConstraintReport:
        return ConstraintReport(self.steps, self.masked_steps, self.released, tuple(sorted(self.fired)), self.seconds * 1000)

    # ---- internals ----------------------------------------------------------------------------
    def _release(self) -> None:
        self.released = True
        if self.checking:
            self.checking = False
        else:
            self.active = False

    def _legal(self, token_id: int) -> tuple[bool, str]:
        nxt, why = self.compiled.token(self.state, token_id, self.checking)
        return nxt is not None, why

    def _pick(self, logits: torch.Tensor, k: int, sampling: SamplingParams, generator: torch.Generator | None) -> list[int]:
        top = logits.topk(min(LAZY_TOP, logits.numel())).indices.tolist()
        ok, why = self._legal(top[0])
        if not ok:
            self.masked_steps += 1
            self.fired.add(why)
        want = k if sampling.temperature == 0 else len(top)  # greedy: only until k legal are found
        legal = []
        for token in top:
            if self._legal(token)[0]:
                legal.append(token)
                if len(legal) == want:
                    break
        if not legal:
            mask = self.compiled.mask(self.state, self.checking, logits.numel())
            if not bool(mask.any()):
                return []
            legal = logits.masked_fill(~mask.to(logits.device), float("-inf")).topk(min(int(mask.sum()), LAZY_TOP)).indices.tolist()
        if sampling.temperature == 0:
            return legal[:k]
        return _draw(logits[legal].cpu(), legal, k, sampling, generator)


def _draw(logits: torch.Tensor, ids: list[int], k: int, sampling: SamplingParams, generator: torch.Generator | None) -> list[int]:
    """Draw up to k distinct ids by the tempered, top-k/top-p-truncated distribution over `ids`
    (`logits`: theirs, on the CPU, where the request's generator lives)."""
    scaled = logits.float() / sampling.temperature
    if 0 < sampling.top_k < scaled.numel():
        scaled = scaled.masked_fill(scaled < scaled.topk(sampling.top_k).values[-1], float("-inf"))
    probs = scaled.softmax(-1)
    if sampling.top_p < 1.0:
        keep = probs.cumsum(-1) - probs < sampling.top_p  # ids are best first, so probs are sorted
        probs = probs * keep
    n = min(k, int((probs > 0).sum()))
    order = torch.multinomial(probs, n, replacement=False, generator=generator).tolist()
    return [ids[i] for i in order]


def compile_constraint(spec: ConstraintSpec, vocab: Vocab, stop_ids: frozenset[int], context: str) -> Monitor:
    """A fresh monitor for one request (`context`: the text before the cursor)."""
    compiled = Compiled(spec, vocab, stop_ids, context)
    return Monitor(compiled, compiled.start)
