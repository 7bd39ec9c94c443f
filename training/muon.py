"""Muon for the hidden matrices, AdamW for everything else, in one `torch.optim.Optimizer`.

Role: an optimizer option of `training.train` (`--optimizer muon`). Muon (Jordan et al., 2024)
takes the Nesterov momentum of a weight matrix's gradient and replaces it by its nearest
semi-orthogonal matrix (five quintic Newton–Schulz steps), so every direction of the update
moves by about the same amount. Matrices of the transformer blocks and the MTP layer get Muon;
the embedding, the output head, the MoE routers, norms and biases keep AdamW, as the Muon
authors advise.

The Muon update is scaled by `0.2 * sqrt(max(rows, cols))`, which matches AdamW's update RMS
(Liu et al., 2025, "Muon is Scalable for LLM Training"), so both kinds of group share one learning
rate and one weight decay and the run's schedule drives them unchanged.

The Newton–Schulz steps run in `ns_dtype`: fp32 by default, or bf16 as the Muon authors run
them, which on this CPU (AMX-bf16) takes 0.41 s against 0.76 s for the `small` preset's 152
matrices (one thread). Stacking the matrices of one shape into batched matmuls was slower in
fp32 (1.15 s) and no faster in bf16 (0.46 s), so each matrix runs alone.

Invariants:
- One optimizer, standard `state_dict()`/`load_state_dict()`: checkpoints resume exactly.
- Every group carries `muon` (bool); the AdamW groups follow `torch.optim.AdamW`'s update
  (decoupled weight decay, bias correction).
"""

from __future__ import annotations

import torch
from torch import nn

NS_COEFFS = (3.4445, -4.7750, 2.0315)
ADAMW_ONLY = ("embed_tokens.", "lm_head.", ".gate.weight")


NS_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def orthogonalize(g: torch.Tensor, steps: int = 5, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The quintic Newton–Schulz approximation of U·Vᵀ for g = U·S·Vᵀ (2-D), iterated in
    `dtype`, returned in fp32."""
    a, b, c = NS_COEFFS
    x = g.float()
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    x = (x / (x.norm() + 1e-7)).to(dtype)
    for _ in range(steps):
        s = x @ x.T
        x = a * x + (b * s + c * s @ s) @ x
    x = x.float()
    return x.T if tall else x


class MuonAdamW(torch.optim.Optimizer):
    def __init__(self, groups: list[dict], lr: float, betas: tuple[float, float] = (0.9, 0.95),
                 eps: float = 1e-8, momentum: float = 0.95, ns_steps: int = 5, ns_dtype: str = "float32") -> None:
        for group in groups:
            if "muon" not in group:
                raise ValueError("every parameter group must say whether it is a Muon group")
            if group["muon"] and any(p.dim() != 2 for p in group["params"]):
                raise ValueError("Muon groups hold 2-D matrices only")
        if ns_dtype not in NS_DTYPES:
            raise ValueError(f"ns_dtype: expected one of {', '.join(NS_DTYPES)}, got {ns_dtype!r}")
        defaults = dict(lr=lr, betas=betas, eps=eps, momentum=momentum, ns_steps=ns_steps, ns_dtype=ns_dtype, weight_decay=0.0)
        super().__init__(groups, defaults)

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001 - torch's signature
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            update = self._muon if group["muon"] else self._adamw
            for p in group["params"]:
                if p.grad is not None:
                    update(p, group)
        return loss

    def _muon(self, p: torch.Tensor, group: dict) -> None:
        state = self.state[p]
        if not state:
            state["momentum_buffer"] = torch.zeros_like(p, dtype=torch.float32)
        buf, mu = state["momentum_buffer"], group["momentum"]
        buf.mul_(mu).add_(p.grad.float())
        dtype = NS_DTYPES[group.get("ns_dtype", "float32")]  # checkpoints before the option: fp32
        direction = orthogonalize(p.grad.float().add(buf, alpha=mu), group["ns_steps"], dtype)
        p.mul_(1 - group["lr"] * group["weight_decay"])
        p.add_(direction.to(p.dtype), alpha=-group["lr"] * 0.2 * max(p.shape) ** 0.5)

    def _adamw(self, p: torch.Tensor, group: dict) -> None:
        state = self.state[p]
        if not state:
            state["step"] = torch.zeros((), dtype=torch.float32)
            state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32)
            state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)
        (b1, b2), g = group["betas"], p.grad.float()
        state["step"] += 1
        t = float(state["step"])
        state["exp_avg"].lerp_(g, 1 - b1)
        state["exp_avg_sq"].mul_(b2).addcmul_(g, g, value=1 - b2)
        denom = (state["exp_avg_sq"] / (1 - b2**t)).sqrt_().add_(group["eps"])
        p.mul_(1 - group["lr"] * group["weight_decay"])
        p.addcdiv_(state["exp_avg"].to(p.dtype), denom.to(p.dtype), value=-group["lr"] / (1 - b1**t))


def muon_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Block matrices -> Muon; embedding, head, routers -> AdamW with decay; the rest without."""
    muon, decay, rest = [], [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if p.dim() < 2:
            rest.append(p)
        elif any(tag in name for tag in ADAMW_ONLY) or p.dim() != 2:
            decay.append(p)
        else:
            muon.append(p)
    return [{"params": muon, "muon": True, "weight_decay": weight_decay},
            {"params": decay, "muon": False, "weight_decay": weight_decay},
            {"params": rest, "muon": False, "weight_decay": 0.0}]
