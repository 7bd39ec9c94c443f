"""Training samples from one source file: fill-in-the-middle (SPM and PSM) and plain left-to-right.

Role: cut a document into windows that fit the context, and turn each window into one token
sequence in the serving prompt format of `context.fim`, followed by the text the model must
write and `<|endoftext|>`:
- SPM: `[gMASK]<sop>{header}<|code_suffix|>{suffix}<|code_prefix|>{prefix}<|code_middle|>{middle}<eos>`
- PSM: `[gMASK]<sop>{header}<|code_prefix|>{prefix}<|code_suffix|>{suffix}<|code_middle|>{middle}<eos>`
- plain: `[gMASK]<sop>{header}{code}<eos>`
`header` is the cross-file snippets (for some documents) then `file_header(path, "python")`.

Middles are chosen like editor completions: mostly the rest of a line from a cursor inside it
or a whole line, sometimes a small block of lines, sometimes an arbitrary character span, rarely
nothing (the model must learn to stop at once).

Invariants:
- Every sample fits `seq_len` tokens and starts with `[gMASK]<sop>`.
- `prefix + middle + suffix` is exactly the window text, and the windows of a document
  concatenate to the document.
- The loss mask is 1 for every token the model must predict except `[gMASK]` and `<sop>`
  (fixed prompt scaffolding); prefix, suffix and header tokens are trained too ("FIM for free").
- Special-token strings that occur in source files are encoded as plain text, never as specials.
- Deterministic: all randomness comes from the `random.Random` passed in.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from tokenizers import Tokenizer

from context.fim import FimMode, fim_prompt_ids, file_header, plain_prompt_ids, render_snippet
from model_runtime.tokenizer import GlmTokenizer, SpecialTokens
from training.snippets import Definition

SAFETY_TOKENS = 8  # re-tokenizing at cut points can add a token or two per cut
MIN_WINDOW_TOKENS = 64  # a smaller free space is not worth a window of its own
SCAFFOLD_TOKENS = 6  # [gMASK] <sop> and three <|code_*|> before, <|endoftext|> after
LANGUAGE = "python"
MIDDLES = ("mixed", "lines")


class Mode(str, Enum):
    SPM = "spm"
    PSM = "psm"
    PLAIN = "plain"


@dataclass(frozen=True, slots=True)
class SampleConfig:
    seq_len: int = 1025  # tokens per packed row: inputs row[:-1], targets row[1:], a 1024 context
    fim_rate: float = 0.9  # share of windows turned into FIM samples
    spm_rate: float = 0.6  # share of FIM samples in SPM order (the serving order)
    snippet_rate: float = 0.3  # share of documents whose samples carry cross-file snippets
    header_fraction: float = 0.25  # most of the context the snippets may take
    empty_middle_rate: float = 0.02
    max_block_lines: int = 10
    max_span_chars: int = 256
    middle: str = "mixed"  # "mixed": editor-like spans; "lines": whole lines only (line-level FIM)

    def __post_init__(self) -> None:
        if self.middle not in MIDDLES:
            raise ValueError(f"middle must be one of {', '.join(MIDDLES)}, got {self.middle!r}")
        if self.seq_len < 128:
            raise ValueError(f"seq_len must be >= 128, got {self.seq_len}")
        for name in ("fim_rate", "spm_rate", "snippet_rate", "header_fraction", "empty_middle_rate"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")


@dataclass(frozen=True, slots=True)
class Sample:
    ids: list[int]
    mask: list[int]  # 1 where the token is a training target
    mode: Mode
    snippets: int  # cross-file snippets in the header


class LiteralEncoder:
    """The model tokenizer, encoding special-token strings found in text as ordinary text."""

    def __init__(self, tokenizer_dir: str | Path) -> None:
        self.special: SpecialTokens = GlmTokenizer.from_dir(tokenizer_dir).special
        self._tok = Tokenizer.from_file(str(Path(tokenizer_dir) / "tokenizer.json"))
        self._tok.encode_special_tokens = True
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        self.eos = self.special.require("endoftext")

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def token_starts(self, text: str) -> list[int]:
        """Character offset where each token of `text` starts."""
        return [start for start, _ in self._tok.encode(text, add_special_tokens=False).offsets]

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=False)


class WindowCutter:
    """Cuts a document into consecutive windows of at most a given number of tokens (as the
    document tokenizes whole), at line starts; inside a line only when one line exceeds it.
    The windows concatenate to the document."""

    def __init__(self, text: str, token_starts: list[int]) -> None:
        self.text, self._starts = text, token_starts
        self._lines = [0] + [i + 1 for i, c in enumerate(text) if c == "\n" and i + 1 < len(text)]
        self._line_tok = [bisect.bisect_left(token_starts, s) for s in self._lines]
        self._tok, self._char, self._done = 0, 0, False

    def next(self, budget: int) -> tuple[int, int] | None:
        """The next window's (start, end) characters, or None when the document is used up."""
        if budget < 16:
            raise ValueError(f"window budget must be >= 16 tokens, got {budget}")
        if self._done:
            return None
        start = self._char
        if len(self._starts) - self._tok <= budget:
            self._done = True
            return start, len(self.text)
        j = bisect.bisect_right(self._line_tok, self._tok + budget) - 1
        if self._lines[j] > start:
            self._tok, self._char = self._line_tok[j], self._lines[j]
        else:
            self._tok += budget
            self._char = self._starts[self._tok]
        return start, self._char


def choose_middle(text: str, rng: random.Random, cfg: SampleConfig) -> tuple[int, int]:
    """(start, end) of the span to hide, favouring what an editor user completes."""
    lines = _line_spans(text)
    content = [i for i, (s, e) in enumerate(lines) if text[s:e].strip()]
    if cfg.middle == "lines":
        return _whole_lines(lines, content, rng, cfg)
    if not content or rng.random() < cfg.empty_middle_rate:
        pos = rng.randint(0, len(text))
        return pos, pos
    r = rng.random()
    i = rng.choice(content)
    start, end = lines[i]
    if r < 0.35:  # the rest of a line, from a cursor after its indentation
        indent = start + len(text[start:end]) - len(text[start:end].lstrip())
        return rng.randint(indent, end - 1), end
    if r < 0.60:  # a whole line, indentation included
        return start, end
    if r < 0.85:  # a small block of lines, small sizes most likely
        n = min(cfg.max_block_lines, 2 + int(rng.expovariate(1 / 2.5)))
        return start, lines[min(len(lines) - 1, i + n - 1)][1]
    pos = rng.randint(0, len(text) - 1)
    return pos, min(len(text), pos + rng.randint(1, cfg.max_span_chars))


def _whole_lines(lines: list[tuple[int, int]], content: list[int], rng: random.Random, cfg: SampleConfig) -> tuple[int, int]:
    """Line-level FIM (as in FIM-SE): the middle starts at a line start and ends at a line end
    (its newline stays in the suffix, as in the evaluation's holes), so no partial token is
    predicted. Mostly one line, sometimes a small block; an empty middle sits at a line start."""
    if not content or rng.random() < cfg.empty_middle_rate:
        start = rng.choice(lines)[0] if lines else 0
        return start, start
    i = rng.choice(content)
    n = 1 if rng.random() < 0.7 else min(cfg.max_block_lines, 2 + int(rng.expovariate(1 / 2.5)))
    return lines[i][0], lines[min(len(lines) - 1, i + n - 1)][1]


def _line_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each line, end excluding the newline."""
    spans, start = [], 0
    for line in text.splitlines(keepends=True):
        spans.append((start, start + len(line.rstrip("\r\n"))))
        start += len(line)
    return spans


def render_header(path: str, definitions: list[Definition], enc: LiteralEncoder, max_tokens: int) -> tuple[str, int]:
    """Snippets in the given order while they fit `max_tokens`, then the file's own header line.
    Returns the header and the number of snippets in it."""
    parts, used = [], 0
    for definition in definitions:
        snippet = render_snippet(definition.path, definition.text, LANGUAGE)
        cost = len(enc.encode(snippet))
        if used + cost > max_tokens:
            break
        parts.append(snippet)
        used += cost
    return "".join(parts) + file_header(path, LANGUAGE), len(parts)


def window_sample(code: str, header: str, snippets: int, rng: random.Random, enc: LiteralEncoder, cfg: SampleConfig) -> Sample:
    """One sample from the window `code` (not checked against `seq_len` here)."""
    r = rng.random()
    if r >= cfg.fim_rate:
        ids = plain_prompt_ids(enc, header, code) + [enc.eos]
        mode = Mode.PLAIN
    else:
        mode = Mode.SPM if rng.random() < cfg.spm_rate else Mode.PSM
        start, end = choose_middle(code, rng, cfg)
        fim = FimMode.SPM if mode is Mode.SPM else FimMode.PSM
        ids = fim_prompt_ids(enc, header, code[:start], code[end:], fim)
        ids += enc.encode(code[start:end]) + [enc.eos]
    mask = [0, 0] + [1] * (len(ids) - 2)  # [gMASK] and <sop> are never targets
    return Sample(ids, mask, mode, snippets)


def document_samples(
    text: str,
    path: str,
    definitions: Callable[[], list[Definition]],
    room: Callable[[], int],
    rng: random.Random,
    enc: LiteralEncoder,
    cfg: SampleConfig,
) -> Iterator[Sample]:
    """The samples of one document, window by window. `definitions()` gives the sibling
    definitions for a cross-file header (called only if this document draws one); `room()` the
    tokens the next sample should fit (free space in the packer), asked before each window."""
    defs = definitions() if rng.random() < cfg.snippet_rate else []
    header, n = render_header(path, defs, enc, int(cfg.seq_len * cfg.header_fraction))
    overhead = len(enc.encode(header)) + SCAFFOLD_TOKENS + SAFETY_TOKENS
    cutter = WindowCutter(text, enc.token_starts(text))
    while True:
        budget = room() - overhead
        if budget < MIN_WINDOW_TOKENS:
            budget = cfg.seq_len - overhead
        window = cutter.next(budget)
        if window is None:
            return
        yield from _fitted_samples(text[window[0] : window[1]], header, n, rng, enc, cfg)


def _fitted_samples(code: str, header: str, snippets: int, rng: random.Random, enc: LiteralEncoder, cfg: SampleConfig) -> list[Sample]:
    """The window's sample, or (rarely: re-tokenizing at the cuts grew it past `seq_len`) the
    samples of its two halves."""
    sample = window_sample(code, header, snippets, rng, enc, cfg)
    if len(sample.ids) <= cfg.seq_len:
        return [sample]
    if len(code) < 2:
        raise ValueError(f"a {len(sample.ids)}-token header and scaffold leave no room in seq_len {cfg.seq_len}")
    half = code.rfind("\n", 0, len(code) // 2) + 1 or len(code) // 2
    return [s for part in (code[:half], code[half:]) for s in _fitted_samples(part, header, snippets, rng, enc, cfg)]
