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

Two implementations of the same update (`impl`):
- `batched` (default): the momentum and AdamW updates as `torch._foreach_*` calls over a group,
  and the Newton–Schulz steps over each shape's matrices stacked into batched matmuls (wide
  orientation, one graph for every shape, so `compile=True` compiles it once). On a GPU a
  matrix-at-a-time optimizer is launch-bound: ~70% of a step's kernel launches were here.
- `single`: each matrix on its own, as first written; the fallback a GPU window uses when the
  batched path fails. On this CPU it is about as fast (one thread: fp32 0.76 s against 1.15 s
  stacked, bf16 0.41 against 0.46 s for the `small` preset's 152 matrices, measured earlier).

The Newton–Schulz steps run in `ns_dtype`: fp32 by default, or bf16 as the Muon authors run them.

Invariants:
- One optimizer, standard `state_dict()`/`load_state_dict()`, the same state under either
  implementation: checkpoints resume exactly, and a run may switch implementation on resume.
- Every group carries `muon` (bool); the AdamW groups follow `torch.optim.AdamW`'s update
  (decoupled weight decay, bias correction).
"""

from __future__ import annotations

import sys
from collections import defaultdict

import torch
from torch import nn

NS_COEFFS = (3.4445, -4.7750, 2.0315)
ADAMW_ONLY = ("embed_tokens.", "lm_head.", ".gate.weight")
NS_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
IMPLS = ("batched", "single")


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


def newton_schulz_wide(x: torch.Tensor, steps: int, dtype: torch.dtype) -> torch.Tensor:
    """`orthogonalize` of a stack [N, rows, cols] with rows <= cols, each matrix on its own
    (fp32 in and out). No data-dependent branch: it compiles to one graph for every shape."""
    a, b, c = NS_COEFFS
    x = (x / (x.norm(dim=(-2, -1), keepdim=True) + 1e-7)).to(dtype)
    for _ in range(steps):
        s = x @ x.mT
        x = a * x + (b * s + c * s @ s) @ x
    return x.float()


class MuonAdamW(torch.optim.Optimizer):
    def __init__(self, groups: list[dict], lr: float, betas: tuple[float, float] = (0.9, 0.95),
                 eps: float = 1e-8, momentum: float = 0.95, ns_steps: int = 5, ns_dtype: str = "float32",
                 impl: str = "batched", compile: bool = False) -> None:
        for group in groups:
            if "muon" not in group:
                raise ValueError("every parameter group must say whether it is a Muon group")
            if group["muon"] and any(p.dim() != 2 for p in group["params"]):
                raise ValueError("Muon groups hold 2-D matrices only")
        if ns_dtype not in NS_DTYPES:
            raise ValueError(f"ns_dtype: expected one of {', '.join(NS_DTYPES)}, got {ns_dtype!r}")
        if impl not in IMPLS:
            raise ValueError(f"impl: expected one of {', '.join(IMPLS)}, got {impl!r}")
        defaults = dict(lr=lr, betas=betas, eps=eps, momentum=momentum, ns_steps=ns_steps, ns_dtype=ns_dtype, weight_decay=0.0)
        super().__init__(groups, defaults)
        self.impl = impl
        self.newton_schulz = torch.compile(newton_schulz_wide, dynamic=True) if compile else newton_schulz_wide

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001 - torch's signature
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if self.impl == "batched" and params and all(p.dtype == torch.float32 for p in params):
                (self._muon_batched if group["muon"] else self._adamw_batched)(params, group)
                continue
            update = self._muon if group["muon"] else self._adamw
            for p in params:
                update(p, group)
        return loss

    # ---- one matrix at a time ------------------------------------------------------------
    def _muon(self, p: torch.Tensor, group: dict) -> None:
        buf, mu = self._momentum(p), group["momentum"]
        buf.mul_(mu).add_(p.grad.float())
        dtype = NS_DTYPES[group.get("ns_dtype", "float32")]  # checkpoints before the option: fp32
        direction = orthogonalize(p.grad.float().add(buf, alpha=mu), group["ns_steps"], dtype)
        p.mul_(1 - group["lr"] * group["weight_decay"])
        p.add_(direction.to(p.dtype), alpha=-group["lr"] * 0.2 * max(p.shape) ** 0.5)

    def _adamw(self, p: torch.Tensor, group: dict) -> None:
        state = self._adam_state(p)
        (b1, b2), g = group["betas"], p.grad.float()
        state["step"] += 1
        t = float(state["step"])
        state["exp_avg"].lerp_(g, 1 - b1)
        state["exp_avg_sq"].mul_(b2).addcmul_(g, g, value=1 - b2)
        denom = (state["exp_avg_sq"] / (1 - b2**t)).sqrt_().add_(group["eps"])
        p.mul_(1 - group["lr"] * group["weight_decay"])
        p.addcdiv_(state["exp_avg"].to(p.dtype), denom.to(p.dtype), value=-group["lr"] / (1 - b1**t))

    # ---- a group at a time -----------------------------------------------------------------
    def _muon_batched(self, params: list[torch.Tensor], group: dict) -> None:
        """`_muon` for a group of fp32 matrices: foreach momentum, one stacked Newton–Schulz per shape."""
        mu, grads = group["momentum"], [p.grad for p in params]
        bufs = [self._momentum(p) for p in params]
        torch._foreach_mul_(bufs, mu)
        torch._foreach_add_(bufs, grads)
        nesterov = torch._foreach_add(grads, bufs, alpha=mu)
        dtype = NS_DTYPES[group.get("ns_dtype", "float32")]
        by_shape: dict[tuple[int, int], list[int]] = defaultdict(list)
        for i, p in enumerate(params):
            by_shape[tuple(p.shape)].append(i)
        torch._foreach_mul_(params, 1 - group["lr"] * group["weight_decay"])
        for shape, members in by_shape.items():
            stack = torch.stack([nesterov[i] for i in members])
            tall = shape[0] > shape[1]
            directions = self._newton_schulz(stack.mT if tall else stack, group["ns_steps"], dtype)
            directions = (directions.mT if tall else directions).unbind(0)
            torch._foreach_add_([params[i] for i in members], directions, alpha=-group["lr"] * 0.2 * max(shape) ** 0.5)

    def _adamw_batched(self, params: list[torch.Tensor], group: dict) -> None:
        """`_adamw` for a group of fp32 tensors as foreach calls (the step counters stay on the CPU)."""
        (b1, b2), grads = group["betas"], [p.grad for p in params]
        states = [self._adam_state(p) for p in params]
        for state in states:
            state["step"] += 1
        steps = [float(state["step"]) for state in states]
        exp_avg, exp_avg_sq = [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states]
        torch._foreach_lerp_(exp_avg, grads, 1 - b1)
        torch._foreach_mul_(exp_avg_sq, b2)
        torch._foreach_addcmul_(exp_avg_sq, grads, grads, value=1 - b2)
        denom = torch._foreach_div(exp_avg_sq, [1 - b2**t for t in steps])
        torch._foreach_sqrt_(denom)
        torch._foreach_add_(denom, group["eps"])
        torch._foreach_mul_(params, 1 - group["lr"] * group["weight_decay"])
        torch._foreach_addcdiv_(params, exp_avg, denom, [-group["lr"] / (1 - b1**t) for t in steps])

    def _newton_schulz(self, x: torch.Tensor, steps: int, dtype: torch.dtype) -> torch.Tensor:
        """The compiled form when asked for; a compiler that raises leaves it eager (a pure
        function of its inputs, so the step's result is the same)."""
        try:
            return self.newton_schulz(x, steps, dtype)
        except Exception as exc:  # noqa: BLE001 - any compiler failure; eager is always correct
            if self.newton_schulz is newton_schulz_wide:
                raise
            print(f"compiling Muon's Newton-Schulz failed ({type(exc).__name__}: {exc}); running it eager", file=sys.stderr)
            self.newton_schulz = newton_schulz_wide
            return newton_schulz_wide(x, steps, dtype)

    # ---- state ------------------------------------------------------------------------------
    def _momentum(self, p: torch.Tensor) -> torch.Tensor:
        state = self.state[p]
        if not state:
            state["momentum_buffer"] = torch.zeros_like(p, dtype=torch.float32)
        return state["momentum_buffer"]

    def _adam_state(self, p: torch.Tensor) -> dict:
        state = self.state[p]
        if not state:
            state["step"] = torch.zeros((), dtype=torch.float32)
            state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32)
            state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)
        return state


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
