; Names a Python file binds, and where (for `context.scopes`).
; Captures:
;   @bind.def      a def/class name (binds in the scope *around* the definition)
;   @bind.param    a parameter (binds in its function or lambda)
;   @bind.local    any other binding (assignment, for, with/except `as`, walrus, comprehension, match capture)
;   @bind.import   a name an import binds
;   @bind.global   a `global`/`nonlocal` name (binds in the module for our purposes)
;   @instance.name / @instance.class   `x = Cls(...)`, `x: Cls`, parameter `x: Cls`
;   @attr.object / @attr.name          `obj.name = ...` (instance attributes set in methods)
;   @import.statement  every import statement (its bindings are read from the node)
;   @class.definition  every class definition

(function_definition name: (identifier) @bind.def)
(class_definition name: (identifier) @bind.def)

(parameters (identifier) @bind.param)
(lambda_parameters (identifier) @bind.param)
(default_parameter name: (identifier) @bind.param)
(typed_parameter (identifier) @bind.param)
(typed_default_parameter name: (identifier) @bind.param)
(list_splat_pattern (identifier) @bind.param)
(dictionary_splat_pattern (identifier) @bind.param)

(assignment left: (identifier) @bind.local)
(augmented_assignment left: (identifier) @bind.local)
(pattern_list (identifier) @bind.local)
(tuple_pattern (identifier) @bind.local)
(list_pattern (identifier) @bind.local)
(for_statement left: (identifier) @bind.local)
(for_in_clause left: (identifier) @bind.local)
(as_pattern_target (identifier) @bind.local)
(as_pattern_target (tuple (identifier) @bind.local))
(named_expression name: (identifier) @bind.local)
(case_pattern (dotted_name . (identifier) @bind.local .))

(import_statement name: (dotted_name . (identifier) @bind.import))
(import_from_statement name: (dotted_name (identifier) @bind.import .))
(aliased_import alias: (identifier) @bind.import)

(global_statement (identifier) @bind.global)
(nonlocal_statement (identifier) @bind.global)

(assignment left: (identifier) @instance.name right: (call function: [(identifier) (attribute)] @instance.class))
(assignment left: (identifier) @instance.name type: (type [(identifier) (attribute)] @instance.class))
(typed_parameter (identifier) @instance.name type: (type [(identifier) (attribute)] @instance.class))
(typed_default_parameter name: (identifier) @instance.name type: (type [(identifier) (attribute)] @instance.class))

(assignment left: (attribute object: (identifier) @attr.object attribute: (identifier) @attr.name))
(augmented_assignment left: (attribute object: (identifier) @attr.object attribute: (identifier) @attr.name))

(import_statement) @import.statement
(import_from_statement) @import.statement
(class_definition) @class.definition
