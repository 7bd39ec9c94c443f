"""Decode-time constraints (issue 11's monitor): `lexer` says which characters keep Python code
legal, `vocab` holds the tokenizer's strings and trie, `monitor` turns both into token choices."""
