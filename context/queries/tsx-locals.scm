; Extra value references of a TSX file, added to typescript-locals.scm.

(jsx_expression (identifier) @reference.value)
(jsx_opening_element name: (identifier) @reference.call (#match? @reference.call "^[A-Z]"))
(jsx_self_closing_element name: (identifier) @reference.call (#match? @reference.call "^[A-Z]"))
(jsx_closing_element name: (identifier) @reference.call (#match? @reference.call "^[A-Z]"))
