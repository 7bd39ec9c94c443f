"""HF checkpoint directory <-> `Transformer`: the one place that knows checkpoint tensor names.

Role: load `config.json` + `model.safetensors` (or shards with `model.safetensors.index.json`)
in the hub layout (per-expert `mlp.experts.{j}.*`) or transformers' merged expert layout
(`mlp.experts.gate_up_proj` / `mlp.experts.down_proj`), with bf16/fp16/fp32 weights or FP8 e4m3
weights carrying 128x128 `weight_scale_inv` block scales. And write our own checkpoints back in
the hub layout (`save_checkpoint`).

Invariants:
- The model is built on the meta device and its parameters are *assigned* tensors that view a
  private (copy-on-write) memory map of the files: a tensor is only copied when its dtype or
  device must change, one tensor at a time (an MLP's gate and up weights stored side by side
  count as one: `_side_by_side`), so a checkpoint larger than RAM is never copied whole.
- Every failure is a `CheckpointError` whose message names the file and the tensor.
- Router weights, `e_score_correction_bias` and `indexer.weights_proj` stay fp32 (as in HF).
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import torch
from torch import nn

import kernels

from model_runtime.config import ModelConfig
from model_runtime.model import Transformer
from model_runtime.safetensors_mmap import SafetensorsFile, CorruptCheckpointError, CheckpointError, save_tensors

log = logging.getLogger(__name__)

FP32_PARAMS = re.compile(r"(mlp\.gate\.weight|e_score_correction_bias|indexer\.weights_proj\.weight)$")
FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
FP8_DTYPES = (torch.float8_e4m3fn,)
_MTP_IGNORED = ("embed_tokens.weight", "shared_head.head.weight")


class MissingTensorError(CheckpointError):
    pass


class UnexpectedTensorError(CheckpointError):
    pass


class ShapeMismatchError(CheckpointError):
    pass


class DtypeError(CheckpointError):
    pass


class UnsupportedModelError(CheckpointError):
    pass


def read_config(path: Path) -> ModelConfig:
    file = path / "config.json"
    if not file.is_file():
        raise CheckpointError(f"{file}: missing (a checkpoint directory needs config.json)")
    try:
        return ModelConfig.from_file(file)
    except ValueError as exc:
        if "model_type" in str(exc):
            raise UnsupportedModelError(f"{file}: {exc}") from exc
        raise CheckpointError(f"{file}: {exc}") from exc


def open_weights(path: Path) -> dict[str, SafetensorsFile]:
    """Checkpoint tensor name -> the file holding it."""
    index = path / "model.safetensors.index.json"
    single = path / "model.safetensors"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
            raise CorruptCheckpointError(f"{index}: unreadable shard index: {exc}") from exc
        files = {name: SafetensorsFile(path / name) for name in sorted(set(weight_map.values()))}
        located: dict[str, SafetensorsFile] = {}
        for name, shard in weight_map.items():
            if name not in files[shard].entries:
                raise MissingTensorError(f"{files[shard].path}: tensor {name} listed in the index is absent")
            located[name] = files[shard]
        return located
    if single.is_file():
        file = SafetensorsFile(single)
        return dict.fromkeys(file.entries, file)
    raise CheckpointError(f"{path}: no model.safetensors or model.safetensors.index.json")


def checkpoint_to_param(name: str, cfg: ModelConfig) -> str | None:
    """Map a hub tensor name to our parameter name (None: a known duplicate we do not use)."""
    if name.startswith("model.layers."):
        layer, rest = name[len("model.layers."):].split(".", 1)
        i = int(layer)
        if i < cfg.num_hidden_layers:
            return f"layers.{i}.{rest}"
        j = i - cfg.num_hidden_layers
        if j < cfg.num_nextn_predict_layers:
            return None if rest in _MTP_IGNORED else f"mtp.{j}.{rest}"
        raise UnexpectedTensorError(f"tensor {name}: layer {i} is beyond num_hidden_layers + num_nextn_predict_layers")
    if name.startswith("model."):
        return name[len("model."):]
    return name


def load_weights(path: str | Path, device="cpu", dtype: torch.dtype = torch.float32) -> tuple[Transformer, ModelConfig]:
    path = Path(path)
    cfg = read_config(path)
    files = open_weights(path)
    tensors = _collect(files, cfg, dtype, device)
    if cfg.num_nextn_predict_layers and not any(k.startswith("mtp.") for k in tensors):
        log.warning("%s: no MTP layer tensors; speculative decoding is unavailable", path)
        cfg = cfg.replace(num_nextn_predict_layers=0)
    with torch.device("meta"):
        model = Transformer(cfg)
    _check_complete(model, tensors, cfg)
    model.load_state_dict(tensors, strict=True, assign=True)
    for p in model.parameters():
        p.requires_grad_(False)
    return model.eval(), cfg


def _collect(files: dict[str, SafetensorsFile], cfg: ModelConfig, dtype, device) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for name, file in files.items():
        if name.endswith("weight_scale_inv"):
            if name[: -len("_scale_inv")] not in files:
                raise UnexpectedTensorError(f"{file.path}: {name} has no weight it scales")
            continue
        try:
            param = checkpoint_to_param(name, cfg)
        except UnexpectedTensorError as exc:
            raise UnexpectedTensorError(f"{file.path}: {exc}") from None
        if param is None:
            continue
        pair = _side_by_side(name, file, files)
        if pair is None:
            want = torch.float32 if FP32_PARAMS.search(param) else dtype
            out.update(_to_params(param, name, file, files, device, want))
        elif name.endswith("gate_proj.weight"):  # the up weight comes with it
            both = pair.to(device=device, dtype=dtype)
            inter = file.entries[name]["shape"][0]
            out[param], out[param.removesuffix("gate_proj.weight") + "up_proj.weight"] = both[:inter], both[inter:]
    return out


def _side_by_side(name: str, file: SafetensorsFile, files: dict[str, SafetensorsFile]) -> torch.Tensor | None:
    """An MLP's gate and up weights as one [2I, D] tensor when `name` is either of them and its
    file stores them back to back (as safetensors orders names) in one float dtype: loaded
    together, they stay side by side after a dtype or device change, so `MLP.fuse` takes a view
    of them instead of copying both."""
    match = re.fullmatch(r"(.*\.)(gate|up)_proj\.weight", name)
    if match is None:
        return None
    gate, up = match[1] + "gate_proj.weight", match[1] + "up_proj.weight"
    if files.get(gate) is not file or files.get(up) is not file or file.entries[gate]["dtype"] not in FLOAT_DTYPES:
        return None
    return file.rows([gate, up])


def _to_params(param: str, name: str, file: SafetensorsFile, files, device, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The parameters of checkpoint tensor `name` on `device` in `dtype`: a merged expert
    tensor is converted whole, so each expert's gate and up rows stay side by side."""
    tensor = file.tensor(name)
    scale_name = name + "_scale_inv"
    if tensor.dtype in FP8_DTYPES:
        if scale_name not in files:
            raise DtypeError(f"{file.path}: {name} is {tensor.dtype} but has no {scale_name}")
        tensor = fp8_dequant(tensor, files[scale_name].tensor(scale_name), name)
    elif tensor.dtype not in FLOAT_DTYPES:
        raise DtypeError(f"{file.path}: {name} has dtype {tensor.dtype}; expected fp32/fp16/bf16 or fp8 e4m3 with scales")
    tensor = tensor.to(device=device, dtype=dtype)
    merged = re.match(r"(.*\.mlp\.experts)\.(gate_up_proj|down_proj)$", param)
    if not merged:
        return {param: tensor}
    prefix, kind = merged.groups()
    if tensor.dim() != 3:
        raise ShapeMismatchError(f"{file.path}: merged expert tensor {name} must be 3-D, got {tuple(tensor.shape)}")
    if kind == "down_proj":
        return {f"{prefix}.{j}.down_proj.weight": tensor[j] for j in range(tensor.shape[0])}
    inter = tensor.shape[1] // 2
    out = {}
    for j in range(tensor.shape[0]):
        out[f"{prefix}.{j}.gate_proj.weight"] = tensor[j, :inter]
        out[f"{prefix}.{j}.up_proj.weight"] = tensor[j, inter:]
    return out


def fp8_dequant(weight: torch.Tensor, scale_inv: torch.Tensor, name: str, block: int = 128) -> torch.Tensor:
    """W[i,j] = fp8(W)[i,j] * scale_inv[i//block, j//block], cropping the edge blocks (fp32 out)."""
    want = (-(-weight.shape[0] // block), -(-weight.shape[1] // block))
    if tuple(scale_inv.shape) != want:
        raise ShapeMismatchError(f"{name}_scale_inv: shape {tuple(scale_inv.shape)}, expected {want} for a {tuple(weight.shape)} weight")
    return kernels.fp8_block_dequant(weight, scale_inv.float(), block, torch.float32)


def _check_complete(model: Transformer, tensors: dict[str, torch.Tensor], cfg: ModelConfig) -> None:
    expected = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    missing = sorted(set(expected) - set(tensors))
    if missing:
        raise MissingTensorError(f"checkpoint lacks {len(missing)} tensor(s), e.g. {[param_to_checkpoint(m, cfg) for m in missing[:5]]}")
    unexpected = sorted(set(tensors) - set(expected))
    if unexpected:
        raise UnexpectedTensorError(f"checkpoint has {len(unexpected)} unexpected tensor(s), e.g. {[param_to_checkpoint(u, cfg) for u in unexpected[:5]]}")
    for name, tensor in tensors.items():
        want = tuple(expected[name].shape)
        if tuple(tensor.shape) != want:
            raise ShapeMismatchError(f"tensor {param_to_checkpoint(name, cfg)}: shape {tuple(tensor.shape)}, config.json implies {want}")


def param_to_checkpoint(param: str, cfg: ModelConfig) -> str:
    """Inverse of `checkpoint_to_param` (hub layout)."""
    if param.startswith("mtp."):
        j, rest = param[len("mtp."):].split(".", 1)
        return f"model.layers.{cfg.num_hidden_layers + int(j)}.{rest}"
    if param.startswith("layers.") or param in ("embed_tokens.weight", "norm.weight"):
        return "model." + param
    return param


def save_checkpoint(model: nn.Module, cfg: ModelConfig, path: str | Path, dtype: torch.dtype = torch.bfloat16) -> Path:
    """Write config.json + model.safetensors (hub layout, per-expert names)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    tensors = {}
    for name, tensor in state.items():
        keep32 = FP32_PARAMS.search(name) is not None
        tensors[param_to_checkpoint(name, cfg)] = tensor.detach().to("cpu", torch.float32 if keep32 else dtype).contiguous()
    save_tensors(tensors, path / "model.safetensors", {"format": "pt"})
    (path / "config.json").write_text(json.dumps(cfg.to_dict() | {"torch_dtype": str(dtype).removeprefix("torch.")}, indent=2))
    gen = {"eos_token_id": list(cfg.eos_token_id), "pad_token_id": cfg.pad_token_id, "do_sample": False}
    (path / "generation_config.json").write_text(json.dumps(gen, indent=2))
    return path
