"""Remote engines: the runtime's `EngineProtocol` over an OpenAI-compatible HTTP endpoint.

Role: the language server's way to vLLM, SGLang or `glm5-serve` (`model_runtime.serve`).
`config` (what to reach, torch- and network-free), `connect` (engine + tokenizer + context
length), `engine` (`RemoteEngine`), `tokenizer` (`/tokenize`-backed), `transport` (HTTP,
retries, typed errors), `sse` (strict event-stream parsing), `wire` (request/response shapes).

Invariant: nothing in this package imports torch; importing the package itself imports nothing
(the server imports `config` at start-up, the rest only when a remote engine is chosen).
"""
