"""The glm5-lsp language server (pygls). The only package that knows about LSP.

Invariant: never imports torch at module import; the runtime is loaded lazily, on the engine
thread, when the first model is needed.
"""

from model_runtime.version import package_version

__version__ = package_version()
