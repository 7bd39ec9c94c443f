"""Remote engines: the runtime's `EngineProtocol` over an OpenAI-compatible HTTP endpoint.

Role: the language server's way to vLLM, SGLang, llama.cpp or `glm5-serve` (`model_runtime.serve`),
serving GLM or another FIM code model (`model_runtime.fim_templates`).
`config` (what to reach, torch- and network-free), `connect` (engine + tokenizer + context
length), `engine` (`RemoteEngine`), `tokenizer` (`/tokenize`-backed), `transport` (HTTP,
retries, typed errors), `sse` (strict event-stream parsing), `wire` (request/response shapes),
`daemon_files` (the token a local `glm5-serve` writes for its clients).

Invariant: nothing in this package imports torch; importing the package itself imports nothing
(the server imports `config`, and with it `daemon_files`, at start-up; the rest only when a
remote engine is chosen).
"""
