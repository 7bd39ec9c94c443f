; Identifiers that are certainly value references in JavaScript / JSX (for undeclared-symbol checks).
;   @reference.call   a called name          @reference.value  any other use as a value
;   @declaration      a name declared in a way the plain binding rules miss (host globals)
;   @name             any name-like node          @error  a region the parser could not read
; Every other identifier in the file counts as a declaration, which keeps the check conservative.

(call_expression function: (identifier) @reference.call)
(new_expression constructor: (identifier) @reference.call)
(arguments (identifier) @reference.value)
(spread_element (identifier) @reference.value)
(member_expression object: (identifier) @reference.value)
(subscript_expression object: (identifier) @reference.value)
(subscript_expression index: (identifier) @reference.value)
(binary_expression left: (identifier) @reference.value)
(binary_expression right: (identifier) @reference.value)
(unary_expression operator: ["!" "-" "+" "~" "void" "delete"] argument: (identifier) @reference.value)
(update_expression argument: (identifier) @reference.value)
(ternary_expression condition: (identifier) @reference.value)
(ternary_expression consequence: (identifier) @reference.value)
(ternary_expression alternative: (identifier) @reference.value)
(parenthesized_expression (identifier) @reference.value)
(sequence_expression (identifier) @reference.value)
(return_statement (identifier) @reference.value)
(throw_statement (identifier) @reference.value)
(expression_statement (identifier) @reference.value)
(variable_declarator value: (identifier) @reference.value)
(assignment_expression right: (identifier) @reference.value)
(augmented_assignment_expression left: (identifier) @reference.value)
(augmented_assignment_expression right: (identifier) @reference.value)
(assignment_pattern right: (identifier) @reference.value)
(array (identifier) @reference.value)
(pair value: (identifier) @reference.value)
(shorthand_property_identifier) @reference.value
(computed_property_name (identifier) @reference.value)
(template_substitution (identifier) @reference.value)
(await_expression (identifier) @reference.value)
(yield_expression (identifier) @reference.value)
(arrow_function body: (identifier) @reference.value)
(for_in_statement right: (identifier) @reference.value)
(switch_case value: (identifier) @reference.value)
(class_heritage (identifier) @reference.value)
(jsx_expression (identifier) @reference.value)
(jsx_opening_element name: (identifier) @reference.call (#match? @reference.call "^[A-Z]"))
(jsx_self_closing_element name: (identifier) @reference.call (#match? @reference.call "^[A-Z]"))
(jsx_closing_element name: (identifier) @reference.call (#match? @reference.call "^[A-Z]"))

(assignment_expression
  left: (member_expression
    object: (identifier) @_host
    property: (property_identifier) @declaration)
  (#any-of? @_host "window" "globalThis" "global" "self"))

; --- every name-like node (a declaration unless captured as a reference above), and error regions
(identifier) @name
(shorthand_property_identifier_pattern) @name
(ERROR) @error
