"""FIM / plain training samples: exact reconstruction, lengths, loss mask, span choice (training.samples)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from training.samples import (
    LiteralEncoder, Mode, SampleConfig, WindowCutter, choose_middle, document_samples,
)
from training.snippets import Definition


def split_sample(ids: list[int], enc: LiteralEncoder) -> tuple[Mode, str, str, str]:
    """(mode, header, window text, middle) read back from a sample's ids alone."""
    sp = enc.special
    assert ids[:2] == [sp.require("gmask"), sp.require("sop")] and ids[-1] == enc.eos
    body = ids[2:-1]
    marks = {sp.require(n): n for n in ("code_prefix", "code_suffix", "code_middle")}
    at = {marks[t]: i for i, t in enumerate(body) if t in marks}
    if not at:
        return Mode.PLAIN, "", enc.decode(body), ""
    pre, suf, mid = at["code_prefix"], at["code_suffix"], at["code_middle"]
    prefix_end, suffix_end = (mid, pre) if suf < pre else (suf, mid)
    header = enc.decode(body[: min(pre, suf)])
    prefix = enc.decode(body[pre + 1 : prefix_end])
    suffix = enc.decode(body[suf + 1 : suffix_end])
    middle = enc.decode(body[mid + 1 :])
    return (Mode.SPM if suf < pre else Mode.PSM), header, prefix + middle + suffix, middle


def long_document() -> str:
    rng = random.Random(7)
    lines = []
    for i in range(120):
        lines.append(f"def function_{i}(value, *, scale={rng.randint(1, 9)}):")
        lines.append(f"    '''Scale value {i} — ünïcode ✓.'''")
        lines.append(f"    return value * scale + {rng.random():.6f}\n")
    return "\n".join(lines) + "\n"


def samples_of(text: str, enc: LiteralEncoder, cfg: SampleConfig, seed: int = 0, path: str = "pkg/mod.py", defs=()):
    return list(document_samples(text, path, lambda: list(defs), lambda: cfg.seq_len, random.Random(seed), enc, cfg))


@pytest.mark.parametrize("seed", range(4))
def test_windows_of_fim_and_plain_samples_rebuild_the_document_exactly(tokenizer_dir, seed):
    enc = LiteralEncoder(tokenizer_dir)
    cfg = SampleConfig(seq_len=200, fim_rate=0.7, snippet_rate=0.0)
    text = long_document()
    samples = samples_of(text, enc, cfg, seed)
    assert len(samples) > 5
    rebuilt = []
    for s in samples:
        mode, header, window, _ = split_sample(s.ids, enc)
        assert mode is s.mode
        if mode is Mode.PLAIN:
            assert window.startswith("# file: pkg/mod.py\n")
            window = window[len("# file: pkg/mod.py\n") :]
        else:
            assert header == "# file: pkg/mod.py\n"
        rebuilt.append(window)
        assert len(s.ids) <= cfg.seq_len
    assert "".join(rebuilt) == text


def test_loss_mask_skips_only_the_prompt_scaffold(tokenizer_dir):
    enc = LiteralEncoder(tokenizer_dir)
    for s in samples_of(long_document(), enc, SampleConfig(seq_len=256)):
        assert len(s.mask) == len(s.ids)
        assert s.mask[:2] == [0, 0] and all(s.mask[2:])


def test_mode_rates_and_determinism(tokenizer_dir):
    enc = LiteralEncoder(tokenizer_dir)
    cfg = SampleConfig(seq_len=160, fim_rate=0.9, spm_rate=0.6, snippet_rate=0.0)
    text = long_document()
    modes = Counter(s.mode for seed in range(6) for s in samples_of(text, enc, cfg, seed))
    total = sum(modes.values())
    assert total > 200
    assert 0.04 < modes[Mode.PLAIN] / total < 0.17
    assert 0.45 < modes[Mode.SPM] / (modes[Mode.SPM] + modes[Mode.PSM]) < 0.75
    assert [s.ids for s in samples_of(text, enc, cfg, 3)] == [s.ids for s in samples_of(text, enc, cfg, 3)]
    assert [s.ids for s in samples_of(text, enc, cfg, 3)] != [s.ids for s in samples_of(text, enc, cfg, 4)]


def test_middles_favour_single_lines_and_small_blocks():
    text = long_document()
    cfg = SampleConfig()
    rng = random.Random(0)
    spans = [choose_middle(text, rng, cfg) for _ in range(3000)]
    newlines = Counter(text[a:b].count("\n") for a, b in spans)
    assert newlines[0] / len(spans) > 0.55
    assert sum(n for k, n in newlines.items() if 1 <= k <= 3) > sum(n for k, n in newlines.items() if k > 3)
    empty = sum(a == b for a, b in spans) / len(spans)
    assert 0.005 < empty < 0.05
    one_line = [(a, b) for a, b in spans if a < b and "\n" not in text[a:b]]
    line_ends = sum(text[b] == "\n" for a, b in one_line)
    assert line_ends / len(one_line) > 0.8  # a completion usually runs to the end of the line


def test_cut_windows_respect_the_budget_even_for_an_overlong_line(tokenizer_dir):
    enc = LiteralEncoder(tokenizer_dir)
    text = "x = 1\n" + "y = " + " + ".join(f"v{i}" for i in range(400)) + "\nz = 2\n"
    cutter = WindowCutter(text, enc.token_starts(text))
    pieces = []
    while (window := cutter.next(64)) is not None:
        pieces.append(text[window[0] : window[1]])
    assert "".join(pieces) == text
    assert all(len(enc.encode(p)) <= 64 + 2 for p in pieces)
    assert len(pieces) > 3
    with pytest.raises(ValueError, match="budget"):
        WindowCutter(text, enc.token_starts(text)).next(4)


def test_empty_document_gives_one_sample_with_an_empty_window(tokenizer_dir):
    enc = LiteralEncoder(tokenizer_dir)
    samples = samples_of("", enc, SampleConfig(seq_len=160))
    assert len(samples) == 1 and split_sample(samples[0].ids, enc)[2] == ""


def test_cross_file_header_lists_snippets_before_the_file_line(tokenizer_dir):
    enc = LiteralEncoder(tokenizer_dir)
    defs = [Definition("pkg/geometry.py", "Point", "class Point:\n    x: float\n")]
    cfg = SampleConfig(seq_len=512, snippet_rate=1.0, fim_rate=1.0)
    samples = samples_of("p = Point()\nprint(p)\n", enc, cfg, defs=defs)
    _, header, window, _ = split_sample(samples[0].ids, enc)
    assert header == "# file: pkg/geometry.py\nclass Point:\n    x: float\n# file: pkg/mod.py\n"
    assert samples[0].snippets == 1 and window == "p = Point()\nprint(p)\n"


def test_snippets_are_dropped_when_they_exceed_the_header_budget(tokenizer_dir):
    enc = LiteralEncoder(tokenizer_dir)
    big = Definition("pkg/big.py", "big", "def big():\n" + "    x = 1\n" * 200)
    small = Definition("pkg/small.py", "small", "def small(): ...\n")
    cfg = SampleConfig(seq_len=256, snippet_rate=1.0, header_fraction=0.25)
    samples = samples_of("small()\n", enc, cfg, defs=[small, big])
    assert samples[0].snippets == 1 and all(len(s.ids) <= 256 for s in samples)


def test_config_rejects_out_of_range_values():
    with pytest.raises(ValueError, match="fim_rate"):
        SampleConfig(fim_rate=1.5)
    with pytest.raises(ValueError, match="seq_len"):
        SampleConfig(seq_len=16)


def fim_parts(ids: list[int], enc: LiteralEncoder) -> tuple[str, str, str]:
    """(prefix, middle, suffix) of a FIM sample, read back from its ids."""
    sp = enc.special
    body = ids[2:-1]
    at = {n: body.index(sp.require(n)) for n in ("code_prefix", "code_suffix", "code_middle")}
    pre, suf, mid = at["code_prefix"], at["code_suffix"], at["code_middle"]
    prefix_end, suffix_end = (mid, pre) if suf < pre else (suf, mid)
    return enc.decode(body[pre + 1 : prefix_end]), enc.decode(body[mid + 1 :]), enc.decode(body[suf + 1 : suffix_end])


@pytest.mark.parametrize("seed", range(3))
def test_line_level_fim_middles_are_whole_lines(tokenizer_dir, seed):
    enc = LiteralEncoder(tokenizer_dir)
    cfg = SampleConfig(seq_len=200, fim_rate=1.0, snippet_rate=0.0, middle="lines", empty_middle_rate=0.1)
    text = long_document()
    samples = samples_of(text, enc, cfg, seed)
    parts = [fim_parts(s.ids, enc) for s in samples]
    assert len(parts) > 5 and "".join(p + m + s for p, m, s in parts) == text
    lines = set(text.splitlines())
    for prefix, middle, suffix in parts:
        assert prefix == "" or prefix.endswith("\n"), (prefix[-20:], middle)
        assert middle == "" or suffix == "" or suffix.startswith("\n"), (middle, suffix[:20])
        assert all(line in lines for line in middle.split("\n")), middle
    middles = [m for _, m, _ in parts]
    assert any(m == "" for m in middles) and any("\n" in m for m in middles)
    assert any(m and "\n" not in m for m in middles)


def test_mixed_middles_cut_inside_lines_where_line_level_ones_never_do():
    text = long_document()
    starts = {0} | {i + 1 for i, c in enumerate(text) if c == "\n"}
    for middle, inside in (("mixed", True), ("lines", False)):
        rng, cfg = random.Random(1), SampleConfig(middle=middle)
        spans = [choose_middle(text, rng, cfg) for _ in range(500)]
        assert any(a not in starts for a, _ in spans) is inside
    with pytest.raises(ValueError, match="middle"):
        SampleConfig(middle="words")
