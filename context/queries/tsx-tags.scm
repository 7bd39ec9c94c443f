; Extra tags of a TSX file, added to typescript-tags.scm.

(jsx_opening_element name: (identifier) @name.reference.class (#match? @name.reference.class "^[A-Z]"))

(jsx_self_closing_element name: (identifier) @name.reference.class (#match? @name.reference.class "^[A-Z]"))
