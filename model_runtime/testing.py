"""Tiny random GLM-5 checkpoints for tests and examples (never downloaded, built in seconds).

Role: `make_tiny_checkpoint(dir)` writes a complete checkpoint directory (config.json,
model.safetensors in the hub layout, generation_config.json, tokenizer.json and
tokenizer_config.json with GLM's special tokens) from a random-weight model;
`quantize_fp8_checkpoint` writes an FP8 e4m3 copy with 128x128 block scales.

Invariant: deterministic for a given seed and config.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from model_runtime.config import ModelConfig
from model_runtime.loader import save_checkpoint
from model_runtime.model import Gate, RMSNorm, Transformer, init_weights
from model_runtime.safetensors_mmap import SafetensorsFile, save_tensors

GLM_SPECIAL_TOKENS = [
    "<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>",
    "<|assistant|>", "<|observation|>", "<|code_prefix|>", "<|code_middle|>", "<|code_suffix|>",
]

_SAMPLE_TEXT = '''
import os
from dataclasses import dataclass


@dataclass
class Config:
    name: str
    size: int = 0

    def describe(self) -> str:
        return f"{self.name}: {self.size}"


def load_config(path: str) -> Config:
    with open(path) as f:
        name, size = f.read().split(",")
    return Config(name=name.strip(), size=int(size))


def main():
    for entry in os.listdir("."):
        if entry.endswith(".py"):
            print(load_config(entry).describe())
'''


def train_tiny_tokenizer(vocab_size: int, texts: list[str] | None = None) -> Tokenizer:
    """A byte-level BPE with GLM's special tokens, trained on a little Python."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=GLM_SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator((texts or [_SAMPLE_TEXT]) * 4, trainer)
    return tok


def write_tokenizer(tok: Tokenizer, path: Path, max_len: int = 4096) -> None:
    tok.save(str(path / "tokenizer.json"))
    config = {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "model_max_length": max_len,
              "tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False}
    (path / "tokenizer_config.json").write_text(json.dumps(config, indent=2))


def random_model(cfg: ModelConfig, seed: int = 0, perturb: bool = True) -> Transformer:
    """Random weights; `perturb` also randomises norm weights and router biases so they matter."""
    torch.manual_seed(seed)
    model = Transformer(cfg)
    init_weights(model, std=0.1)
    if perturb:
        with torch.no_grad():
            for module in model.modules():
                if isinstance(module, (RMSNorm, torch.nn.LayerNorm)):
                    module.weight.uniform_(0.5, 1.5)
                if isinstance(module, torch.nn.LayerNorm):
                    module.bias.uniform_(-0.1, 0.1)
                if isinstance(module, Gate):
                    module.e_score_correction_bias.uniform_(-0.05, 0.05)
    return model.eval()


def make_tiny_checkpoint(
    path: str | Path, cfg: ModelConfig | None = None, seed: int = 0, dtype: torch.dtype = torch.float32,
    tokenizer_dir: str | Path | None = None,
) -> Path:
    """Write a random tiny GLM-5 checkpoint with a tokenizer whose ids all fit the vocabulary:
    a little BPE trained here (a few hundred tokens, about one per character of code), or the
    trained tokenizer in `tokenizer_dir` (its vocabulary must fit `cfg.vocab_size`)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    cfg = cfg or ModelConfig.tiny()
    tok = train_tiny_tokenizer(cfg.vocab_size) if tokenizer_dir is None else Tokenizer.from_file(str(Path(tokenizer_dir) / "tokenizer.json"))
    if tok.get_vocab_size() > cfg.vocab_size:
        raise ValueError(f"the tokenizer has {tok.get_vocab_size()} tokens, more than the model's vocab_size {cfg.vocab_size}")
    eos = tok.token_to_id("<|endoftext|>")
    cfg = cfg.replace(eos_token_id=(eos,), pad_token_id=eos)
    save_checkpoint(random_model(cfg, seed), cfg, path, dtype=dtype)
    write_tokenizer(tok, path, cfg.max_position_embeddings)
    return path


def quantize_fp8_checkpoint(src: str | Path, dst: str | Path, block: int = 128) -> Path:
    """Copy a checkpoint with every 2-D projection weight stored as FP8 e4m3 + weight_scale_inv
    (embeddings, lm_head, norms, router and indexer.weights_proj stay high precision, as in GLM-5-FP8)."""
    src, dst = Path(src), Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    file = SafetensorsFile(src / "model.safetensors")
    out = {}
    for name in file.entries:
        t = file.tensor(name).clone()
        if _quantizable(name, t):
            q, scale = _quantize_blocks(t.float(), block)
            out[name], out[name + "_scale_inv"] = q, scale
        else:
            out[name] = t
    save_tensors(out, dst / "model.safetensors", {"format": "pt"})
    config = json.loads((src / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                     "weight_block_size": [block, block]}
    (dst / "config.json").write_text(json.dumps(config, indent=2))
    for extra in ("generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        if (src / extra).is_file():
            (dst / extra).write_bytes((src / extra).read_bytes())
    return dst


def _quantizable(name: str, t: torch.Tensor) -> bool:
    skip = ("embed_tokens", "lm_head", "norm", "mlp.gate.", "weights_proj", "eh_proj")
    return t.dim() == 2 and name.endswith(".weight") and not any(s in name for s in skip)


def _quantize_blocks(w: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    rows, cols = w.shape
    nr, nc = -(-rows // block), -(-cols // block)
    padded = torch.zeros(nr * block, nc * block)
    padded[:rows, :cols] = w
    tiles = padded.view(nr, block, nc, block)
    amax = tiles.abs().amax(dim=(1, 3)).clamp_min(1e-12)
    scale = amax / torch.finfo(torch.float8_e4m3fn).max
    q = (tiles / scale[:, None, :, None]).view(nr * block, nc * block)[:rows, :cols]
    return q.to(torch.float8_e4m3fn), scale
