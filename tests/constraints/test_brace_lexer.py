"""The monitor's rules for JavaScript, TypeScript, Go and Rust (and the plain fallback): brackets
inside each language's strings and comments are text, the line-end rule, and the masks over the
embedded model's vocabulary."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from context.brackets import open_brackets
from model_runtime.api import ConstraintSpec
from model_runtime.constraint.clike import BraceRules, BraceState, dialect_for
from model_runtime.constraint.monitor import compile_constraint
from model_runtime.constraint.vocab import Vocab


def first_refusal(language: str, text: str, single_line: bool = False) -> tuple[int, str] | None:
    """Where the rules refuse `text` as output (index, rule), or (len, rule) when it may not end there."""
    rules = BraceRules(dialect_for(language), single_line)
    state = BraceState()
    for i, ch in enumerate(text):
        state, why = rules.step(state, ch)
        if state is None:
            return i, why
    why = rules.can_end(state)
    return (len(text), why) if why else None


@pytest.mark.parametrize(("language", "text"), [
    ("javascript", "const a = `total (${f(1)} of [`; g(a);\n"),
    ("javascript", "const t = `${`${x}`}`;\n"),
    ("javascript", "const r = /[(]\\//g.test(s); // ( [\n"),
    ("javascript", "const q = a / b / (c + d); /* { */\n"),
    ("javascript", "return /\\)/.exec(s);\n"),
    ("typescript", "const s: string = '(' + \"[\" + `{`;\n"),
    ("typescript", "items.forEach((item) => {\n"),
    ("go", "s := `raw ( \\` + \"q(\\\"\" + string('(')\n"),
    ("go", "x := f(a, /* ) */ b) // ]\n"),
    ("rust", "fn f<'a>(x: &'a str) -> char {\n"),
    ("rust", "let c = '('; let d = '\\''; let e = '\\u{28}';\n"),
    ("rust", "let s = r#\"a (\"# ; let t = br\"[\"; let u = r##\"x\"#)\"##;\n"),
    ("rust", "'outer: loop { break 'outer; }\n"),
    ("rust", "/* a /* nested ( */ still a comment [ */ g();\n"),
    ("rust", "let s = \"two\n(lines\"; g();\n"),
    ("rust", "let r#type = 1;\n"),
])
def test_legal_code_with_brackets_in_strings_and_comments_passes(language, text):
    assert first_refusal(language, text) is None


@pytest.mark.parametrize(("language", "text", "refusal"), [
    ("javascript", "f(\"(\"]", (5, "bracket")),  # the ( in the string is not open
    ("javascript", "const a = `${f(1]`", (16, "bracket")),
    ("javascript", "x = [1, 2)", (9, "bracket")),
    ("go", "f(`(`]", (5, "bracket")),
    ("rust", "let c = '('; f(x]", (16, "bracket")),
    ("rust", "let s = r#\"(\"#; )", (16, "bracket")),
    ("rust", "/* /* */ ( */ ]", (14, "bracket")),  # a nested comment ends at its second */
    ("go", "/* /* */ ]", (9, "bracket")),  # Go comments do not nest
])
def test_a_closer_must_match_the_innermost_open_bracket(language, text, refusal):
    assert first_refusal(language, text) == refusal


@pytest.mark.parametrize(("language", "text", "ends"), [
    ("javascript", "foo(a, b\n", False),
    ("javascript", "foo(a, b)\n", True),
    ("javascript", "items.forEach((x) => {\n", True),  # a line may open a block continued below
    ("javascript", "const s = 'open\n", False),
    ("javascript", "const t = `open\n", False),
    ("javascript", "x = 1; /* open\n", False),
    ("javascript", "x = 1; // a ( comment\n", True),
    ("go", "if x > 0 {\n", True),
    ("rust", "fn f(x: &'a str) -> u32 {\n", True),  # a lifetime is no open character literal
    ("rust", "let c = '(';\n", True),
    ("rust", "let s = \"open\n", False),
])
def test_single_line_output_ends_only_where_its_line_is_whole(language, text, ends):
    refusal = first_refusal(language, text, single_line=True)
    assert (refusal is None) is ends
    if not ends:
        assert refusal == (len(text) - 1, "line")


def test_the_plain_rules_check_only_the_line_and_the_heal_prefix():
    rules = BraceRules(dialect_for("plaintext"), single_line=True)
    state = BraceState(heal="ab")
    assert rules.step(state, "x") == (None, "heal")
    for ch in "ab ) ] ' \" /*":
        state = rules.step(state, ch)[0]
    assert rules.can_end(state) == ""
    assert rules.step(state, "\n")[0].mode == rules.step(BraceState(), "\n")[0].mode


TEXT = st.text(alphabet="ab r#\"'`/*()[]{}\\\n$x1 ", max_size=40)


@pytest.mark.parametrize("language", ["javascript", "go", "rust"])
@settings(max_examples=300, deadline=None)
@given(text=TEXT)
def test_reading_facts_in_runs_equals_reading_them_char_by_char(language, text):
    rules = BraceRules(dialect_for(language), single_line=True)
    state = BraceState()
    for ch in text:
        rules.single_line = False
        state = rules.step(state, ch, False)[0] or state
    rules.single_line = True
    assert rules.facts(text) == state and rules.single_line is True


# ---- the monitor over a real vocabulary -------------------------------------------------------


def admitted(tokenizer, spec: ConstraintSpec, context: str) -> set[str]:
    vocab = Vocab.of(tokenizer)
    monitor = compile_constraint(spec, vocab, frozenset(tokenizer.special.eos_ids), context)
    return {vocab.strings[i] for i in monitor.compiled.mask(monitor.state, True, len(vocab)).nonzero().flatten().tolist()}


@pytest.mark.parametrize(("language", "context", "spec_brackets"), [
    ("javascript", "const label = `total (${\"}\"} of [`;\nfunction total(items) {\n  return sum(", "{("),
    ("typescript", "/* ( */ const s: string = '[';\nconst n = f(", "("),
    ("go", "var label = `total [\n(`\nfunc Total() int {\n\treturn sum(", "{("),
    ("rust", "fn total<'a>(items: &'a [u8]) -> u32 {\n    let c = '[';\n    sum(", "{("),
])
def test_each_language_compiles_and_closes_only_the_open_bracket(tokenizer, language, context, spec_brackets):
    legal = admitted(tokenizer, ConstraintSpec(language=language, open_brackets=spec_brackets), context)
    assert ")" in legal and "]" not in legal


@pytest.mark.parametrize(("language", "context"), [
    ("javascript", "const s = `a ("),
    ("go", "s := `a ("),
    ("rust", "let s = r#\"a ("),
    ("rust", "/* a ( /* b */ "),
])
def test_inside_a_string_or_comment_any_bracket_is_text(tokenizer, language, context):
    legal = admitted(tokenizer, ConstraintSpec(language=language), context)
    assert {")", "]", "}"} <= legal


def test_a_language_without_rules_gets_the_heal_prefix_and_the_line(tokenizer):
    spec = ConstraintSpec(language="plaintext", heal_prefix="ab", single_line=True)
    legal = admitted(tokenizer, spec, "x ")
    assert legal and all(s.startswith("ab") or "ab".startswith(s) for s in legal)


REPO = Path(__file__).resolve().parents[2]


def test_the_monitor_and_the_cursor_scan_agree_on_the_brackets_open_in_real_code():
    """`context.brackets` (the brackets the server says are open) and the monitor's lexer read
    the same text alike, at every 401st cut of this repository's TypeScript sources (template
    literals, regular expressions, comments)."""
    sources = sorted((REPO / "editor-client" / "vscode" / "src").glob("*.ts"))
    assert sources
    rules, cuts = BraceRules(dialect_for("typescript"), single_line=False), 0
    for path in sources:
        text = path.read_text(encoding="utf-8")
        for cut in range(0, len(text), 401):
            lexed = "".join(frame.char for frame in rules.facts(text[:cut]).stack)
            assert open_brackets(text[:cut], "typescript") == lexed, (path.name, cut)
            cuts += 1
    assert cuts > 100
