"""Any FIM code model behind an OpenAI-compatible endpoint: the served model's template is
detected from its tokenizer's special tokens (through the endpoint's `/tokenize`), for GLM,
Qwen2.5-Coder, DeepSeek-Coder, StarCoder2 and Code Llama; a model without FIM tokens gets a
prefix-only prompt and the status says so once; `fimTemplate` overrides the detection.

Each family's tokenizer is a tiny BPE trained here carrying that family's special tokens (the
token strings are public facts of each model); the endpoint is scripted and serves
`/tokenize` with it, and the language server completes through it over `--stdio`."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from lsprotocol import types
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from tokenizers import decoders as tk_decoders

from context.fim import fim_prompt_ids
from lsp_harness import Session
from model_runtime.remote.config import RemoteConfig
from model_runtime.remote.tokenizer import RemoteTokenizer
from model_runtime.testing import GLM_SPECIAL_TOKENS
from model_runtime.tokenizer import TokenizerError
from scripted import Scripted, good

# family: (special tokens, lead, prefix, suffix, middle, end of middle)
FAMILIES = {
    "glm": (GLM_SPECIAL_TOKENS, ["[gMASK]", "<sop>"], "<|code_prefix|>", "<|code_suffix|>", "<|code_middle|>", "<|endoftext|>"),
    "qwen": (["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
              "<|repo_name|>", "<|file_sep|>"], [], "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|endoftext|>"),
    "deepseek": (["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜fim▁hole｜>", "<｜fim▁begin｜>", "<｜fim▁end｜>", "<|EOT|>"],
                 ["<｜begin▁of▁sentence｜>"], "<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>", "<｜end▁of▁sentence｜>"),
    "starcoder": (["<|endoftext|>", "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>", "<repo_name>", "<file_sep>"],
                  [], "<fim_prefix>", "<fim_suffix>", "<fim_middle>", "<|endoftext|>"),
    "codellama": (["<unk>", "<s>", "</s>", "<PRE>", "<SUF>", "<MID>", "<EOT>"], ["<s>"], "<PRE>", "<SUF>", "<MID>", "<EOT>"),
    "none": (["<|endoftext|>"], [], "", "", "", "<|endoftext|>"),
}
CODE = "import os\n\n\ndef list_files(root):\n    return os.listdir(root)\n\n\ndef main(values):\n    total = 0\n"
SOURCE = CODE + "\n\nprint(main([1, 2]))\n"
PLAIN = {"numCandidates": 1, "rerank": False, "abstain": False, "retrieval": False, "warmup": False, "debounceMs": 0, "maxTokens": 16}


def family_tokenizer(name: str) -> Tokenizer:
    specials = FAMILIES[name][0]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tk_decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator([CODE] * 4, trainer)
    return tok


def expected_prompt(name: str, tok: Tokenizer, header: str, prefix: str, suffix: str) -> list[int]:
    """The family's published layout, with ids read from the tokenizer itself."""
    _, lead, pre, suf, mid, _ = FAMILIES[name]
    enc = lambda text: tok.encode(text, add_special_tokens=False).ids  # noqa: E731
    ids = [tok.token_to_id(t) for t in lead]
    if name == "glm":  # suffix first, as the server serves GLM (context.fim)
        return ids + enc(header) + [tok.token_to_id(suf)] + enc(suffix) + [tok.token_to_id(pre)] + enc(prefix) + [tok.token_to_id(mid)]
    if name == "none":
        return ids + enc(header) + enc(prefix)
    return ids + [tok.token_to_id(pre)] + enc(header) + enc(prefix) + [tok.token_to_id(suf)] + enc(suffix) + [tok.token_to_id(mid)]


@pytest.mark.parametrize("name", list(FAMILIES))
def test_the_template_is_detected_from_the_served_tokenizer(name):
    tok = family_tokenizer(name)
    with Scripted([good()], tokenizer=tok) as server:
        remote = RemoteTokenizer(RemoteConfig(server.url), "scripted")
        try:
            header, prefix, suffix = "# file: a.py\n", "def main(values):\n    ", "\nprint(main([1]))\n"
            assert remote.fim.name == name and remote.fim.detected
            assert fim_prompt_ids(remote, header, prefix, suffix) == expected_prompt(name, tok, header, prefix, suffix)
            assert remote.special.eos_ids[0] == tok.token_to_id(FAMILIES[name][5])
        finally:
            remote.close()


def test_fim_template_overrides_detection_and_a_missing_marker_is_named():
    tok = family_tokenizer("qwen")
    with Scripted([good()], tokenizer=tok) as server:
        forced = RemoteTokenizer(RemoteConfig(server.url, fim_template="none"), "scripted")
        assert forced.fim.name == "none" and not forced.fim.detected
        assert fim_prompt_ids(forced, "", "x = ", "") == tok.encode("x = ", add_special_tokens=False).ids
        forced.close()
        with pytest.raises(TokenizerError, match="no <PRE>, <SUF>, <MID> token.*Code Llama"):
            RemoteTokenizer(RemoteConfig(server.url, fim_template="codellama"), "scripted")


@pytest.mark.e2e
@pytest.mark.parametrize("name", list(FAMILIES))
def test_a_model_of_each_family_completes_through_the_server(name, tmp_path):
    tok = family_tokenizer(name)
    with Scripted([good("total += 1")], tokenizer=tok) as server:
        answer, statuses = asyncio.run(_complete(server.url, tmp_path))
        body = server.requests[-1]["body"]
    assert answer.items and answer.items[0].insert_text.startswith("total += 1")
    _, lead, pre, _, mid, end = FAMILIES[name]
    prompt = body["prompt"]
    if name == "none":  # the code before the cursor, no marker
        assert tok.decode(prompt, skip_special_tokens=False).endswith("def main(values):\n    total = 0\n")
        assert tok.token_to_id(end) not in prompt
        assert any("no fill-in-the-middle tokens" in s["message"] for s in statuses if s["state"] == "ready")
    else:
        lead_ids = [tok.token_to_id(t) for t in lead]
        assert prompt[: len(lead_ids)] == lead_ids and prompt[-1] == tok.token_to_id(mid)
        assert name == "glm" or prompt[len(lead_ids)] == tok.token_to_id(pre)  # GLM is served suffix-first
        assert {tok.token_to_id(pre), tok.token_to_id(FAMILIES[name][3])} <= set(prompt)
        assert not any("no fill-in-the-middle" in s.get("message", "") for s in statuses)
    assert tok.token_to_id(end) in body["stop_token_ids"]


async def _complete(url: str, tmp_path: Path) -> tuple[types.InlineCompletionList, list[dict]]:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "main.py").write_text(SOURCE)
    log = tmp_path / "lsp.log"
    argv = [sys.executable, "-m", "lsp_server", "--stdio", "--engine-url", url, "--log-file", str(log), "--log-level", "INFO"]
    session = await Session.start(argv, [root], init_options=PLAIN, log_file=log)
    try:
        await session.wait_ready(timeout=60)
        uri = session.open(root / "main.py")
        answer = await asyncio.wait_for(session.inline(uri, 9, 0), 30)
        statuses = session.messages("glm5/status")
    finally:
        assert await session.stop() == 0
    return answer, statuses
