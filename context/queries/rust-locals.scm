; Identifiers that are certainly value references in Rust (for undeclared-symbol checks).
;   @reference.call  a called name     @reference.value  any other use as a value
; Every other identifier (patterns, paths, macro token trees, ...) counts as a declaration, which
; keeps the check conservative.

(call_expression function: (identifier) @reference.call)
(arguments (identifier) @reference.value)
(binary_expression left: (identifier) @reference.value)
(binary_expression right: (identifier) @reference.value)
(unary_expression (identifier) @reference.value)
(reference_expression value: (identifier) @reference.value)
(let_declaration value: (identifier) @reference.value)
(let_condition value: (identifier) @reference.value)
(return_expression (identifier) @reference.value)
(field_expression value: (identifier) @reference.value)
(index_expression (identifier) @reference.value)
(assignment_expression right: (identifier) @reference.value)
(compound_assignment_expr right: (identifier) @reference.value)
(if_expression condition: (identifier) @reference.value)
(while_expression condition: (identifier) @reference.value)
(for_expression value: (identifier) @reference.value)
(match_expression value: (identifier) @reference.value)
(match_arm value: (identifier) @reference.value)
(tuple_expression (identifier) @reference.value)
(array_expression (identifier) @reference.value)
(range_expression (identifier) @reference.value)
(field_initializer value: (identifier) @reference.value)
(shorthand_field_initializer (identifier) @reference.value)
(parenthesized_expression (identifier) @reference.value)
(try_expression (identifier) @reference.value)
(await_expression (identifier) @reference.value)
(type_cast_expression value: (identifier) @reference.value)
(closure_expression body: (identifier) @reference.value)
(expression_statement (identifier) @reference.value)
(block (identifier) @reference.value .)

; --- every name-like node (a declaration unless captured as a reference above), and error regions
(identifier) @name
(type_identifier) @name
(ERROR) @error
