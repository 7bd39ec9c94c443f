"""Helpers for the constraint tests: FIM prompts and running one request on a thread-less engine."""

from __future__ import annotations

from model_runtime.tokenizer import GlmTokenizer


def fim_ids(tokenizer: GlmTokenizer, prefix: str, suffix: str = "\n") -> list[int]:
    """An SPM fill-in-the-middle prompt, as `context.fim` builds it for serving."""
    sp = tokenizer.special
    return ([sp.require("gmask"), sp.require("sop"), sp.require("code_suffix"), *tokenizer.encode(suffix),
             sp.require("code_prefix"), *tokenizer.encode(prefix), sp.require("code_middle")])


def run(engine, request):
    """Run one request to the end on an engine without a thread; its GenerationResult."""
    out = []
    engine.add(request, None, out.append)
    engine.run_until_idle()
    assert len(out) == 1
    return out[0]
