"""Training checkpoints: everything an interrupted run needs to continue exactly.

Role: save and restore model weights and buffers (routing biases included), optimizer state, the
step counters, the data stream position and every random generator, in one file written
atomically (temporary file, then rename), so a crash mid-write leaves the previous checkpoint.

Invariants:
- A resumed run with the same flags produces the same batches, learning rates and updates as
  the uninterrupted run (tested bit for bit on CPU).
- The run's configuration is stored with the checkpoint; resuming with a different model or data
  configuration is refused with the differing keys named.
"""

from __future__ import annotations

import os
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from training.stream import StreamState

FORMAT = 1


class CheckpointError(RuntimeError):
    """A training checkpoint cannot be used to resume this run."""


@dataclass(slots=True)
class TrainState:
    step: int = 0  # optimizer steps done
    tokens: int = 0  # positions trained on (batch x context per micro-batch)
    target_tokens: int = 0  # of which carried loss (mask 1)
    elapsed_s: float = 0.0  # training wall time, summed over resumed runs
    cpu_s: float = 0.0  # process CPU seconds of training steps, summed over resumed runs
    total_steps: int = 0  # fixed once known (the lr schedule depends on it)
    stream: StreamState = field(default_factory=StreamState)
    last_eval: dict = field(default_factory=dict)


def _rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: TrainState, config: dict) -> None:
    payload = {
        "format": FORMAT,
        "config": config,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "state": asdict(state) | {"stream": asdict(state.stream)},
        "rng": _rng_state(),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def load(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, config: dict, keys: tuple[str, ...]) -> TrainState:
    """Restore a checkpoint into `model` and `optimizer`; `keys` of `config` must match."""
    try:
        payload = torch.load(path, map_location="cpu", weights_only=False)
    except (OSError, RuntimeError, EOFError) as exc:
        raise CheckpointError(f"{path}: unreadable ({exc})") from exc
    if payload.get("format") != FORMAT:
        raise CheckpointError(f"{path}: checkpoint format {payload.get('format')!r}, expected {FORMAT}")
    differ = [k for k in keys if payload["config"].get(k) != config.get(k)]
    if differ:
        raise CheckpointError(f"{path}: was written with different {', '.join(differ)}; use another --run-dir")
    model.load_state_dict(payload["model"])
    optimizer.load_state_dict(payload["optimizer"])
    _set_rng_state(payload["rng"])
    raw = payload["state"]
    return TrainState(**(raw | {"stream": StreamState(**raw["stream"])}))
