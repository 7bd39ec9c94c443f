"""Fixtures for the training tests: a small corpus on disk with its manifest, and a small BPE
trained on it with the real `training.tokenizer` code. Built once per session, in seconds."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from training.corpus import Source, build_manifest
from training.data import BuildConfig, build
from training.samples import SampleConfig
from training.tokenizer import save, train_bpe
from training_support import train_args

PACKAGE_FILES = {
    "shapes/__init__.py": '"""Shapes."""\nfrom .geometry import Point, distance\n',
    "shapes/geometry.py": textwrap.dedent('''\
        """Points and distances."""
        import math


        class Point:
            def __init__(self, x: float, y: float) -> None:
                self.x = x
                self.y = y


        def distance(a: Point, b: Point) -> float:
            return math.hypot(a.x - b.x, a.y - b.y)
        '''),
    "shapes/polygon.py": textwrap.dedent('''\
        """Polygons built from points."""
        from .geometry import Point, distance


        def perimeter(points: list[Point]) -> float:
            total = 0.0
            for a, b in zip(points, points[1:] + points[:1]):
                total += distance(a, b)
            return total


        def square(side: float) -> list[Point]:
            return [Point(0, 0), Point(side, 0), Point(side, side), Point(0, side)]
        '''),
}


def _stdlib_like_files() -> dict[str, str]:
    """Real source text (a few stdlib modules) so the BPE and the samples see real Python."""
    import json as json_module
    import textwrap as textwrap_module

    files = {}
    for module in (json_module.decoder, json_module.encoder, textwrap_module):
        path = Path(module.__file__)
        files[f"lib/{path.name}"] = path.read_text()
    files["lib/unicode_names.py"] = 'GREETING = "héllo wörld ✓ 中文 🐍"\nTAB = "\\t"\r\nMARKER = "<|endoftext|>"\n'
    return files


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    for rel, text in {**PACKAGE_FILES, **_stdlib_like_files()}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(text.encode())
    return root


@pytest.fixture(scope="session")
def manifest_path(corpus_dir: Path) -> Path:
    files = tuple(sorted(str(p.relative_to(corpus_dir)) for p in corpus_dir.rglob("*.py")))
    source = Source("demo==1.0", "demo", "1.0", "MIT", "License-Expression", str(corpus_dir), files)
    # every file in train except polygon.py, which is held out (split by a path rule for tests)
    manifest = build_manifest([source], [], per_mille=0)
    for entry in manifest["files"]:
        entry["split"] = "heldout" if entry["path"] == "shapes/polygon.py" else "train"
    path = corpus_dir.parent / "manifest.json"
    path.write_text(json.dumps(manifest))
    return path


@pytest.fixture(scope="session")
def tokenizer_dir(corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    texts = [p.read_text() for p in sorted(corpus_dir.rglob("*.py"))]
    return save(train_bpe(texts, vocab_size=640), tmp_path_factory.mktemp("tokenizer"), model_max_length=256)


@pytest.fixture(scope="session")
def shards(manifest_path, tokenizer_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("train-shards")
    for split in ("train", "heldout"):
        build(manifest_path, tokenizer_dir, root / split, SampleConfig(seq_len=129), BuildConfig(split=split))
    return root


@pytest.fixture(scope="session")
def straight_run(shards, tokenizer_dir, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("straight")
    from training.train import main

    assert main(train_args(shards, tokenizer_dir, run_dir)) == 0
    return run_dir
