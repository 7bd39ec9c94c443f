"""End to end: every language the clients start the server for completes through
`lsp_server --stdio` with the model run (a tiny random GLM-5), under the default settings and
with abstention off.

Each file opens with the strings and comments of its language that hold brackets (template
strings, raw strings, block comments, Rust lifetimes), so the decode-time monitor and the
retrieval and reranking checks have to read them as that language does. One server serves
the module; the settings change between the phases through `workspace/didChangeConfiguration`.
"""

from __future__ import annotations

import sys

import pytest
import pytest_asyncio
from lsprotocol import types

from lsp_harness import Session

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

# (file name, languageId, text); the cursor is at the end of the line that ends with `return `
SOURCES = {
    "python": ("totals.py", "python", '''\
LABEL = "total ( of ["  # a ( in a comment


def total(items):
    s = 0
    for item in items:
        s += item.price
    return 
'''),
    "javascript": ("totals.js", "javascript", '''\
// a ( in a comment
const label = `total (${"}"} of [`;
/* { in a block comment */
function total(items) {
  let sum = 0;
  for (const item of items) {
    sum += item.price;
  }
  return 
}
'''),
    "typescript": ("totals.ts", "typescript", '''\
interface Item { price: number }
const label: string = `total (${"}"} of [`;
/* { in a block comment */
export function total(items: Item[]): number {
  let sum = 0;
  for (const item of items) {
    sum += item.price;
  }
  return 
}
'''),
    "go": ("totals.go", "go", '''\
package totals

// a ( in a comment
var label = `total (
of [`

type Item struct{ Price int }

func Total(items []Item) int {
	sum := 0
	for _, item := range items {
		sum += item.Price
	}
	return 
}
'''),
    "rust": ("totals.rs", "rust", '''\
// a ( in a comment
const LABEL: &str = r#"total (" of ["#;
struct Item<'a> { name: &'a str, price: u32 }

fn total<'a>(items: &[Item<'a>]) -> u32 {
    let mut sum = 0;
    for item in items {
        sum += item.price;
    }
    return 
}
'''),
}
LANGUAGES = tuple(SOURCES)


def cursor(text: str) -> tuple[int, int]:
    """The end of the line that ends with `return ` (the hole)."""
    for row, line in enumerate(text.split("\n")):
        if line.endswith("return "):
            return row, len(line)
    raise AssertionError("no `return ` line")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def served(tiny_checkpoint, tmp_path_factory):
    root = tmp_path_factory.mktemp("languages")
    for name, _, text in SOURCES.values():
        (root / name).write_text(text)
    log = root.parent / "languages-server.log"
    argv = [sys.executable, "-m", "lsp_server", "--stdio", "--model", str(tiny_checkpoint), "--log-file", str(log)]
    options = {"warmup": False, "debounceMs": 0, "maxTokens": 8, "singleLineMaxTokens": 6, "diagnostics": False}
    session = await Session.start(argv, [root], init_options=options, log_file=log)
    await session.wait_ready(timeout=120)
    uris = {lang: session.open(root / name, text, language_id) for lang, (name, language_id, text) in SOURCES.items()}
    yield session, uris
    assert await session.stop() == 0


def configure(session: Session, settings: dict) -> None:
    session.client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"glm5": settings}))


async def complete(session: Session, uri: str, language: str, automatic: bool) -> tuple[types.InlineCompletionList, dict]:
    """One completion at the hole (an error response fails the test) and the server's record of it."""
    row, column = cursor(SOURCES[language][2])
    result = await session.inline(uri, row, column, automatic=automatic)
    records = (await session.stats(recent=1))["recent"]
    assert records and records[-1]["uri"] == uri
    return result, records[-1]


@pytest.mark.parametrize("language", LANGUAGES)
async def test_default_settings_answer_without_error(served, language):
    session, uris = served
    configure(session, {"abstain": True, "skipUnreachable": True})
    result, record = await complete(session, uris[language], language, automatic=True)
    assert result is not None and result.items is not None
    assert record["outcome"] != "failed"


@pytest.mark.parametrize("language", LANGUAGES)
async def test_default_settings_with_the_model_run(served, language):
    """Abstention on, as shipped, but the model made to run (no skipping): the constraint the
    monitor builds for the language is applied, not refused."""
    session, uris = served
    configure(session, {"abstain": True, "skipUnreachable": False})
    result, record = await complete(session, uris[language], language, automatic=True)
    assert result is not None and result.items is not None
    assert record["outcome"] != "failed" and record["decode_steps"] > 0


@pytest.mark.parametrize("language", LANGUAGES)
async def test_abstention_off_an_explicit_request_shows_items(served, language):
    session, uris = served
    configure(session, {"abstain": False})
    result, record = await complete(session, uris[language], language, automatic=False)
    assert record["outcome"] == "answered" and record["decode_steps"] > 0
    assert result.items and result.items[0].insert_text


@pytest.mark.parametrize("language", LANGUAGES)
async def test_the_monitor_reads_the_languages_strings_and_comments(served, language):
    """At the hole only the function's `{` is open (Python: nothing): the brackets in the
    strings and comments above are text, and the monitor steered every decode step."""
    session, uris = served
    configure(session, {"abstain": False})
    row, column = cursor(SOURCES[language][2])
    explained = await session.command("glm5.explainContext", {"uri": uris[language], "position": {"line": row, "character": column}})
    assert explained["constraint"]["openBrackets"] == ("" if language == "python" else "{")
    assert explained["constraint"]["report"]["steps"] > 0
