"""Context building for completions: parsing, the workspace index, cross-file snippets, prompts.

Invariant: pure Python. Never imports torch, never imports LSP types; positions are plain
(line, character) pairs.
"""
