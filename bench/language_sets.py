"""Held-out sets for the languages other than Python: JavaScript, TypeScript, Go, Rust.

Every item is one blanked line of a real source file (`quality_sets.Item`), asked at the start of
the blanked line. The files come from permissively licensed packages, fetched once into the cache
with the ordinary clients (`npm pack`, `apt-get download`) at pinned versions; the embedded model
was trained on Python only, so it has seen none of them (nor any file of these languages).

| language | package (version) | licence | files |
|---|---|---|---|
| JavaScript | semver 7.6.3 (npm) | ISC | classes/, functions/, ranges/ |
| JavaScript | commander 12.1.0 (npm) | MIT | lib/ |
| TypeScript | rxjs 7.8.1 (npm) | Apache-2.0 | src/internal/operators/ |
| Go | golang-1.19-src 1.19.8-2 (Debian) | BSD-3-Clause | strings, bufio, encoding/csv, text/tabwriter |
| Rust | librust-semver-dev 1.0.14-1 (Debian) | MIT OR Apache-2.0 | semver-1.0.14/src |
| Rust | librust-either-dev 1.6.1-1 (Debian) | MIT OR Apache-2.0 | either-1.6.1/src |

Each source's directory is one workspace (a copy under the run's work folder: the benchmark
writes each blanked file there while its item is asked, and puts the original back after). The holes are random lines of its files (tests left out) that are code:
not blank, not a comment, and not only closing punctuation (`}`, `});`: free points for any
completer that repeats the brackets).

Invariants: the items depend only on the package versions, the count and the seed.
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

from bench.quality_sets import Item, _blanked


@dataclass(frozen=True, slots=True)
class Source:
    language: str
    kind: str  # "npm" (npm pack) or "deb" (apt-get download)
    spec: str  # name@version or name=version
    licence: str
    directories: tuple[str, ...]  # inside the unpacked package; each one workspace
    extension: str


SOURCES = (
    Source("javascript", "npm", "semver@7.6.3", "ISC", ("package/classes", "package/functions", "package/ranges"), ".js"),
    Source("javascript", "npm", "commander@12.1.0", "MIT", ("package/lib",), ".js"),
    Source("typescript", "npm", "rxjs@7.8.1", "Apache-2.0", ("package/src/internal/operators",), ".ts"),
    Source("go", "deb", "golang-1.19-src=1.19.8-2", "BSD-3-Clause",
           tuple(f"usr/share/go-1.19/src/{d}" for d in ("strings", "bufio", "encoding/csv", "text/tabwriter")), ".go"),
    Source("rust", "deb", "librust-semver-dev=1.0.14-1", "MIT OR Apache-2.0", ("usr/share/cargo/registry/semver-1.0.14/src",), ".rs"),
    Source("rust", "deb", "librust-either-dev=1.6.1-1", "MIT OR Apache-2.0", ("usr/share/cargo/registry/either-1.6.1/src",), ".rs"),
)
LANGUAGES = ("javascript", "typescript", "go", "rust")
_TESTS = re.compile(r"(^|/)(tests?|__tests__|testdata)(/|$)|_test\.go$|\.(test|spec)\.[jt]s$")
_COMMENT = ("//", "/*", "*", "#!")
_ONLY_CLOSING = re.compile(r"^[)\]}>;,\s]*$")


def fetch_source(cache: Path, source: Source) -> Path:
    """The unpacked package of `source` under `cache` (fetched once)."""
    root = cache / "languages" / re.sub(r"[^\w.-]", "-", source.spec)
    if root.is_dir():
        return root
    staging = root.parent / f"{root.name}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    download = staging / "download"
    download.mkdir(parents=True)
    if source.kind == "npm":
        subprocess.run(["npm", "pack", source.spec, "--pack-destination", str(download)], check=True, stdout=subprocess.DEVNULL)
        archive = next(download.glob("*.tgz"))
        with tarfile.open(archive) as tar:
            tar.extractall(staging, filter="data")
    else:
        subprocess.run(["apt-get", "download", source.spec], check=True, cwd=download, stdout=subprocess.DEVNULL)
        subprocess.run(["dpkg-deb", "-x", str(next(download.glob("*.deb"))), str(staging)], check=True)
    shutil.rmtree(download)
    staging.rename(root)
    return root


def language_items(cache: Path, work: Path, language: str, count: int, seed: int = 17) -> list[Item]:
    """`count` holes in `language`, spread over its sources' directories."""
    sources = [s for s in SOURCES if s.language == language]
    directories = [(s, d) for s in sources for d in s.directories]
    items: list[Item] = []
    for n, (source, directory) in enumerate(directories):
        share = count // len(directories) + (n < count % len(directories))
        workspace = _workspace(fetch_source(cache, source) / directory, work / language / f"{source.spec.split('@')[0].split('=')[0]}-{n}", source)
        items += _holes(workspace, source, share, random.Random(f"{seed}:{source.spec}:{directory}"))
    return items


def _workspace(directory: Path, root: Path, source: Source) -> Path:
    """A copy of the directory's source files (tests left out) as the item's workspace."""
    if root.is_dir():
        shutil.rmtree(root)
    for path in sorted(directory.rglob(f"*{source.extension}")):
        rel = path.relative_to(directory)
        if _TESTS.search(str(rel)) or path.name.endswith(".d.ts"):
            continue
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    return root


def _holes(root: Path, source: Source, count: int, rng: random.Random) -> list[Item]:
    found: list[tuple[Path, int]] = []
    for path in sorted(root.rglob(f"*{source.extension}")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if not 500 <= len(text) <= 60_000:
            continue
        for i, line in enumerate(text.split("\n")):
            body = line.strip()
            if body and not body.startswith(_COMMENT) and not _ONLY_CLOSING.match(body) and len(body) <= 100:
                found.append((path, i))
    items = []
    for path, line in sorted(rng.sample(found, min(count, len(found)))):
        lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
        items.append(_blanked(source.language, root, path, lines, line))
    return items
