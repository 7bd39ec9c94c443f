"""The plain-data seam of steering (constraints, n-best, scoring): defaults keep today's behaviour, bad values are refused."""

from __future__ import annotations

import dataclasses
import sys
import subprocess

import pytest

from model_runtime.api import (
    ConstraintSpec, GenerationRequest, GenerationResult, FinishReason, MemberScope, ScoreRequest,
)


def test_defaults_keep_todays_request_and_result():
    req = GenerationRequest("r", (1, 2))
    assert req.constraint is None and req.num_candidates == 1
    res = GenerationResult("r", (), "", FinishReason.STOP)
    assert res.candidates == () and res.constraint is None


def test_specs_are_frozen_plain_values():
    spec = ConstraintSpec(member_scopes=(MemberScope("os", ("path", "sep")),), defined_names=("x",))
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.single_line = True  # type: ignore[misc]
    assert spec == ConstraintSpec(member_scopes=(MemberScope("os", ("path", "sep")),), defined_names=("x",))


@pytest.mark.parametrize("make", [
    lambda: GenerationRequest("r", (1,), num_candidates=0),
    lambda: ConstraintSpec(open_brackets="(<"),
    lambda: ScoreRequest("s", (), ((1,),)),
])
def test_bad_values_raise(make):
    with pytest.raises(ValueError):
        make()


def test_api_and_healing_import_no_torch():
    code = "import sys, model_runtime.api, model_runtime.healing; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
