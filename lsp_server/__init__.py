"""The glm5-lsp language server (pygls). The only package that knows about LSP.

Invariant: never imports torch at module import; the runtime is loaded lazily, on the engine
thread, when the first model is needed.
"""

__version__ = "0.1.0"
