"""Decode-time constraints (the monitor): `lexer` says which characters keep Python code
legal, `clike` does the same for the brace languages (brackets, line end, healing; no names),
`vocab` holds the tokenizer's strings and trie, `monitor` turns them into token choices."""
