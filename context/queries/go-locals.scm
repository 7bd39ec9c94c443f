; Identifiers that are certainly value references in Go (for undeclared-symbol checks).
;   @reference.call  a called name     @reference.value  any other use as a value
; Every other identifier in the file counts as a declaration, which keeps the check conservative.

(call_expression function: (identifier) @reference.call)
(argument_list (identifier) @reference.value)
(selector_expression operand: (identifier) @reference.value)
(binary_expression left: (identifier) @reference.value)
(binary_expression right: (identifier) @reference.value)
(unary_expression operand: (identifier) @reference.value)
(parenthesized_expression (identifier) @reference.value)
(return_statement (expression_list (identifier) @reference.value))
(short_var_declaration right: (expression_list (identifier) @reference.value))
(assignment_statement right: (expression_list (identifier) @reference.value))
(var_spec value: (expression_list (identifier) @reference.value))
(index_expression operand: (identifier) @reference.value)
(index_expression index: (identifier) @reference.value)
(slice_expression operand: (identifier) @reference.value)
(keyed_element value: (literal_element (identifier) @reference.value))
(literal_value (literal_element (identifier) @reference.value))
(if_statement condition: (identifier) @reference.value)
(for_statement (identifier) @reference.value)
(range_clause right: (identifier) @reference.value)
(send_statement channel: (identifier) @reference.value)
(send_statement value: (identifier) @reference.value)
(inc_statement (identifier) @reference.value)
(dec_statement (identifier) @reference.value)
(type_assertion_expression operand: (identifier) @reference.value)
(expression_switch_statement value: (identifier) @reference.value)
(type_switch_statement value: (identifier) @reference.value)
(expression_case value: (expression_list (identifier) @reference.value))

; --- every name-like node (a declaration unless captured as a reference above), and error regions
(identifier) @name
(type_identifier) @name
(package_identifier) @name
(ERROR) @error
