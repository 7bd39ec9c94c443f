"""`glm5-serve`: one model process for every editor on the machine, over an OpenAI-compatible API.

Role: load a checkpoint once, run its `Engine` (continuous batching across all clients), and
serve it over HTTP (`app`) so any number of language servers (`--engine-url`), the `openai`
client, or anything else that speaks `/v1/completions` share it. `cli.main` is the entry point.
Closed by default: a token from this user's token file (`model_runtime.remote.daemon_files`) or
a key from the environment; `--no-auth` only when asked.
"""
