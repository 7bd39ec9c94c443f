"""Loader: layouts (hub per-expert, merged experts, shards), dtypes, memory mapping, clear errors."""

from __future__ import annotations

import json
import shutil
import struct

import pytest
import torch
from safetensors.torch import load_file, save_file

from model_runtime import load_model
from model_runtime.loader import (
    CheckpointError, DtypeError, MissingTensorError, ShapeMismatchError, UnexpectedTensorError, UnsupportedModelError,
)
from model_runtime.safetensors_mmap import CorruptCheckpointError


@pytest.fixture
def ckpt(tiny_ckpt, tmp_path):
    """A writable copy of the tiny checkpoint."""
    dst = tmp_path / "ckpt"
    shutil.copytree(tiny_ckpt, dst)
    return dst


def rewrite(path, edit):
    tensors = load_file(path / "model.safetensors")
    edit(tensors)
    save_file(tensors, path / "model.safetensors")


def ids():
    return torch.arange(20, 40)


def test_missing_tensor_is_named(ckpt):
    rewrite(ckpt, lambda t: t.pop("model.layers.1.self_attn.kv_b_proj.weight"))
    with pytest.raises(MissingTensorError, match=r"model\.layers\.1\.self_attn\.kv_b_proj\.weight"):
        load_model(ckpt)


def test_unexpected_tensor_is_named(ckpt):
    rewrite(ckpt, lambda t: t.__setitem__("model.layers.1.self_attn.extra.weight", torch.zeros(2)))
    with pytest.raises(UnexpectedTensorError, match=r"model\.layers\.1\.self_attn\.extra\.weight"):
        load_model(ckpt)


def test_layer_beyond_config_is_unexpected(ckpt):
    rewrite(ckpt, lambda t: t.__setitem__("model.layers.9.input_layernorm.weight", torch.ones(64)))
    with pytest.raises(UnexpectedTensorError, match=r"model\.layers\.9"):
        load_model(ckpt)


def test_shape_mismatch_is_named(ckpt):
    rewrite(ckpt, lambda t: t.__setitem__("model.layers.0.self_attn.q_a_proj.weight", torch.zeros(31, 64)))
    with pytest.raises(ShapeMismatchError, match=r"q_a_proj\.weight.*\(31, 64\).*\(32, 64\)"):
        load_model(ckpt)


def test_wrong_dtype_is_named(ckpt):
    rewrite(ckpt, lambda t: t.__setitem__("model.norm.weight", torch.ones(64, dtype=torch.int32)))
    with pytest.raises(DtypeError, match=r"model\.norm\.weight.*int32"):
        load_model(ckpt)


def test_fp8_without_scale_is_a_dtype_error(ckpt):
    def edit(t):
        t["model.layers.0.mlp.up_proj.weight"] = t["model.layers.0.mlp.up_proj.weight"].to(torch.float8_e4m3fn)
    rewrite(ckpt, edit)
    with pytest.raises(DtypeError, match="weight_scale_inv"):
        load_model(ckpt)


def test_unsupported_model_type(ckpt):
    config = json.loads((ckpt / "config.json").read_text())
    (ckpt / "config.json").write_text(json.dumps(config | {"model_type": "deepseek_v3"}))
    with pytest.raises(UnsupportedModelError, match="deepseek_v3"):
        load_model(ckpt)


def test_truncated_file_names_file_and_tensor(ckpt):
    data = (ckpt / "model.safetensors").read_bytes()
    (ckpt / "model.safetensors").write_bytes(data[: len(data) - 1000])
    with pytest.raises(CorruptCheckpointError, match=r"model\.safetensors.*truncated"):
        load_model(ckpt)


def test_corrupt_header(ckpt):
    data = (ckpt / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    (ckpt / "model.safetensors").write_bytes(data[:8] + b"{" * n + data[8 + n :])
    with pytest.raises(CorruptCheckpointError, match="header"):
        load_model(ckpt)


def test_not_safetensors_at_all(ckpt):
    (ckpt / "model.safetensors").write_bytes(b"PK\x03\x04 this is a zip file")
    with pytest.raises(CorruptCheckpointError, match="model.safetensors"):
        load_model(ckpt)


def test_missing_config_and_weights(tmp_path):
    (tmp_path / "a").mkdir()
    with pytest.raises(CheckpointError, match="config.json"):
        load_model(tmp_path / "a")
    with pytest.raises(FileNotFoundError):
        load_model(tmp_path / "nope")


def shard(path, first: list[str], second: list[str]) -> None:
    """Rewrite the checkpoint at `path` as two shards holding the tensors `first` and `second`."""
    tensors = load_file(path / "model.safetensors")
    weight_map = {}
    for file, keys in (("model-00001-of-00002.safetensors", first), ("model-00002-of-00002.safetensors", second)):
        save_file({k: tensors[k] for k in keys}, path / file)
        weight_map |= dict.fromkeys(keys, file)
    (path / "model.safetensors").unlink()
    (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def test_sharded_checkpoint_loads_identically(ckpt, tiny):
    names = sorted(load_file(ckpt / "model.safetensors"))
    shard(ckpt, names[: len(names) // 2], names[len(names) // 2 :])
    assert torch.equal(load_model(ckpt).logits(ids()), tiny.logits(ids()))


def test_shard_index_naming_a_missing_tensor(ckpt):
    (ckpt / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"lm_head.weight": "model.safetensors", "ghost.weight": "model.safetensors"}}))
    with pytest.raises(MissingTensorError, match="ghost.weight"):
        load_model(ckpt)


def _merge_experts(t):
    """Rewrite the hub's per-expert tensors in transformers' merged expert layout."""
    for layer in (1, 2, 3):
        prefix = f"model.layers.{layer}.mlp.experts"
        experts = sorted({int(k.split(".")[5]) for k in t if k.startswith(prefix + ".")})
        if not experts:
            continue
        gate_up = [torch.cat([t.pop(f"{prefix}.{j}.gate_proj.weight"), t.pop(f"{prefix}.{j}.up_proj.weight")]) for j in experts]
        down = [t.pop(f"{prefix}.{j}.down_proj.weight") for j in experts]
        t[f"{prefix}.gate_up_proj"] = torch.stack(gate_up)
        t[f"{prefix}.down_proj"] = torch.stack(down)


def test_merged_expert_layout_loads_identically(ckpt, tiny):
    rewrite(ckpt, _merge_experts)
    assert torch.equal(load_model(ckpt).logits(ids()), tiny.logits(ids()))


def _fused_mlps(path, dtype=torch.float32):
    """(fused gate_up, gate, up) of every MLP of the model at `path`, after the engine's fusing."""
    from model_runtime.model import MLP

    model = load_model(path, dtype=dtype).model
    model.fuse_for_inference()
    return [(m.gate_up, m.gate_proj.weight, m.up_proj.weight) for m in model.modules() if isinstance(m, MLP)]


def _shares_storage(a, b):
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


@pytest.mark.parametrize("stored", ["float32", "bfloat16", "merged float32", "merged bfloat16"])
def test_gate_and_up_weights_fuse_without_a_copy(ckpt, stored):
    """The loader keeps each MLP's gate and up weights side by side, also through a dtype change
    and from transformers' merged expert layout, so the engine's fused gate_up is a view of them."""
    dtype = torch.bfloat16 if "bfloat16" in stored else torch.float32
    if stored.startswith("merged"):
        rewrite(ckpt, _merge_experts)
    rewrite(ckpt, lambda t: t.update({k: v.to(dtype) for k, v in t.items() if k.endswith(("gate_proj.weight", "up_proj.weight", "gate_up_proj"))}))
    mlps = _fused_mlps(ckpt)
    assert len(mlps) > 3
    for gate_up, gate, up in mlps:
        assert gate.dtype == torch.float32 and _shares_storage(gate_up, gate)
        assert torch.equal(gate_up, torch.cat((gate, up)))


def test_gate_and_up_weights_in_different_shards_fuse_as_a_copy(ckpt, tiny):
    names = load_file(ckpt / "model.safetensors")
    ups = sorted(k for k in names if k.endswith("up_proj.weight"))
    shard(ckpt, sorted(set(names) - set(ups)), ups)
    for gate_up, gate, up in _fused_mlps(ckpt):
        assert not _shares_storage(gate_up, gate) and torch.equal(gate_up, torch.cat((gate, up)))
    assert torch.equal(load_model(ckpt).logits(ids()), tiny.logits(ids()))


def test_bf16_and_fp16_checkpoints(ckpt, tiny):
    short = torch.arange(20, 26)  # dense regime: 16-bit weight rounding cannot flip a top-k choice
    ref = tiny.logits(short)
    for dtype in (torch.bfloat16, torch.float16):
        rewrite(ckpt, lambda t: t.update({k: v.to(dtype) if v.dtype == torch.float32 and "gate.weight" not in k and "e_score" not in k else v for k, v in t.items()}))
        got = load_model(ckpt).logits(short)
        assert ((got - ref).norm() / ref.norm()) < 0.03


def test_weights_are_memory_mapped_not_copied(tiny):
    """Same-dtype tensors view the file's private map: their storage is not owned by torch's allocator."""
    weight = tiny.model.layers[0].self_attn.q_a_proj.weight
    storage = weight.untyped_storage()
    assert storage.nbytes() == weight.numel() * weight.element_size()
    assert not storage.resizable()


def test_dtype_by_name(tiny_ckpt):
    assert load_model(tiny_ckpt, dtype="bfloat16").model.layers[0].self_attn.q_a_proj.weight.dtype == torch.bfloat16
    with pytest.raises(ValueError, match="dtype: expected float32, bfloat16 or float16, got 'float64'"):
        load_model(tiny_ckpt, dtype="float64")


def test_bfloat16_runtime_dtype(tiny_ckpt, tiny):
    bf = load_model(tiny_ckpt, dtype=torch.bfloat16)
    assert bf.model.layers[1].mlp.gate.weight.dtype == torch.float32  # router stays fp32
    assert bf.model.layers[0].self_attn.q_a_proj.weight.dtype == torch.bfloat16
    short = torch.arange(20, 26)  # dense regime: bf16 rounding cannot flip a top-k choice
    ref = tiny.logits(short)
    assert ((bf.logits(short).float() - ref).norm() / ref.norm()) < 0.03


def test_a_random_checkpoint_can_carry_a_trained_tokenizer(tmp_path):
    """The benchmarks' mid checkpoint takes the embedded model's BPE: its end token becomes the
    checkpoint's, it loads, and a tokenizer larger than the vocabulary is refused by name."""
    from model_runtime.config import ModelConfig
    from model_runtime.embedded import DEFAULT_MODEL_DIR
    from model_runtime.testing import make_tiny_checkpoint

    cfg = ModelConfig.tiny(vocab_size=8192, num_nextn_predict_layers=0)
    path = make_tiny_checkpoint(tmp_path / "bpe", cfg, tokenizer_dir=DEFAULT_MODEL_DIR)
    shipped = json.loads((DEFAULT_MODEL_DIR / "config.json").read_text())["eos_token_id"]
    assert json.loads((path / "config.json").read_text())["eos_token_id"] == shipped
    loaded = load_model(path)
    text = "def centroid(points):\n    return sum(points) / len(points)\n"
    ids = loaded.tokenizer.encode(text)
    assert len(ids) < len(text) / 2  # a trained BPE, not the byte-like test tokenizer
    assert loaded.tokenizer.decode(ids) == text
    with pytest.raises(ValueError, match="more than the model's vocab_size 4096"):
        make_tiny_checkpoint(tmp_path / "small", ModelConfig.tiny(vocab_size=4096), tokenizer_dir=DEFAULT_MODEL_DIR)


def test_loading_skips_the_random_init_that_the_checkpoint_overwrites(tiny_ckpt, monkeypatch):
    """The loader's meta skeleton runs no Linear init (the checkpoint assigns every weight); a
    model built on a real device still gets one, and the loaded weights are the file's."""
    from torch import nn

    from model_runtime.config import ModelConfig
    from model_runtime.model import Transformer

    calls = []
    real = nn.init.kaiming_uniform_
    monkeypatch.setattr(nn.init, "kaiming_uniform_", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    loaded = load_model(tiny_ckpt)
    assert calls == []
    on_file = load_file(tiny_ckpt / "model.safetensors")
    assert torch.equal(loaded.model.lm_head.weight, on_file["lm_head.weight"])
    built = Transformer(ModelConfig.tiny())
    assert calls and built.lm_head.weight.abs().max() > 0
