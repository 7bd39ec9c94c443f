"""Completion candidates from the IDE state, without the model.

Role: for one cursor (`constraints.Site`), propose single-line texts to insert there; the
server scores them under the model with the model's own n-best and the reranker picks one.
Four sources, each tagged:
- "similar-line": the line after the line most like the one above the cursor (token Jaccard),
  in this file and in related files of its language (open documents, files this one imports or
  is imported by, files of its directory; JavaScript and TypeScript count as one language),
  re-indented to the cursor's block. Its best candidate alone is the
  non-neural baseline "line after the most similar line". Each carries its match's similarity
  and its support: how many of the best matches are followed by the same text (evidence the
  reranker weighs).
- "similar-window": the same search with a wider window (the second line above the cursor and
  the line below it also have to match), which finds the right line more often where the code
  around a blank line repeats.
- "similar-context": lines of this file whose neighbours (the lines above and below) look like
  the cursor's (the "most similar line in the file" baseline of `training.baselines`).
- "identifier": completions of the identifier being typed from the names defined at the cursor,
  the members of its qualifier (`geometry.cen|`) and the workspace index.
- "call": calls to workspace functions this file can reach by import, with their parameter
  names as arguments (`centroid(points)`), once something is typed on the line (Python only:
  the parameters are read from `def` signatures).
The identifier source reads the cursor's defined names and members where the IDE state has them
(Python, `constraints.Site`), else only the workspace index's definitions.

Invariants: pure apart from reading the index and files; never raises on content; every
candidate is one line and starts where the cursor is (the typed text is not repeated); a text
appears once per source that proposed it (each with its own evidence); at most `limit`
distinct texts, best guesses of each source first.
"""

from __future__ import annotations

import heapq
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache

from context.index import WorkspaceIndex
from context.constraints import Site
from context.languages import language_named
from context.similar import line_tokens
from context.tags import MAX_BUFFER_TAG_CHARS, Import, extract_tags

MAX_RELATED_FILES = 24
MAX_FILE_CHARS = 200_000
SUPPORT_WINDOW = 64  # the best-matching lines whose following lines are placed and counted
SUPPORT_RATIO = 0.8  # a match supports its following line when it scores this share of the best
WINDOW_ABOVE, WINDOW_BELOW = 0.25, 0.5  # "similar-window": weights of the second line above and the line below
WINDOW_FLOOR = 0.5  # "similar-window" widens only matches whose line scores at least this share of the best
_TOKEN = re.compile(r"\w+|[^\w\s]")
_DEF = re.compile(r"\bdef\s+([A-Za-z_]\w*)\s*\(([^)]*)\)", re.S)
_IDENT = re.compile(r"[A-Za-z_]\w*")
_ASSIGNED = re.compile(r"^\s*([A-Za-z_]\w*)\s*(?::[^=]*)?=\s*$")
_RETURNS = re.compile(r"\)\s*->\s*([^:]+):")
_BUILTIN_TYPES = {t.__name__: t for t in (int, float, complex, str, bytes, bool, list, dict, set, tuple, frozenset)} | {"None": type(None)}
LATER_LINES = 30  # lines below the cursor searched for the assigned name's members
IMPORTS_TTL_S = 10.0
IMPORTS_KEPT = 32
_IMPORTS: dict[tuple[str, str, tuple[str, ...]], tuple[float, tuple[Import, ...]]] = {}  # see `_imports`
_SCRIPT_FAMILY = ("javascript", "typescript", "tsx")
TextSource = Callable[[str], str | None]


@dataclass(frozen=True, slots=True)
class Retrieved:
    text: str  # what to insert at the cursor (one line)
    source: str  # "similar-line", "similar-context", "identifier" or "call"
    detail: str = ""  # where it came from
    similarity: float = 0.0  # similar-line: the best match's Jaccard; similar-context: the mean of its two
    support: int = 0  # similar-line: how many well-matching lines are followed by this same text


@dataclass(frozen=True, slots=True)
class RetrievalOptions:
    similar: int = 3
    windows: int = 2
    context: int = 2
    identifiers: int = 4
    calls: int = 4
    limit: int = 12


def retrieve(
    site: Site, index: WorkspaceIndex | None, read: TextSource, options: RetrievalOptions = RetrievalOptions()
) -> list[Retrieved]:
    """Candidates for `site` (see the module docstring): unique per source, at most `options.limit` texts."""
    lines, windows = similar(site, index, read, options.similar, options.windows)
    found = lines + windows
    found += context_lines(site, options.context)
    found += identifier_completions(site, index, options.identifiers)
    found += call_candidates(site, index, options.calls)
    unique: dict[tuple[str, str], Retrieved] = {}
    texts: set[str] = set()
    for item in found:
        key = (item.text, item.source)
        if not item.text.strip() or "\n" in item.text or key in unique:
            continue
        if item.text not in texts and len(texts) >= options.limit:
            continue
        texts.add(item.text)
        unique[key] = item
    return list(unique.values())


# ---- the line after the most similar line -------------------------------------------------


def similar_lines(site: Site, index: WorkspaceIndex | None, read: TextSource, limit: int = 1) -> list[Retrieved]:
    """The lines after the lines most similar to the one above the cursor, best first."""
    return similar(site, index, read, limit, 0)[0]


def similar(
    site: Site, index: WorkspaceIndex | None, read: TextSource, lines_limit: int, windows_limit: int
) -> tuple[list[Retrieved], list[Retrieved]]:
    """The "similar-line" and "similar-window" candidates, from one scan of the files.

    A similar-line match scores the Jaccard of its line and the line above the cursor; a
    similar-window match also scores `WINDOW_ABOVE` x the similarity of the line above it to the
    second line above the cursor, and `WINDOW_BELOW` x that of the line after its follower to the
    line below the cursor (a blank line's neighbours constrain it from both sides). The weights
    were chosen on the tuning packages: the window's best answer is right for 64 of 515 items,
    the line's for 40."""
    lines = site.snapshot.text.splitlines()
    row = site.position.line
    above = _nearest_code(lines, row - 1, -1)
    if above is None:
        return [], []
    second, below = _nearest_code(lines, above - 1, -1), _nearest_code(lines, row + 1, +1)
    reference = _tokens(lines[above])
    reference_above = _tokens(lines[second]) if second is not None else frozenset()
    reference_below = _tokens(lines[below]) if below is not None else frozenset()
    by_line: list[tuple[float, int, str, str, str]] = []  # (score, -distance, line, after, where)
    found: list[tuple[list[str], int, int, float]] = []  # (lines, row, next row, weight) of each entry of by_line
    for other, i, nxt, where, weight, distance in _matches(site, index, read, above):
        score = _jaccard(_tokens(other[i]), reference)
        if score > 0:
            by_line.append((score * weight, distance, other[i], other[nxt], where))
            found.append((other, i, nxt, weight))
    by_window = _widened(by_line, found, reference_above, reference_below) if windows_limit else []
    return (
        _ranked(site, lines[above], by_line, lines_limit, "similar-line"),
        _ranked(site, lines[above], by_window, windows_limit, "similar-window"),
    )


def _widened(
    by_line: list[tuple[float, int, str, str, str]],
    found: list[tuple[list[str], int, int, float]],
    reference_above: frozenset[str],
    reference_below: frozenset[str],
) -> list[tuple[float, int, str, str, str]]:
    """The similar-window scores of the line matches at least `WINDOW_FLOOR` as good as the best
    (best first, stopping once no later match can enter the best `SUPPORT_WINDOW`)."""
    by_window: list[tuple[float, int, str, str, str]] = []
    kept: list[float] = []  # min-heap of the best SUPPORT_WINDOW window scores so far
    bound = 1 + WINDOW_ABOVE + WINDOW_BELOW
    order = sorted(range(len(by_line)), key=lambda k: by_line[k][0], reverse=True)
    for k in order:
        line_score = by_line[k][0]
        if line_score < WINDOW_FLOOR * by_line[order[0]][0]:
            break
        if len(kept) >= SUPPORT_WINDOW and (line_score + WINDOW_ABOVE + WINDOW_BELOW) / bound < kept[0]:
            break
        other, i, nxt, weight = found[k]
        up, down = _nearest_code(other, i - 1, -1), _nearest_code(other, nxt + 1, +1)
        extra = WINDOW_ABOVE * _jaccard(_tokens(other[up]) if up is not None else frozenset(), reference_above)
        extra += WINDOW_BELOW * _jaccard(_tokens(other[down]) if down is not None else frozenset(), reference_below)
        score = (line_score + extra * weight) / bound
        by_window.append((score, *by_line[k][1:]))
        heapq.heappush(kept, score) if len(kept) < SUPPORT_WINDOW else heapq.heappushpop(kept, score)
    return by_window


def _matches(site: Site, index: WorkspaceIndex | None, read: TextSource, above: int) -> Iterator[tuple[list[str], int, int, str, float, int]]:
    """(lines, row, next code row, where, weight, -distance) for every code line, in this file
    and related files, that has a following code line (not the cursor's line nor the line above
    the cursor itself). Another file's matches weigh 0.95 and rank as far: ties go to this file."""
    snapshot, cursor_line = site.snapshot, site.position.line
    lines = snapshot.text.splitlines()
    following = _following_code(lines)
    for i in range(len(lines) - 1):
        if i in (above, cursor_line) or i + 1 == cursor_line:
            continue
        nxt = following[i + 1]
        if nxt is not None and nxt != cursor_line:
            yield lines, i, nxt, f"{snapshot.path}:{nxt + 1}", 1.0, -abs(i - cursor_line)
    for path in _related_files(site, index):
        text = read(path)
        if text is None or len(text) > MAX_FILE_CHARS:
            continue
        other = text.splitlines()
        following = _following_code(other)
        for i, tokens in enumerate(line_tokens(text)[: len(other) - 1]):
            nxt = following[i + 1]
            if tokens and nxt is not None:
                yield other, i, nxt, f"{path}:{nxt + 1}", 0.95, -10_000


def _ranked(site: Site, above: str, scored: list[tuple[float, int, str, str, str]], limit: int, source: str) -> list[Retrieved]:
    """The best `limit` distinct placed texts of `scored` matches, each with its best match's score
    and its support (how many good matches are followed by the same text)."""
    scored.sort(key=lambda s: (s[0], s[1]), reverse=True)
    best: dict[str, tuple[float, str]] = {}  # text -> (its best match's score, where)
    support: dict[str, int] = {}
    for k, (score, _, line, after, where) in enumerate(scored):
        if k >= SUPPORT_WINDOW and len(best) >= limit:
            break
        text = _place(site, above, line, after)
        if text is None:
            continue
        best.setdefault(text, (score, where))
        support[text] = support.get(text, 0) + (score >= SUPPORT_RATIO * scored[0][0])
    return [Retrieved(text, source, where, score, support[text]) for text, (score, where) in list(best.items())[:limit]]


def context_lines(site: Site, limit: int = 2) -> list[Retrieved]:
    """Lines of this file whose neighbours look like the cursor's: the line above each scored
    against the line above the cursor, the line below against the line below (best first)."""
    lines = site.snapshot.text.splitlines()
    row = site.position.line
    above_i, below_i = _nearest_code(lines, row - 1, -1), _nearest_code(lines, row + 1, +1)
    want_above = _tokens(lines[above_i]) if above_i is not None else frozenset()
    want_below = _tokens(lines[below_i]) if below_i is not None else frozenset()
    scored: list[tuple[float, int, int]] = []
    for i, line in enumerate(lines):
        if i == row or not line.strip():
            continue
        up, down = _nearest_code(lines, i - 1, -1), _nearest_code(lines, i + 1, +1)
        score = _jaccard(_tokens(lines[up]) if up is not None and up != row else frozenset(), want_above)
        score += _jaccard(_tokens(lines[down]) if down is not None and down != row else frozenset(), want_below)
        if score > 0:
            scored.append((score, -abs(i - row), i))
    scored.sort(reverse=True)
    found: list[Retrieved] = []
    for score, _, i in scored:
        text = _continue(site, lines[i])
        if text is not None and text.strip() and all(f.text != text for f in found):
            found.append(Retrieved(text, "similar-context", f"{site.snapshot.path}:{i + 1}", score / 2))
            if len(found) >= limit:
                break
    return found


def previous_line(site: Site) -> str | None:
    """The nearest non-blank line above the cursor, placed at the cursor (a baseline)."""
    lines = site.snapshot.text.splitlines()
    above = _nearest_code(lines, site.position.line - 1, -1)
    if above is None:
        return None
    return _continue(site, lines[above])


def _place(site: Site, above: str, model_line: str, after: str) -> str | None:
    """`after` (the line following `model_line`) moved to the cursor: re-indented like the step
    from `model_line` to `after`, applied to the line above the cursor, in the characters the
    lines indent with (tabs in Go)."""
    base, step = above[: _indent(above)], _indent(after) - _indent(model_line)
    lead = base + after[_indent(model_line) : _indent(after)] if step >= 0 else base[: max(0, len(base) + step)]
    return _continue(site, lead + after.strip())


def _continue(site: Site, line: str) -> str | None:
    """`line` as an insertion at the cursor: the typed part of the cursor line removed (None when
    the line does not start with it)."""
    typed = site.line_prefix
    if not typed:
        return line
    if not typed.strip():
        return line.lstrip()
    body = line.lstrip()
    head = typed.lstrip()
    return body[len(head) :] if body.startswith(head) and len(body) > len(head) else None


def _related_files(site: Site, index: WorkspaceIndex | None) -> list[str]:
    """Files of the cursor's language (family) this one imports, that import it, or beside it."""
    path = site.snapshot.path
    if index is None or not path:
        return []
    extensions = _family_extensions(site)
    related = [i.resolved_path for i in _imports(site, index) if i.resolved_path]
    related += index.importers_of(path)
    related += sorted(index.files_in(os.path.dirname(path)))
    unique = [p for p in dict.fromkeys(related) if p != path and p.lower().endswith(extensions)]
    return unique[:MAX_RELATED_FILES]


def _family_extensions(site: Site) -> tuple[str, ...]:
    """The file extensions whose lines are worth matching at the cursor: its language's, and for
    JavaScript and the TypeScripts each other's (a project mixes them)."""
    language = site.snapshot.language
    if language is None:
        return (os.path.splitext(site.snapshot.path or "")[1].lower() or ".py",)
    family = _SCRIPT_FAMILY if language.name in _SCRIPT_FAMILY else (language.name,)
    return tuple(ext for name in family for ext in language_named(name).extensions)


def _nearest_code(lines: list[str], start: int, step: int) -> int | None:
    i = start
    while 0 <= i < len(lines):
        if lines[i].strip():
            return i
        i += step
    return None


def _following_code(lines: list[str]) -> list[int | None]:
    """For each line, the index of the first non-blank line at or after it (None past the last):
    `_nearest_code(lines, i, +1)` for every `i` in one pass, so a long run of blank lines costs
    linear time rather than a scan from each of its lines."""
    following: list[int | None] = [None] * len(lines)
    nearest = None
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].strip():
            nearest = i
        following[i] = nearest
    return following


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


@lru_cache(maxsize=65536)  # every request re-scores the lines of this file and its related files
def _tokens(line: str) -> frozenset[str]:
    return frozenset(_TOKEN.findall(line))


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 0.0


# ---- identifiers and calls -----------------------------------------------------------------


def identifier_completions(site: Site, index: WorkspaceIndex | None, limit: int) -> list[Retrieved]:
    """Rests of the identifiers that start with the typed partial word (shortest first)."""
    typed = site.typed
    if not typed:
        return []
    if site.qualifier is not None:
        pool = set(site.members.get(site.qualifier, ()))
    else:
        pool = set(site.defined or ())
        if index is not None and len(typed) >= 2:
            pool |= {d.name for d in _definitions_starting(index, typed)}
    names = sorted((n for n in pool if n.startswith(typed) and n != typed and not n.startswith("__")), key=lambda n: (len(n), n))
    return [Retrieved(n[len(typed) :], "identifier", n) for n in names[:limit]]


def _definitions_starting(index: WorkspaceIndex, typed: str):
    for path in index.files()[:2000]:
        tags = index.file_tags(path)
        if tags is None:
            continue
        for definition in tags.definitions:
            if definition.name.startswith(typed) and definition.kind not in ("method", "field"):
                yield definition


def call_candidates(site: Site, index: WorkspaceIndex | None, limit: int) -> list[Retrieved]:
    """Calls, with parameter names as arguments, of workspace functions reachable from the cursor:
    after `mod.`, the module's functions; otherwise the functions this file imports. None at the
    start of a blank line: a bare call statement there was right for none of the 1,259 proposed
    on the tuning packages (the line is usually `x = f(...)` or `return f(...)`)."""
    if index is None or site.snapshot.path is None or site.language != "python":
        return []
    if not site.line_prefix.strip() and not site.typed:
        return []
    targets: list[tuple[str, str]] = []  # (name, file)
    if site.qualifier is not None:
        members = set(site.members.get(site.qualifier, ()))
        for item in _imports(site, index):
            if item.resolved_path and item.module.split(".")[-1] == site.qualifier:
                targets += [(n, item.resolved_path) for n in sorted(members)]
    else:
        for item in _imports(site, index):
            if item.resolved_path:
                targets += [(n, item.resolved_path) for n in item.names]
    found: list[Retrieved] = []
    used = _members_used_later(site)
    for name, file in targets:
        if not name.startswith(site.typed):
            continue
        params = _parameters(index, name, file)
        if params is None or not _returns_members(index, name, file, used):
            continue
        call = f"{name}({', '.join(params)})"[len(site.typed) :]
        found.append(Retrieved(call, "call", f"{file}:{name}"))
        if len(found) >= limit:
            break
    return found


def _imports(site: Site, index: WorkspaceIndex) -> tuple[Import, ...]:
    """The imports of the open buffer (the index may not have seen its latest text). Tagging the
    whole buffer costs a few milliseconds a hundred lines and every keystroke asks: a Python
    buffer's imports are kept while its import lines stay the same, for at most
    `IMPORTS_TTL_S` (a file created meanwhile may make an import resolve). None for a buffer
    over `MAX_BUFFER_TAG_CHARS`."""
    snapshot = site.snapshot
    if len(snapshot.text) > MAX_BUFFER_TAG_CHARS:
        return ()
    if site.language != "python" or not snapshot.path:
        return extract_tags(snapshot, index.resolver).imports
    key = (snapshot.path, _import_lines(snapshot.text), index.resolver.roots)
    now = time.monotonic()
    kept = _IMPORTS.get(key)
    if kept is not None and now - kept[0] < IMPORTS_TTL_S:
        return kept[1]
    imports = extract_tags(snapshot, index.resolver).imports
    if len(_IMPORTS) >= IMPORTS_KEPT:
        _IMPORTS.pop(next(iter(_IMPORTS)))
    _IMPORTS[key] = (now, imports)
    return imports


def _import_lines(text: str) -> str:
    """The lines of Python `text` that import (with the lines a parenthesised import continues
    on): what `_imports`'s result depends on."""
    kept: list[str] = []
    depth = 0
    for line in text.split("\n"):
        body = line.strip()
        if depth > 0 or body.startswith(("import ", "from ")):
            kept.append(body)
            depth = max(0, depth + body.count("(") - body.count(")"))
    return "\n".join(kept)


def _parameters(index: WorkspaceIndex, name: str, file: str) -> list[str] | None:
    """The required parameter names of function `name` defined in `file` (None if not a function)."""
    for definition in index.definitions(name):
        if definition.path != file or definition.kind not in ("function", "method"):
            continue
        match = _DEF.search(definition.text_snippet)
        if match is None or match.group(1) != name:
            continue
        return _required(match.group(2))
    return None


def _members_used_later(site: Site) -> frozenset[str]:
    """The members the name assigned on the cursor line (`center = |`) is used with in the
    lines below, up to the end of its block (`center.x`): what its value must have."""
    target = _ASSIGNED.match(site.line_prefix)
    if target is None:
        return frozenset()
    lines = site.snapshot.text.split("\n")
    indent = len(site.line_prefix) - len(site.line_prefix.lstrip())
    used: set[str] = set()
    for line in lines[site.position.line + 1 : site.position.line + 1 + LATER_LINES]:
        if line.strip() and len(line) - len(line.lstrip()) < indent:
            break
        used.update(re.findall(rf"\b{re.escape(target.group(1))}\.([A-Za-z_]\w*)", line))
    return frozenset(used)


def _returns_members(index: WorkspaceIndex, name: str, file: str, used: frozenset[str]) -> bool:
    """Whether function `name` of `file` may return a value with every member in `used`: False
    only when its return annotation is a builtin type that lacks one (`-> float` for `center.x`)."""
    if not used:
        return True
    for definition in index.definitions(name):
        if definition.path == file and (match := _RETURNS.search(definition.text_snippet)) is not None:
            builtin = _BUILTIN_TYPES.get(match.group(1).strip())
            return builtin is None or used <= frozenset(dir(builtin))
    return True


def _required(signature: str) -> list[str]:
    names: list[str] = []
    depth, part = 0, ""
    parts: list[str] = []
    for c in signature:
        depth += c in "([{"
        depth -= c in ")]}"
        if c == "," and depth == 0:
            parts.append(part)
            part = ""
        else:
            part += c
    parts.append(part)
    for raw in parts:
        item = raw.strip()
        if not item or "=" in item or item.startswith(("*", "/")):
            if item == "*":
                break
            continue
        name = _IDENT.match(item)
        if name and name.group() not in ("self", "cls"):
            names.append(name.group())
    return names

