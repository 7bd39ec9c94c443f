"""The model in the evaluation and the model card: prompt budget, CLI with --model, card contents."""

from __future__ import annotations

import json

import pytest

from training import model_card
from training.evaluate import ModelCompleter
from training.evaluate import main as evaluate_main
from training.holes import Hole
from training.train import main as train_main

from training_support import train_args


@pytest.fixture(scope="module")
def loaded(straight_run):
    from model_runtime.runtime import load_model

    return load_model(straight_run / "export")


def test_prompts_fit_the_context_and_follow_the_serving_format(loaded):
    completer = ModelCompleter(loaded, context=128, max_new_tokens=16)
    prefix = "".join(f"value_{i} = compute({i})\n" for i in range(200))
    suffix = "\n" + "".join(f"check(value_{i})\n" for i in range(200))
    ids = completer.prompt_ids(prefix, suffix, "pkg/mod.py")
    sp = loaded.tokenizer.special
    assert len(ids) + 16 <= 128
    assert ids[:2] == [sp.gmask, sp.sop] and ids[-1] == sp.code_middle
    assert ids.index(sp.code_suffix) < ids.index(sp.code_prefix)  # SPM, as served
    text = loaded.tokenizer.decode(ids)
    assert text.startswith("# file: pkg/mod.py\n") and "value_199 = compute(199)\n" in text
    answers = completer.complete_many([Hole("a.py", "x = 1\n", "\n", ""), Hole("b.py", "def f():\n", "\n", "")])
    assert len(answers) == 2 and all(isinstance(a, str) and "\n" not in a for a in answers)


def test_evaluate_cli_with_a_model_reports_holes_and_loss(straight_run, manifest_path, tmp_path):
    out = tmp_path / "eval-model.json"
    args = ["--model", str(straight_run / "export"), "--problems", "HumanEval/2", "--manifest", str(manifest_path), "--out", str(out)]
    assert evaluate_main(args) == 0
    results = json.loads(out.read_text())
    loss = results["heldout"]["loss"]
    assert results["humaneval"]["holes"] == 1 and 0 <= results["humaneval"]["pass_at_1"] <= 1
    assert loss["files"] == 1 and loss["tokens"] > 50 and 0 < loss["nats_per_token"] < 10 and loss["bits_per_byte"] > 0


def test_model_card_records_licences_training_and_scores(straight_run, manifest_path, shards, tmp_path):
    baseline = {"completer": "similar-line", "humaneval": {"holes": 1033, "pass_at_1": 0.25, "exact_match": 0.125},
                "heldout": {"holes": 8, "exact_match": 0.5}}
    model = {"completer": "runs/demo/export", "humaneval": {"holes": 1033, "pass_at_1": 0.125, "exact_match": 0.125},
             "heldout": {"holes": 8, "exact_match": 0.625, "loss": {"nats_per_token": 2.5, "bits_per_byte": 1.25}}}
    base = {"completer": "model_runtime/default_model", "humaneval": {"holes": 1033, "pass_at_1": 0.0625, "exact_match": 0.0},
            "heldout": {"holes": 8, "exact_match": 0.25, "loss": {"nats_per_token": 3.125, "bits_per_byte": 1.5}}}
    (tmp_path / "baseline.json").write_text(json.dumps(baseline))
    (tmp_path / "model.json").write_text(json.dumps(model))
    (tmp_path / "base.json").write_text(json.dumps(base))
    out = tmp_path / "MODEL_CARD.md"
    assert model_card.main([
        "--run-dir", str(straight_run), "--manifest", str(manifest_path), "--shards", str(shards / "train"),
        "--eval", str(tmp_path / "model.json"), str(tmp_path / "baseline.json"), str(tmp_path / "base.json"), "--out", str(out),
    ]) == 0
    card = out.read_text()
    summary = json.loads((straight_run / "training.json").read_text())
    assert "| MIT | 1 | 7 |" in card  # the test corpus: one MIT source with 7 files
    assert "| demo | 1.0 | MIT | 7 |" in card
    assert f"| optimizer steps | {summary['steps']} |" in card
    assert "| baseline: similar-line | 25.0% | 12.5% | 50.0% | - |" in card
    assert "| model (export) | 12.5% | 12.5% | 62.5% | 2.500 / 1.250 |" in card
    assert "HumanEval pass@1: the model scores 12.5%, below the best baseline (similar-line, 25.0%)" in card
    assert "HumanEval exact match: the model scores 12.5%, equal to the best baseline" in card
    assert "held-out exact match: the model scores 62.5%, above the best baseline" in card
    assert "| model (default_model) | 6.2% | 0.0% | 25.0% | 3.125 / 1.500 |" in card
    assert ("Against model (default_model), on the same holes: held-out loss 2.500 against 3.125 nats/token (-20.0%); "
            "HumanEval pass@1 12.5% against 6.2%") in card
    assert "glm_moe_dsa" in card and "index_topk" in card


def test_the_card_of_a_warm_start_quotes_its_base_model(straight_run, manifest_path, shards, tokenizer_dir, tmp_path):
    base_card, warm = tmp_path / "BASE_CARD.md", tmp_path / "warm"
    common = ["--manifest", str(manifest_path), "--shards", str(shards / "train"), "--no-token-counts"]
    baseline = {"completer": "similar-line", "heldout": {"holes": 8, "exact_match": 0.5}}
    (tmp_path / "baseline.json").write_text(json.dumps(baseline))
    assert model_card.main(["--run-dir", str(straight_run), *common, "--eval", str(tmp_path / "baseline.json"),
                            "--out", str(base_card)]) == 0
    assert train_main(train_args(shards, tokenizer_dir, warm, "--init-from", str(straight_run / "export"),
                                 "--dense-fraction", "0", "--lr", "3e-4", "--total-tokens", str(2 * 2 * 128))) == 0
    assert model_card.main(["--run-dir", str(warm), *common, "--base-card", str(base_card)]) == 0
    card = (warm / "export" / "MODEL_CARD.md").read_text()
    base_steps = json.loads((straight_run / "training.json").read_text())["steps"]
    continued, base = card.split("### Base model")
    assert "## Continued training" in continued and f"starts from `{straight_run / 'export'}`" in continued
    assert "| optimizer steps | 2 |" in continued and "| CPU time |" in continued
    assert "peak learning rate 0.0003" in continued and "for the first 0%" in continued
    assert f"| optimizer steps | {base_steps} |" in base and base.startswith("\n\nIts corpus: Python source")
    assert "Its own evaluation, from its card:" in base and "| baseline: similar-line | - | - | 50.0% | - |" in base


def test_a_chain_of_warm_starts_quotes_every_stage(straight_run, manifest_path, shards, tokenizer_dir, tmp_path):
    common = ["--manifest", str(manifest_path), "--shards", str(shards / "train"), "--no-token-counts"]
    base_card = tmp_path / "BASE_CARD.md"
    assert model_card.main(["--run-dir", str(straight_run), *common, "--out", str(base_card)]) == 0
    cards, previous = [], (straight_run, base_card)
    for stage, tokens in (("second", 2), ("third", 3)):
        run = tmp_path / stage
        assert train_main(train_args(shards, tokenizer_dir, run, "--init-from", str(previous[0] / "export"),
                                     "--dense-fraction", "0", "--total-tokens", str(tokens * 2 * 128))) == 0
        assert model_card.main(["--run-dir", str(run), *common, "--base-card", str(previous[1])]) == 0
        previous = (run, run / "export" / "MODEL_CARD.md")
        cards.append(previous[1].read_text())
    third = cards[1]
    assert third.count("\n### Base model\n") == 1 and third.count("\n#### Base model\n") == 1
    steps = [line for line in third.splitlines() if line.startswith("| optimizer steps |")]
    base_steps = json.loads((straight_run / "training.json").read_text())["steps"]
    assert steps == ["| optimizer steps | 3 |", "| optimizer steps | 2 |", f"| optimizer steps | {base_steps} |"]
    assert "It was itself a warm start." in third
