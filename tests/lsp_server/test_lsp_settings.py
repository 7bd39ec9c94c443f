"""Settings parsing: camelCase keys, validation that keeps the old value and says why."""

from __future__ import annotations

import pytest

from lsp_server.settings import ServerSettings, parse_settings, section


def test_valid_keys_update_a_copy():
    base = ServerSettings()
    new, problems = parse_settings({"maxTokens": 40, "streaming": True, "temperature": 1, "multiline": "never"}, base)
    assert problems == []
    assert (new.max_tokens, new.streaming, new.multiline) == (40, True, "never")
    assert new.temperature == 1.0 and isinstance(new.temperature, float)
    assert base.max_tokens != 40  # the base is untouched


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ({"maxTokens": 0}, "'maxTokens': expected an integer in 1..4096, got 0"),
        ({"maxTokens": True}, "'maxTokens'"),
        ({"temperature": -0.5}, "'temperature': expected a number in 0..2"),
        ({"multiline": "sometimes"}, "'multiline'"),
        ({"streaming": "yes"}, "'streaming': expected true or false"),
        ({"model": ""}, "'model'"),
        ({"dtype": "float64"}, "'dtype': expected one of auto, float32, bfloat16, float16"),
        ({"mtp": "on"}, "'mtp': expected true or false"),
        ({"compileDecode": "yes"}, "'compileDecode': expected true or false"),
        ({"maxDecodeMs": -1}, "'maxDecodeMs': expected an integer in 0..60000"),
        ({"threads": -2}, "'threads': expected an integer in 0..1024 (0 = auto)"),
    ],
)
def test_bad_values_keep_the_previous_value_and_name_the_key(raw, fragment):
    base = ServerSettings()
    new, problems = parse_settings(raw, base)
    assert new == base
    assert len(problems) == 1 and fragment in problems[0]


def test_unknown_keys_are_ignored_and_non_objects_rejected():
    base = ServerSettings()
    assert parse_settings({"python": {"x": 1}}, base) == (base, [])
    new, problems = parse_settings(["maxTokens", 3], base)
    assert new == base and "must be an object" in problems[0]
    assert parse_settings(None, base) == (base, [])


def test_section_accepts_namespaced_and_flat_payloads():
    assert section({"glm5": {"maxTokens": 3}}) == {"maxTokens": 3}
    assert section({"maxTokens": 3}) == {"maxTokens": 3}


def test_the_decode_budget_reaches_every_completion_and_confidence_cuts_only_blocks():
    from context.classify import CompletionKind
    from lsp_server.pipeline import sampling_for

    settings, problems = parse_settings({"maxDecodeMs": 120}, ServerSettings())
    assert problems == [] and ServerSettings().max_decode_ms > 0  # on by default
    single, block = (sampling_for(k, settings) for k in (CompletionKind.SINGLE_LINE, CompletionKind.MULTI_LINE))
    assert single.max_decode_ms == block.max_decode_ms == 120
    assert single.min_confidence == 0 < block.min_confidence


def test_the_threads_setting_reaches_the_runtime_options():
    from lsp_server.server import build_server

    server = build_server()
    assert server.runtime_options.threads == 0  # auto by default
    server.settings, problems = parse_settings({"threads": 1}, server.settings)
    assert problems == [] and server.runtime_options.threads == 1


def test_the_compile_decode_setting_reaches_the_runtime_options():
    from lsp_server.server import build_server

    server = build_server()
    assert server.runtime_options.compile_decode is False  # off by default: it costs start-up time
    server.settings, problems = parse_settings({"compileDecode": True}, server.settings)
    assert problems == [] and server.runtime_options.compile_decode is True
