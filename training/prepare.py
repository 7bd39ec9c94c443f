"""Prepare all training data from a fresh checkout with one command.

Role: run the data stages in order with their defaults: corpus manifest
(`data/corpus/manifest.json`), tokenizer (`data/tokenizer/`), packed training and held-out shards
(`data/shards/train/`, `data/shards/heldout/`). Each stage can also be run alone as
`python -m training.<stage>`.

Run: `python -m training.prepare` (about 15 minutes on 2 CPU cores).
"""

from __future__ import annotations

import sys

from training import corpus, data, tokenizer


def main(argv: list[str] | None = None) -> int:
    extra = list(argv if argv is not None else sys.argv[1:])
    if extra:
        print("training.prepare takes no options; run the stages one by one to change them", file=sys.stderr)
        return 2
    for stage, args in (
        (corpus.main, []),
        (tokenizer.main, []),
        (data.main, ["--split", "train"]),
        (data.main, ["--split", "heldout"]),
    ):
        status = stage(args)
        if status:
            return status
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
