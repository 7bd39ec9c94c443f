"""GLM-5 (`glm_moe_dsa`): MLA attention with DeepSeek Sparse Attention, sigmoid MoE, an MTP layer.

Role: the model, written like the paper. `MLA` (low-rank q/kv, decoupled RoPE with rope *last*),
`Indexer` (the DSA lightning indexer, rope *first*), `Gate` + `MoE` (fp32 sigmoid router with
bias-corrected selection), `MLP`, `Block`, `MTP` (next-next-token module) and `Transformer`.

Dimension legend: B batch, T tokens (keys), S queries, N flattened tokens of a paged batch,
D hidden, H heads, dn/dr/dv nope/rope/value head dims, R kv_lora_rank, Hi/Di indexer heads/dim,
E routed experts, K selected keys.

Two attention forms, pinned equal by tests:
- *expanded* (prefill): k_nope and v are materialised from the latent with `kv_b_proj`;
- *absorbed* (decode): `kv_b_proj` is folded into the query and the output, so attention runs
  over the compressed cache of 512 latent + 64 rope values per token (FlashMLA's MQA mode).

Invariants:
- RoPE is interleaved (pairs (x[2i], x[2i+1])) in both MLA and the indexer, output kept in the
  same interleaved layout, so q, k and the cache agree.
- The indexer selects k = min(index_topk, visible) keys per query; when every query sees at most
  index_topk keys it is skipped, because DSA is then exactly dense causal attention.
- The router computes in fp32; selection uses `e_score_correction_bias`, weights do not.
- Parameter names follow the HF checkpoint below the block level; the loader maps the rest.
- Once an engine has prepared the model (`ensure_fused`), its weights are frozen; a small fp32
  model on the CPU then stores the weights its decode steps read input-major, which changes
  the low bits of what every path computes, not the maths.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

import kernels
from kernels.rows import gather_rows

from model_runtime import lean
from model_runtime.config import ModelConfig
from model_runtime.paged import PagedBatch, indexer_topk, sparse_attention
from model_runtime.rope import Rope, apply_rope, rope_tables
from model_runtime.topk import topk_mask


class Linear(nn.Linear):
    """nn.Linear without its random init on the meta device: the loader builds the model there
    and the checkpoint assigns every weight (with that init, GLM-5's 79,643-module skeleton took
    7.6 s to build; without, 3.5 s). Elsewhere the init runs as usual (training calls `init_weights`)."""

    def reset_parameters(self) -> None:
        if not self.weight.is_meta:
            super().reset_parameters()


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.is_grad_enabled():  # inference: the fused kernel on Triton, else its lean torch form
            if not kernels.runs_triton(x):
                return lean.rms_norm(x, self.weight, self.eps)
            return kernels.rms_norm(x.reshape(-1, x.shape[-1]), self.weight, self.eps)[0].view(x.shape)
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * y.to(x.dtype)


class Indexer(nn.Module):
    """DSA lightning indexer: I[s,t] = Σ_h w[s,h] · ReLU(q[s,h]·k[t] / √Di), one shared key head."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads, self.head_dim, self.rope_dim = cfg.index_n_heads, cfg.index_head_dim, cfg.qk_rope_head_dim
        self.topk = cfg.index_topk
        self.wq_b = Linear(cfg.q_lora_rank, self.n_heads * self.head_dim, bias=False)
        self.wk = Linear(cfg.hidden_size, self.head_dim, bias=False)
        self.k_norm = nn.LayerNorm(self.head_dim, eps=1e-6)
        self.weights_proj = Linear(cfg.hidden_size, self.n_heads, bias=False)
        self.softmax_scale = self.head_dim**-0.5

    def _rope_first(self, x: torch.Tensor, rope: Rope) -> torch.Tensor:
        r = self.rope_dim
        return torch.cat((apply_rope(x[..., :r], rope), x[..., r:]), dim=-1)

    def keys(self, x: torch.Tensor, rope: Rope, projected: torch.Tensor | None = None) -> torch.Tensor:
        """[..., D] -> [..., Di] indexer keys (cached per token); `projected`: `wk(x)`, if already computed."""
        return self._rope_first(self.k_norm(self.wk(x) if projected is None else projected), rope)

    def queries(
        self, x: torch.Tensor, q_lat: torch.Tensor, rope: Rope, projected: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """q [..., Hi, Di] and signed head weights w [..., Hi] (fp32, × Hi^-½); `projected`:
        `weights_proj(x)`, if already computed."""
        q = self.wq_b(q_lat).unflatten(-1, (self.n_heads, self.head_dim))
        q = self._rope_first(q, rope)
        w = self.weights_proj(x.to(self.weights_proj.weight.dtype)) if projected is None else projected
        return q, w.float() * self.n_heads**-0.5

    def scores(self, q: torch.Tensor, w: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """q [B,S,Hi,Di], w [B,S,Hi], k [B,T,Di] -> I [B,S,T] fp32 (no mask)."""
        s = torch.einsum("bshd,btd->bsht", q.float(), k.float()) * self.softmax_scale
        return torch.einsum("bsht,bsh->bst", F.relu(s), w.float())


@dataclass
class AttnAux:
    """Training by-products of one attention layer."""

    selected: torch.Tensor | None = None  # [B, S, T] bool: keys the indexer selected (sparse)
    indexer_kl: torch.Tensor | None = None  # scalar KL(attention || indexer)


class MLA(nn.Module):
    """Multi-head latent attention with a DSA indexer (or a shared layer reusing one's top-k)."""

    def __init__(self, cfg: ModelConfig, has_indexer: bool) -> None:
        super().__init__()
        self.cfg = cfg
        H, R = cfg.num_attention_heads, cfg.kv_lora_rank
        self.n_heads, self.dn, self.dr, self.dv, self.R = H, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim, R
        self.q_a_proj = Linear(cfg.hidden_size, cfg.q_lora_rank, bias=cfg.attention_bias)
        self.q_a_layernorm = RMSNorm(cfg.q_lora_rank, 1e-6)
        self.q_b_proj = Linear(cfg.q_lora_rank, H * cfg.qk_head_dim, bias=False)
        self.kv_a_proj_with_mqa = Linear(cfg.hidden_size, R + self.dr, bias=cfg.attention_bias)
        self.kv_a_layernorm = RMSNorm(R, 1e-6)
        self.kv_b_proj = Linear(R, H * (self.dn + self.dv), bias=False)
        self.o_proj = Linear(H * self.dv, cfg.hidden_size, bias=cfg.attention_bias)
        self.indexer = Indexer(cfg) if has_indexer else None
        self.scale = cfg.softmax_scale
        self.fused_in: tuple[torch.Tensor, list[int]] | None = None  # see `fuse_inputs`
        self.fast_select = False  # training only: `_select_fast` in place of `_select_dense`

    # ---- shared pieces ------------------------------------------------------------------
    def project(self, x: torch.Tensor, rope: Rope):
        """x [..., D] -> q_lat, q_nope [...,H,dn], q_pe [...,H,dr], c [...,R], k_pe [...,dr]."""
        return self._project_from(self.q_a_proj(x), self.kv_a_proj_with_mqa(x), rope)

    def _project_from(self, q_a: torch.Tensor, ckv: torch.Tensor, rope: Rope):
        q_lat = self.q_a_layernorm(q_a)
        q = self.q_b_proj(q_lat).unflatten(-1, (self.n_heads, self.dn + self.dr))
        q_nope, q_pe = q.split((self.dn, self.dr), dim=-1)
        q_pe = apply_rope(q_pe, rope)
        c, k_pe = ckv.split((self.R, self.dr), dim=-1)
        return q_lat, q_nope, q_pe, self.kv_a_layernorm(c), apply_rope(k_pe, rope)

    def _inputs(self) -> list[nn.Linear]:
        extra = [self.indexer.wk, self.indexer.weights_proj] if self.indexer is not None else []
        return [self.q_a_proj, self.kv_a_proj_with_mqa, *extra]

    def fuse_inputs(self) -> None:
        """Inference: one weight for every projection of the layer's input (q_a, kv_a and the
        indexer's wk and weights_proj), so a step runs one matmul instead of four. A copy: the
        modules keep their own weights (memory-mapped ones stay mapped); call it again after
        changing them."""
        linears = self._inputs()
        if any(m.bias is not None for m in linears) or len({m.weight.dtype for m in linears}) > 1:
            return
        with torch.no_grad():
            self.fused_in = torch.cat([m.weight for m in linears]), [m.out_features for m in linears]

    def lay_out_input_major(self) -> None:
        """Inference on the CPU (`Transformer.lay_out_for_decode`): the weights a paged step reads
        through `F.linear` stored input-major. `kv_b_proj` keeps its layout: decoding reads it as
        per-head views (`absorbed_weights`)."""
        if self.fused_in is not None:
            self.fused_in = (_input_major(self.fused_in[0]), self.fused_in[1])
        else:
            _lay_out_input_major(*self._inputs())
        _lay_out_input_major(self.q_b_proj, self.o_proj, *([self.indexer.wq_b] if self.indexer is not None else []))

    def _input_projections(self, x: torch.Tensor) -> list[torch.Tensor]:
        """[q_a(x), kv_a(x)] + [wk(x), weights_proj(x)] when the layer has an indexer."""
        if self.fused_in is None:
            outs = [self.q_a_proj(x), self.kv_a_proj_with_mqa(x)]
            if self.indexer is not None:
                outs += [self.indexer.wk(x), self.indexer.weights_proj(x.to(self.indexer.weights_proj.weight.dtype))]
            return outs
        weight, sizes = self.fused_in
        return list(F.linear(x, weight).split(sizes, dim=-1))

    def expand(self, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Latent [..., R] -> k_nope [..., H, dn], v [..., H, dv]."""
        kv = self.kv_b_proj(c).unflatten(-1, (self.n_heads, self.dn + self.dv))
        return kv.split((self.dn, self.dv), dim=-1)

    def absorbed_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """W_UK [H, dn, R] and W_UV [H, dv, R] slices of kv_b_proj."""
        w = self.kv_b_proj.weight.view(self.n_heads, self.dn + self.dv, self.R)
        return w[:, : self.dn], w[:, self.dn :]

    # ---- no-cache form: training and `logits()` -----------------------------------------
    def forward_dense(
        self,
        x: torch.Tensor,
        rope: Rope,
        valid: torch.Tensor | None,
        prev_topk: torch.Tensor | None,
        sparse: bool,
        train_indexer: bool,
    ) -> tuple[torch.Tensor, AttnAux]:
        """x [B,T,D] -> out [B,T,D]. `valid` [B,T] marks non-padding keys.

        The top-k selection is not differentiable: the indexer learns only from `indexer_kl`
        (on detached inputs, as in the DSA paper), so its scores for selection run without grad.
        """
        B, T, _ = x.shape
        q_lat, q_nope, q_pe, c, k_pe = self.project(x, rope)
        k_nope, v = self.expand(c)
        allowed = None if valid is None and not sparse else _causal_mask(B, T, valid, x.device)
        aux = AttnAux()
        if sparse:
            select = self._select_fast if self.training and self.fast_select else self._select_dense
            aux.selected = prev_topk if self.indexer is None else select(x, q_lat, rope, allowed)
            if aux.selected is None:
                raise ValueError("a shared DSA layer needs the top-k of an earlier full layer")
            allowed = allowed & aux.selected
        q = torch.cat((q_nope, q_pe), -1).transpose(1, 2)  # [B,H,T,dn+dr]
        k = torch.cat((k_nope, k_pe.unsqueeze(2).expand(B, T, self.n_heads, self.dr)), -1).transpose(1, 2)
        mask = None if allowed is None else allowed[:, None]
        out = F.scaled_dot_product_attention(q, k, v.transpose(1, 2), attn_mask=mask, is_causal=mask is None, scale=self.scale)
        if train_indexer and self.indexer is not None:
            aux.indexer_kl = self._indexer_kl(x, q_lat, q, k, rope, allowed)
        return self.o_proj(out.transpose(1, 2).flatten(2)), aux

    @torch.no_grad()
    def _select_dense(self, x, q_lat, rope: Rope, allowed) -> torch.Tensor:
        """[B,T,T] bool: the top-k visible keys of each query by indexer score."""
        qi, w = self.indexer.queries(x, q_lat, rope)
        scores = self.indexer.scores(qi, w, self.indexer.keys(x, rope))
        return topk_mask(scores.masked_fill(~allowed, float("-inf")), self.indexer.topk)

    @torch.no_grad()
    def _select_fast(self, x, q_lat, rope: Rope, allowed) -> torch.Tensor:
        """Training's cheaper `_select_dense`: the scores as batched matmuls in the autocast
        dtype (bf16 on a GPU; the positive scales, which order nothing, left out) and a plain
        top-k (ties broken as `topk` breaks them, not by position), [B,T,T] bool. Keys past a
        short row's visible ones come out selected; `allowed` masks them as before."""
        qi, w = self.indexer.queries(x, q_lat, rope)  # [B,S,Hi,Di], [B,S,Hi]
        k = self.indexer.keys(x, rope)  # [B,T,Di]
        B, S, Hi, _ = qi.shape
        device = x.device.type
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else qi.dtype
        s = F.relu(torch.matmul(qi.to(dtype).flatten(1, 2), k.to(dtype).mT))  # [B,S*Hi,T]
        scores = torch.matmul(w.to(dtype).view(B, S, 1, Hi), s.view(B, S, Hi, -1)).squeeze(2)
        top = scores.masked_fill(~allowed, float("-inf")).topk(min(self.indexer.topk, scores.shape[-1]), dim=-1, sorted=False)
        return torch.zeros_like(allowed).scatter_(-1, top.indices, True)

    def _indexer_kl(self, x, q_lat, q, k, rope: Rope, allowed, rows: int = 128) -> torch.Tensor:
        """KL(head-summed attention ‖ softmax(indexer scores)) over each query's attended keys,
        in fp32 (outside autocast), on a strided subset of `rows` queries per sequence."""
        B, T = x.shape[:2]
        pick = torch.arange(T - 1, -1, -max(1, T // rows), device=x.device).flip(0)
        seen = (_causal_mask(B, T, None, x.device) if allowed is None else allowed)[:, pick]
        with torch.autocast(x.device.type, enabled=False):
            with torch.no_grad():
                logits = torch.matmul(q[:, :, pick].float(), k.float().transpose(-1, -2)) * self.scale
                target = logits.masked_fill(~seen[:, None], float("-inf")).softmax(-1).sum(1)
                target = target / target.sum(-1, keepdim=True)
            xd, qd = x.detach().float(), q_lat.detach().float()
            qi, w = self.indexer.queries(xd[:, pick], qd[:, pick], rope.rows(pick))
            index_scores = self.indexer.scores(qi, w, self.indexer.keys(xd, rope))
            logq = index_scores.masked_fill(~seen, float("-inf")).log_softmax(-1)
            kl = torch.where(seen, target * (target.clamp_min(1e-12).log() - logq), torch.zeros_like(target))
        return kl.sum(-1).mean()

    # ---- paged form: the engine's prefill and decode -------------------------------------
    def forward_paged(
        self,
        x: torch.Tensor,
        batch: PagedBatch,
        kv_cache: torch.Tensor,
        index_cache: torch.Tensor,
        prev_indices: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x [N,D] -> out [N,D]; writes this step's latents and indexer keys into the cache.

        Returns the physical top-k slots [N, K] this layer attended to (None when dense), so that
        a following "shared" layer can reuse them.
        """
        q_a, ckv, *indexer_in = self._input_projections(x)
        q_lat, q_nope, q_pe, c, k_pe = self._project_from(q_a, ckv, batch.rope)
        kv_flat = kv_cache.view(-1, kv_cache.shape[-1])
        kv_flat.index_copy_(0, batch.slot_mapping, torch.cat((c, k_pe), -1).to(kv_cache.dtype))
        indices = self._select(x, q_lat, batch, index_cache, prev_indices, indexer_in)
        if batch.use_absorbed:
            out = self._attend_absorbed(q_nope, q_pe, kv_cache, batch, indices)
        else:
            out = self._attend_expanded(q_nope, q_pe, kv_flat, batch, indices)
        return self.o_proj(out.flatten(1)), indices

    def _select(self, x, q_lat, batch: PagedBatch, index_cache, prev_indices, projected: list[torch.Tensor]):
        """`projected`: [wk(x), weights_proj(x)] from `_input_projections` (layers with an indexer)."""
        if self.indexer is None:
            if batch.dense:
                return None
            if prev_indices is None:
                raise ValueError("a shared DSA layer needs the top-k of an earlier full layer")
            return prev_indices
        k_raw, w_raw = projected
        keys = self.indexer.keys(x, batch.rope, k_raw)
        index_cache.view(-1, index_cache.shape[-1]).index_copy_(0, batch.slot_mapping, keys.to(index_cache.dtype))
        if batch.dense:
            return None
        qi, w = self.indexer.queries(x, q_lat, batch.rope, w_raw)
        return indexer_topk(qi, w, index_cache, batch, self.indexer.softmax_scale, self.indexer.topk)

    def _attend_absorbed(self, q_nope, q_pe, kv_cache, batch: PagedBatch, indices):
        w_uk, w_uv = self.absorbed_weights()
        q_abs = torch.bmm(q_nope.transpose(0, 1), w_uk).transpose(0, 1)  # [N, H, R], per head: q_nope · W_UK
        q = torch.cat((q_abs, q_pe), -1)
        kv, idx = batch.attendable(kv_cache, batch.causal_slots if indices is None else indices)
        if batch.lean_decode:
            o_lat = lean.decode_attention(q, kv.view(-1, kv.shape[-1]), idx, self.scale, self.R)
        else:
            o_lat, _ = sparse_attention(q, kv, idx, self.scale, self.R)
        return torch.bmm(o_lat.transpose(0, 1), w_uv.transpose(1, 2)).transpose(0, 1)  # [N, H, dv]: o_lat · W_UVᵀ

    def _attend_expanded(self, q_nope, q_pe, kv_flat, batch: PagedBatch, indices):
        outs = []
        for b, (start, end) in enumerate(batch.query_spans()):
            n_keys = batch.context_len_list[b]
            rows, slots = batch.attendable(kv_flat, batch.key_slots[b, :n_keys])
            lat = gather_rows(rows.reshape(-1, rows.shape[-1]), slots)
            k_nope, v = self.expand(lat[:, : self.R])
            k = torch.cat((k_nope, lat[:, None, self.R :].expand(n_keys, self.n_heads, self.dr)), -1)
            q = torch.cat((q_nope[start:end], q_pe[start:end]), -1)
            allowed = batch.causal_mask(b)
            if indices is not None:
                allowed = allowed & batch.selection_mask(b, indices[start:end])
            new = end - start
            step = min(_CAUSAL_ROWS, max(1, _SCORE_BYTES // (4 * n_keys * self.n_heads)))  # bound the [H, rows, keys] scores
            for i in range(0, new, step):
                seen = n_keys - new + min(i + step, new)  # the queries are the context's last tokens: none sees past its own
                outs.append(_masked_attention(q[i : i + step], k[:seen], v[:seen], allowed[i : i + step, :seen], self.scale))
        return torch.cat(outs, 0)


def _masked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor, scale: float) -> torch.Tensor:
    """q [S,H,d], k [T,H,d], v [T,H,dv], allowed [S,T] (each row allows a key) -> [S,H,dv].

    On CUDA, SDPA; elsewhere one batched matmul, softmax and matmul in fp32, which on the CPU
    runs 2-3x faster than SDPA's masked path (measured for a 600-token prefill)."""
    if q.is_cuda:
        out = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=allowed, scale=scale)
        return out.transpose(0, 1)
    bias = torch.zeros(allowed.shape, device=q.device).masked_fill_(~allowed, float("-inf"))
    scores = torch.baddbmm(bias, q.float().transpose(0, 1), k.float().permute(1, 2, 0), alpha=scale)  # [H, S, T]
    return torch.bmm(scores.softmax(-1), v.float().transpose(0, 1)).transpose(0, 1).to(q.dtype)


_SCORE_BYTES = 256 << 20
_CAUSAL_ROWS = 128  # queries attended at a time: each block of rows skips the keys after its last (a prefill does ~60% of the dense work)
FUSE_EXPERTS_BYTES = 256 << 20  # routed experts' gate+up bytes per layer up to which they are fused
# fp32 CPU weights up to which `lay_out_for_decode` copies them input-major: the copies cost
# ~0.3-1 ms per MB once, when the first engine starts (the embedded model's 67 MB: 23-68 ms;
# the benchmarks' mid model, 266 MB: 123-254 ms, more than its first completion's decode steps gain)
INPUT_MAJOR_BYTES = 128 << 20


def _input_major(weight: torch.Tensor) -> torch.Tensor:
    """The same [out, in] matrix, stored input-major (its transpose contiguous, viewed back)."""
    return weight.t().contiguous().t()


def _lay_out_input_major(*linears: nn.Linear) -> None:
    for linear in linears:
        linear.weight = nn.Parameter(_input_major(linear.weight.detach()), requires_grad=linear.weight.requires_grad)


def _causal_mask(B: int, T: int, valid: torch.Tensor | None, device) -> torch.Tensor:
    """[B,T,T] bool; padding keys are never seen, padding queries see only themselves."""
    allowed = torch.ones(T, T, dtype=torch.bool, device=device).tril().expand(B, T, T)
    if valid is None:
        return allowed
    eye = torch.eye(T, dtype=torch.bool, device=device)
    return (allowed & valid[:, None, :]) | (eye & ~valid[:, :, None])


def _rows_adjacent(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether contiguous 2-D `b` starts in `a`'s storage right where contiguous 2-D `a` ends."""
    return (
        a.dim() == b.dim() == 2 and a.is_contiguous() and b.is_contiguous() and a.dtype == b.dtype
        and a.device == b.device and a.shape[1] == b.shape[1]
        and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
        and a.storage_offset() + a.numel() == b.storage_offset()
    )


def _rows_of(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The rows of `a` then `b` (side by side) as one tensor: a view, no copy."""
    return a.as_strided((a.shape[0] + b.shape[0], a.shape[1]), a.stride())


class MLP(nn.Module):
    def __init__(self, dim: int, inter: int) -> None:
        super().__init__()
        self.gate_proj = Linear(dim, inter, bias=False)
        self.up_proj = Linear(dim, inter, bias=False)
        self.down_proj = Linear(inter, dim, bias=False)
        self.gate_up: torch.Tensor | None = None  # see `fuse`

    def fuse(self) -> None:
        """Inference: gate and up projections as one matmul. A view of both weights where they
        lie side by side in memory (as the loader places them), else a copy of both."""
        gate, up = self.gate_proj.weight, self.up_proj.weight
        with torch.no_grad():
            self.gate_up = _rows_of(gate, up) if _rows_adjacent(gate, up) else torch.cat((gate, up))

    def lay_out_input_major(self) -> None:
        """Inference on the CPU: the weights a step reads stored input-major (`MLA.lay_out_input_major`);
        a fused `gate_up` becomes a copy."""
        if self.gate_up is not None:
            self.gate_up = _input_major(self.gate_up)
        else:
            _lay_out_input_major(self.gate_proj, self.up_proj)
        _lay_out_input_major(self.down_proj)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate_up is None or torch.is_grad_enabled():
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        gate, up = F.linear(x, self.gate_up).chunk(2, dim=-1)
        return F.linear(F.silu(gate).mul_(up), self.down_proj.weight)


class Gate(nn.Module):
    """Sigmoid router: bias-corrected group-limited top-k selection, unbiased normalised weights."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.topk, self.n_group, self.topk_group = cfg.num_experts_per_tok, cfg.n_group, cfg.topk_group
        self.norm, self.route_scale = cfg.norm_topk_prob, cfg.routed_scaling_factor
        self.weight = nn.Parameter(torch.empty(cfg.n_routed_experts, cfg.hidden_size, dtype=torch.float32))
        self.register_buffer("e_score_correction_bias", torch.zeros(cfg.n_routed_experts, dtype=torch.float32))
        self.observers: list[Callable[[torch.Tensor, torch.Tensor], None]] = []  # see `observe`

    def observe(self, fn: Callable[[torch.Tensor, torch.Tensor], None]) -> Callable[[], None]:
        """Call `fn(weights, indices)` after each eager forward; returns its remover. Not a module
        hook: a compiled graph neither traces nor guards on observers (`model_runtime.compiled`),
        and the runner runs a step eager while any gate is observed."""
        self.observers.append(fn)
        return lambda: self.observers.remove(fn)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [N,D] -> weights [N,k] fp32, expert indices [N,k]."""
        scores = F.linear(x.float(), self.weight.float()).sigmoid()
        choice = scores.detach() + self.e_score_correction_bias
        if self.n_group > 1:
            grouped = choice.unflatten(-1, (self.n_group, -1))
            keep = grouped.topk(2, dim=-1).values.sum(-1).topk(self.topk_group, dim=-1).indices
            group_mask = torch.zeros_like(grouped[..., 0], dtype=torch.bool).scatter(-1, keep, True)
            choice = grouped.masked_fill(~group_mask[..., None], float("-inf")).flatten(-2)
        indices = choice.topk(self.topk, dim=-1, sorted=False).indices
        weights = scores.gather(-1, indices)
        if self.norm:
            weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
        weights = weights * self.route_scale
        if not torch.compiler.is_dynamo_compiling() and self.observers:
            for observe in self.observers:
                observe(weights, indices)
        return weights, indices


class Experts(nn.ModuleList):
    """E SwiGLU experts (one `MLP` each, so checkpoint tensors map one-to-one and stay mmap-backed)."""

    def __init__(self, n: int, dim: int, inter: int) -> None:
        super().__init__(MLP(dim, inter) for _ in range(n))
        self.stacked: tuple[torch.Tensor, torch.Tensor] | None = None  # see `stack`

    def stack(self) -> None:
        """Inference, for compiled decoding: gate/up weights as one [E, 2I, D] tensor (each
        expert's fused `gate_up` becomes a view of it) and down weights copied into [E, D, I],
        so that a graph can gather the routed experts by index instead of branching on them."""
        with torch.no_grad():
            gate_up = torch.stack([torch.cat((e.gate_proj.weight, e.up_proj.weight)) for e in self])
            down = torch.stack([e.down_proj.weight for e in self])
        for expert, weight in zip(self, gate_up):
            expert.gate_up = weight
        self.stacked = (gate_up, down)

    def forward(self, x: torch.Tensor, weights: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        """x [N,D], weights/indices [N,k] -> Σ_j weights[:, j] · Expert_{indices[:, j]}(x)."""
        if self.stacked is not None and torch.compiler.is_dynamo_compiling():
            return self._gathered(x, weights, indices)
        if x.shape[0] == 1:  # decode fast path: no bincount/where, the same accumulation order (by expert)
            y = None
            for expert, weight in sorted(zip(indices[0].tolist(), weights[0].tolist())):
                out = self[expert](x).mul_(weight)
                y = out if y is None else y.add_(out)
            return y
        y = torch.zeros_like(x)
        flat = indices.flatten()
        order = flat.argsort(stable=True)  # (token, slot) pairs grouped by expert
        token = order // indices.shape[1]
        routed, start = x[token], 0
        outs = []
        for e, count in enumerate(torch.bincount(flat, minlength=len(self)).tolist()):
            if count:
                outs.append(self[e](routed[start : start + count]))
                start += count
        h = torch.cat(outs) * weights.flatten()[order, None]
        return y.index_add_(0, token, h.to(y.dtype))

    def forward_capacity(self, x: torch.Tensor, weights: torch.Tensor, indices: torch.Tensor,
                         capacity: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Training: the same sum with every expert given `capacity` rows, so that every shape is
        known before the step runs (no host sync, no graph break, batched matmuls); an expert's
        (token, slot) pairs past its capacity, in token order, are dropped (add nothing).
        Returns (y [N,D], pairs dropped: a 0-d tensor)."""
        (n, k), e = indices.shape, len(self)
        flat = indices.flatten()
        onehot = (flat[:, None] == torch.arange(e, device=x.device)).long()  # F.one_hot checks values on the host
        rank = (onehot.cumsum(0) - 1).gather(1, flat[:, None]).squeeze(1)  # place in its expert's queue
        kept = rank < capacity
        slot = torch.where(kept, flat * capacity + rank, e * capacity)  # e * capacity: the spill row
        token = torch.arange(n * k, device=x.device) // k
        source = torch.full((e * capacity + 1,), n, device=x.device, dtype=token.dtype).scatter(0, slot, token)
        routed = torch.cat((x, x.new_zeros(1, x.shape[1])))[source[:-1]].view(e, capacity, -1)
        gate_up = torch.stack([torch.cat((m.gate_proj.weight, m.up_proj.weight)) for m in self])
        down = torch.stack([m.down_proj.weight for m in self])
        gate, up = torch.bmm(routed, gate_up.mT).chunk(2, dim=-1)
        h = torch.bmm(F.silu(gate) * up, down.mT).flatten(0, 1)
        h = torch.cat((h, h.new_zeros(1, h.shape[1])))[slot] * weights.flatten()[:, None]
        return h.view(n, k, -1).sum(1).to(x.dtype), (~kept).sum()

    def _gathered(self, x: torch.Tensor, weights: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        """The same sum from the stacked weights: each (token, slot) gathers its expert's
        matrices (a copy of k experts per token: right for the few tokens of a decode step)."""
        gate_up, down = self.stacked
        n, k = indices.shape
        chosen = indices.flatten()
        h = torch.bmm(gate_up[chosen], x.repeat_interleave(k, 0)[:, :, None]).squeeze(-1)
        gate, up = h.chunk(2, dim=-1)
        out = torch.bmm(down[chosen], (F.silu(gate) * up)[:, :, None]).squeeze(-1)
        return (out * weights.flatten()[:, None]).to(x.dtype).view(n, k, -1).sum(1)


class MoE(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gate = Gate(cfg)
        self.experts = Experts(cfg.n_routed_experts, cfg.hidden_size, cfg.moe_intermediate_size)
        self.shared_experts = (
            MLP(cfg.hidden_size, cfg.moe_intermediate_size * cfg.n_shared_experts) if cfg.n_shared_experts else None
        )
        self.last_load: torch.Tensor | None = None  # tokens per expert of the last call (training)
        # training: None dispatches by the routed counts (`Experts.forward`, a host sync a layer);
        # a factor f gives each expert ceil(f * tokens * k / E) rows (`Experts.forward_capacity`)
        self.capacity_factor: float | None = None
        self.last_dropped: torch.Tensor | None = None  # (token, slot) pairs over capacity, last call

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        weights, indices = self.gate(flat)
        if self.training and self.capacity_factor is not None:
            n_experts = self.gate.weight.shape[0]
            capacity = math.ceil(self.capacity_factor * indices.numel() / n_experts)
            self.last_load = torch.zeros(n_experts, dtype=torch.long, device=x.device).scatter_add_(
                0, indices.flatten(), torch.ones_like(indices.flatten()))
            y, self.last_dropped = self.experts.forward_capacity(flat, weights, indices, capacity)
            y = y.view(shape)
            return y if self.shared_experts is None else y + self.shared_experts(x)
        if self.training:
            self.last_load = torch.bincount(indices.flatten(), minlength=self.gate.weight.shape[0])
        y = self.experts(flat, weights, indices).view(shape)
        return y if self.shared_experts is None else y + self.shared_experts(x)


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, moe: bool, has_indexer: bool) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = MLA(cfg, has_indexer)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp: MoE | MLP = MoE(cfg) if moe else MLP(cfg.hidden_size, cfg.intermediate_size)

    def forward_dense(self, x, rope, valid, prev_topk, sparse, train_indexer):
        h, aux = self.self_attn.forward_dense(self.input_layernorm(x), rope, valid, prev_topk, sparse, train_indexer)
        x = x + h
        return x + self.mlp(self.post_attention_layernorm(x)), aux

    def forward_paged(self, x, batch, kv_cache, index_cache, prev_indices):
        h, indices = self.self_attn.forward_paged(self.input_layernorm(x), batch, kv_cache, index_cache, prev_indices)
        x = x + h
        return x + self.mlp(self.post_attention_layernorm(x)), indices


class SharedHead(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class MTP(Block):
    """Multi-token prediction layer: from the main model's hidden h_t and token t+1, predict t+2.

    z = Block(eh_proj([RMSNorm(embed(x_{t+1})) ; RMSNorm(h_t)])); logits = head(shared_head.norm(z)).
    Uses the main model's embedding and head (GLM-5 checkpoints may omit their own copies).
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg, moe=True, has_indexer=True)
        self.enorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.hnorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.eh_proj = Linear(2 * cfg.hidden_size, cfg.hidden_size, bias=False)
        self.shared_head = SharedHead(cfg)

    def fuse(self, h_prev: torch.Tensor, next_embeds: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        next_embeds = next_embeds.masked_fill((positions == 0)[..., None], 0.0)
        return self.eh_proj(torch.cat((self.enorm(next_embeds), self.hnorm(h_prev)), -1))


@dataclass
class TrainOutput:
    loss: torch.Tensor
    lm_loss: torch.Tensor
    mtp_loss: torch.Tensor | None
    indexer_kl: torch.Tensor | None
    expert_load: list[torch.Tensor] = field(default_factory=list)  # per MoE layer, tokens per expert


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        # `_weight` skips nn.Embedding's normal_ init: on the meta device that init imports
        # torch._dynamo (2.6 s of model load). Real init is `init_weights` or the checkpoint.
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size, _weight=torch.empty(cfg.vocab_size, cfg.hidden_size))
        self.layers = nn.ModuleList(
            Block(cfg, cfg.is_moe_layer(i), cfg.indexer_types[i] == "full") for i in range(cfg.num_hidden_layers)
        )
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.mtp = nn.ModuleList(MTP(cfg) for _ in range(cfg.num_nextn_predict_layers))
        self.laid_out = False  # see `lay_out_for_decode`

    # ---- no-cache forward ---------------------------------------------------------------
    def forward_dense(
        self,
        input_ids: torch.Tensor,
        valid: torch.Tensor | None = None,
        sparse: bool | None = None,
        train_indexer: bool = False,
    ) -> tuple[torch.Tensor, list[AttnAux]]:
        """input_ids [B,T] -> final-normed hidden [B,T,D]. `sparse=None`: sparse iff T > index_topk."""
        B, T = input_ids.shape
        sparse = T > self.cfg.index_topk if sparse is None else sparse
        positions = _positions(valid, B, T, input_ids.device)
        rope = rope_tables(positions, self.cfg.qk_rope_head_dim, self.cfg.rope_theta)
        x = self.embed_tokens(input_ids)
        auxes, prev = [], None
        for layer in self.layers:
            x, aux = layer.forward_dense(x, rope, valid, prev, sparse, train_indexer)
            prev = aux.selected if aux.selected is not None else prev
            auxes.append(aux)
        return self.norm(x), auxes

    def mtp_dense(self, hidden: torch.Tensor, input_ids: torch.Tensor, depth: int = 0, **kw) -> tuple[torch.Tensor, AttnAux]:
        """MTP over a whole sequence: position t fuses h_t with token t+1 -> hidden [B,T-1,D]."""
        mtp = self.mtp[depth]
        B, T = input_ids.shape
        positions = torch.arange(T - 1, device=input_ids.device).expand(B, T - 1)
        z = mtp.fuse(hidden[:, :-1], self.embed_tokens(input_ids[:, 1:]), positions)
        rope = rope_tables(positions, self.cfg.qk_rope_head_dim, self.cfg.rope_theta)
        sparse = kw.pop("sparse", None)
        sparse = (T - 1) > self.cfg.index_topk if sparse is None else sparse
        z, aux = mtp.forward_dense(z, rope, None, None, sparse, kw.pop("train_indexer", False))
        return mtp.shared_head.norm(z), aux

    def forward_train(
        self,
        input_ids: torch.Tensor,
        targets: torch.Tensor,
        loss_mask: torch.Tensor,
        sparse: bool,
        train_indexer: bool = True,
        mtp_weight: float = 0.3,
        indexer_weight: float = 1.0,
        mtp_stride: int = 1,
    ) -> TrainOutput:
        """LM loss (+ MTP loss on targets shifted once more, + indexer KL); targets[t] = ids[t+1].
        `mtp_stride` > 1 scores the MTP head on every n-th position only (its vocabulary
        projection costs as much as the main head's)."""
        hidden, auxes = self.forward_dense(input_ids, sparse=sparse, train_indexer=train_indexer)
        lm_loss = _masked_ce(self.lm_head(hidden), targets, loss_mask)
        loss, mtp_loss = lm_loss, None
        if self.mtp and mtp_weight > 0:
            z, aux = self.mtp_dense(hidden, input_ids, sparse=sparse, train_indexer=train_indexer)
            pick = slice(mtp_stride - 1, None, mtp_stride)
            mtp_loss = _masked_ce(self.lm_head(z[:, pick]), targets[:, 1:][:, pick], loss_mask[:, 1:][:, pick])
            loss = loss + mtp_weight * mtp_loss
            auxes = [*auxes, aux]
        kls = [a.indexer_kl for a in auxes if a.indexer_kl is not None]
        indexer_kl = torch.stack(kls).mean() if kls else None
        if indexer_kl is not None:
            loss = loss + indexer_weight * indexer_kl
        loads = [m.mlp.last_load for m in [*self.layers, *self.mtp] if isinstance(m.mlp, MoE) and m.mlp.last_load is not None]
        return TrainOutput(loss, lm_loss, mtp_loss, indexer_kl, loads)

    # ---- paged forward (engine) ---------------------------------------------------------
    @property
    def observed(self) -> bool:
        """Some MoE gate has observers (`Gate.observe`): such steps run eager."""
        return any(block.mlp.gate.observers for block in [*self.layers, *self.mtp] if isinstance(block.mlp, MoE))

    def ensure_fused(self) -> None:
        """`fuse_for_inference` and `lay_out_for_decode`, each unless it has run (the weights are
        frozen from then on)."""
        if self.layers[0].self_attn.fused_in is None:
            self.fuse_for_inference()
        if not self.laid_out:
            self.lay_out_for_decode()

    def weight_bytes(self) -> int:
        """Bytes of every parameter (the engine's layout and scoring choices follow it)."""
        return sum(w.numel() * w.element_size() for w in self.parameters())

    def lay_out_for_decode(self, max_bytes: int = INPUT_MAJOR_BYTES) -> None:
        """Store the weights that a paged step reads through `F.linear` input-major ([in, out]
        contiguous, the [out, in] matrix a view of it), where the model is fp32 on the CPU and
        its weights take at most `max_bytes` (these are copies).

        `F.linear` then hands MKL a plain [in, out] operand, which it streams faster for the few
        rows of a decode step on the CPU measured (an AMD EPYC, cold caches, one row: the
        embedded model's 8 MB output projection 370 against 1,086 us, its experts' gate and up
        65 against 111 us; some small matrices a little slower), and as fast for a prefill
        (600 rows: within 3%). The embedded model's decode step: 5.87 against 6.80 ms (in
        process, alternated). bf16 weights keep their layout (one row: 312 against 206 us)."""
        self.laid_out = True
        weights = list(self.parameters())
        if any(w.device.type != "cpu" or w.dtype != torch.float32 for w in weights):
            return
        if self.weight_bytes() > max_bytes:
            return
        for module in self.modules():
            if isinstance(module, (MLA, MLP)):
                module.lay_out_input_major()
        if self.lm_head.weight is not self.embed_tokens.weight:
            _lay_out_input_major(self.lm_head)
        _lay_out_input_major(*(mtp.eh_proj for mtp in self.mtp))

    def fuse_for_inference(self, max_expert_bytes: int = FUSE_EXPERTS_BYTES) -> None:
        """Fuse the projections that share an input (`MLA.fuse_inputs`, `MLP.fuse`) for the engine:
        fewer, larger matmuls per step. A layer's routed experts are fused only while their gate
        and up weights take at most `max_expert_bytes` (copies, where they do not lie side by
        side, cost that much memory)."""
        for block in [*self.layers, *self.mtp]:
            block.self_attn.fuse_inputs()
            mlps = [block.mlp] if isinstance(block.mlp, MLP) else [m for m in [block.mlp.shared_experts] if m is not None]
            if isinstance(block.mlp, MoE):
                experts = list(block.mlp.experts)
                size = sum(2 * e.gate_proj.weight.numel() * e.gate_proj.weight.element_size() for e in experts)
                mlps += experts if size <= max_expert_bytes else []
            for mlp in mlps:
                mlp.fuse()

    def forward_paged(self, input_ids: torch.Tensor, batch: PagedBatch, cache, on_layer=None) -> torch.Tensor:
        """input_ids [N] -> final-normed hidden [N,D]; reads and writes `cache` layers 0..L-1.

        `on_layer(i, indices)`, when given, sees each layer's top-k slots (None: dense)."""
        x = self.embed_tokens(input_ids)
        prev = None
        for i, layer in enumerate(self.layers):
            x, indices = layer.forward_paged(x, batch, cache.kv[i], cache.index[i], prev)
            prev = indices if indices is not None else prev
            if on_layer is not None:
                on_layer(i, indices)
        return self.norm(x)

    def mtp_paged(self, hidden_prev: torch.Tensor, next_ids: torch.Tensor, batch: PagedBatch, cache, depth: int = 0) -> torch.Tensor:
        """One MTP step over a paged batch: h_t [N,D] + token t+1 [N] -> normed hidden [N,D]."""
        mtp = self.mtp[depth]
        z = mtp.fuse(hidden_prev, self.embed_tokens(next_ids), batch.positions)
        layer = self.cfg.num_hidden_layers + depth
        z, _ = mtp.forward_paged(z, batch, cache.kv[layer], cache.index[layer], None)
        return mtp.shared_head.norm(z)


def init_weights(model: nn.Module, std: float = 0.02) -> None:
    """Random init for training and tests: N(0, std) linears/embeddings/router, unit norms, zero biases."""
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, 0.0, std)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, (RMSNorm, nn.LayerNorm)):
            nn.init.ones_(module.weight)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, Gate):
            nn.init.normal_(module.weight, 0.0, std)
            module.e_score_correction_bias.zero_()


def _positions(valid: torch.Tensor | None, B: int, T: int, device) -> torch.Tensor:
    if valid is None:
        return torch.arange(T, device=device).expand(B, T)
    return (valid.long().cumsum(-1) - 1).clamp(min=0)


def _masked_ce(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="none")
    mask = mask.flatten().to(loss.dtype)
    return (loss * mask).sum() / mask.sum().clamp_min(1.0)
