"""Training of the embedded GLM-5-architecture code model: corpus, tokenizer, data, loop, evaluation.

Not shipped in the wheel: these are the reproducible scripts that produce the shipped model.
Every stage is a module with a `main()` run as `python -m training.<stage>` from the repository
root; the data they write lives under the git-ignored `data/`.
"""
