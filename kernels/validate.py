"""Argument checks shared by each kernel's torch reference and its Triton twin.

Role: turn bad input into a `ValueError` that names the argument, what was expected and what
was given, before any memory is touched. Both twins of an op call the same op-level validator,
so they accept and reject exactly the same inputs.

Invariants:
- Checks read shapes, dtypes, strides and devices only: they never synchronise with the device
  and never copy.
- Error messages start with the op name, e.g. `sparse_mla_attention: q must be 3-D [S, H, D]`.
"""

from __future__ import annotations

import torch

FLOAT_DTYPES: tuple[torch.dtype, ...] = (torch.float32, torch.float16, torch.bfloat16)
INDEX_DTYPES: tuple[torch.dtype, ...] = (torch.int32, torch.int64)


def check_tensor(
    op: str, name: str, t: object, *, dims: str, dtypes: tuple[torch.dtype, ...]
) -> torch.Tensor:
    """`t` is a tensor with `len(dims.split(', '))` dimensions and one of `dtypes`.

    `dims` reads like the docstring shape, e.g. "S, H, D"; it is quoted in the error.
    """
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{op}: {name} must be a torch.Tensor [{dims}], got {type(t).__name__}")
    ndim = len(dims.split(", "))
    if t.dim() != ndim:
        raise ValueError(f"{op}: {name} must be {ndim}-D [{dims}], got shape {tuple(t.shape)}")
    if t.dtype not in dtypes:
        allowed = ", ".join(str(d).removeprefix("torch.") for d in dtypes)
        raise ValueError(f"{op}: {name} must have dtype in ({allowed}), got {t.dtype}")
    return t


def check_dim(op: str, name: str, t: torch.Tensor, dim: int, expected: int, what: str) -> None:
    """`t.shape[dim] == expected`; `what` says where `expected` comes from."""
    if t.shape[dim] != expected:
        raise ValueError(
            f"{op}: {name} dim {dim} must be {expected} ({what}), got shape {tuple(t.shape)}"
        )


def check_same_device(op: str, **tensors: torch.Tensor) -> torch.device:
    """All tensors live on one device; returns it."""
    devices = {name: t.device for name, t in tensors.items()}
    first = next(iter(devices.values()))
    if any(d != first for d in devices.values()):
        listing = ", ".join(f"{n} on {d}" for n, d in devices.items())
        raise ValueError(f"{op}: all tensors must be on one device, got {listing}")
    return first


def check_inner_contiguous(op: str, name: str, t: torch.Tensor) -> None:
    """The last dimension has stride 1 (rows may be strided views)."""
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(
            f"{op}: {name} must have a contiguous last dimension (stride 1), got strides "
            f"{t.stride()}; pass .contiguous()"
        )


def check_contiguous(op: str, name: str, t: torch.Tensor) -> None:
    if not t.is_contiguous():
        raise ValueError(
            f"{op}: {name} must be contiguous, got shape {tuple(t.shape)} with strides "
            f"{t.stride()}; pass .contiguous()"
        )


def check_positive(op: str, name: str, value: object) -> None:
    """A finite number > 0 (a bool is not a number here)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not 0 < value < float("inf"):
        raise ValueError(f"{op}: {name} must be a finite number > 0, got {value!r}")


def check_int(op: str, name: str, value: object, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{op}: {name} must be an int >= {minimum}, got {value!r}")
    return value
