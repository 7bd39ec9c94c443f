; Tags of a Go file. Capture names are described in python-tags.scm.
; An import's module is its package path; its names are empty (Go code names a package's members
; through the package, so the index relates them by path).

; --- definitions
(function_declaration name: (identifier) @name.definition.function) @definition.function

(method_declaration name: (field_identifier) @name.definition.method) @definition.method

(type_declaration
  (type_spec name: (type_identifier) @name.definition.struct type: (struct_type))) @definition.struct

(type_declaration
  (type_spec name: (type_identifier) @name.definition.interface type: (interface_type))) @definition.interface

(type_declaration (type_spec name: (type_identifier) @name.definition.type)) @definition.type

(type_declaration (type_alias name: (type_identifier) @name.definition.type)) @definition.type

(source_file (const_declaration (const_spec (identifier) @name.definition.constant)) @definition.constant)

(source_file (var_declaration (var_spec (identifier) @name.definition.variable)) @definition.variable)

(source_file (var_declaration (var_spec_list (var_spec (identifier) @name.definition.variable) @definition.variable)))

(method_elem name: (field_identifier) @name.definition.method) @definition.method

; --- references
(call_expression function: (identifier) @name.reference.call)

(call_expression function: (selector_expression field: (field_identifier) @name.reference.call))

(composite_literal type: (type_identifier) @name.reference.type)

(composite_literal type: (qualified_type name: (type_identifier) @name.reference.type))

(qualified_type name: (type_identifier) @name.reference.type)

(parameter_declaration type: (type_identifier) @name.reference.type)

(pointer_type (type_identifier) @name.reference.type)

; --- imports
(import_spec
  path: (interpreted_string_literal (interpreted_string_literal_content) @import.module)) @import

(import_spec
  name: (dot) @import.wildcard
  path: (interpreted_string_literal (interpreted_string_literal_content) @import.module)) @import
