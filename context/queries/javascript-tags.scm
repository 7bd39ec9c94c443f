; Tags of a JavaScript / JSX file. Capture names are described in python-tags.scm.
; When one name matches several patterns, the first pattern wins.

; --- definitions
(method_definition name: (property_identifier) @name.definition.method) @definition.method

(class_declaration name: (identifier) @name.definition.class) @definition.class

(function_declaration name: (identifier) @name.definition.function) @definition.function

(generator_function_declaration name: (identifier) @name.definition.function) @definition.function

(lexical_declaration
  (variable_declarator
    name: (identifier) @name.definition.function
    value: [(arrow_function) (function_expression) (generator_function)])) @definition.function

(variable_declaration
  (variable_declarator
    name: (identifier) @name.definition.function
    value: [(arrow_function) (function_expression) (generator_function)])) @definition.function

(lexical_declaration
  (variable_declarator
    name: (identifier) @name.definition.class
    value: (class))) @definition.class

(program
  (lexical_declaration
    (variable_declarator name: (identifier) @name.definition.variable)) @definition.variable)

(program
  (variable_declaration
    (variable_declarator name: (identifier) @name.definition.variable)) @definition.variable)

(program
  (export_statement
    declaration: (lexical_declaration
      (variable_declarator name: (identifier) @name.definition.variable)) @definition.variable))

(assignment_expression
  left: (member_expression
    object: (member_expression
      object: (identifier) @_module
      property: (property_identifier) @_exports)
    property: (property_identifier) @name.definition.function)
  right: [(arrow_function) (function_expression)]
  (#eq? @_module "module")
  (#eq? @_exports "exports")) @definition.function

(assignment_expression
  left: (member_expression
    object: (identifier) @_exports
    property: (property_identifier) @name.definition.function)
  right: [(arrow_function) (function_expression)]
  (#eq? @_exports "exports")) @definition.function

(field_definition property: (property_identifier) @name.definition.field) @definition.field

; --- references
(call_expression function: (identifier) @name.reference.call)

(call_expression
  function: (member_expression property: (property_identifier) @name.reference.method))

(new_expression constructor: (identifier) @name.reference.class)

(new_expression constructor: (member_expression property: (property_identifier) @name.reference.class))

(class_heritage (identifier) @name.reference.class)

(class_heritage (member_expression property: (property_identifier) @name.reference.class))

(jsx_opening_element name: (identifier) @name.reference.class (#match? @name.reference.class "^[A-Z]"))

(jsx_self_closing_element name: (identifier) @name.reference.class (#match? @name.reference.class "^[A-Z]"))

(import_specifier name: (identifier) @name.reference.import)

; --- imports
(import_statement
  (import_clause (named_imports (import_specifier name: (identifier) @import.name)))
  source: (string (string_fragment) @import.module)) @import

(import_statement
  (import_clause (identifier) @import.name)
  source: (string (string_fragment) @import.module)) @import

(import_statement
  (import_clause (namespace_import) @import.wildcard)
  source: (string (string_fragment) @import.module)) @import

(import_statement
  source: (string (string_fragment) @import.module)) @import

(export_statement
  (export_clause (export_specifier name: (identifier) @import.name))
  source: (string (string_fragment) @import.module)) @import

(export_statement
  "*" @import.wildcard
  source: (string (string_fragment) @import.module)) @import

(call_expression
  function: (identifier) @_require
  arguments: (arguments . (string (string_fragment) @import.module) .)
  (#eq? @_require "require")) @import

(call_expression
  function: (import)
  arguments: (arguments . (string (string_fragment) @import.module))) @import
