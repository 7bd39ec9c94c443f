; Tags of a TypeScript file (TSX adds tsx-tags.scm). Capture names are described in python-tags.scm.
; When one name matches several patterns, the first pattern wins.

; --- definitions
(method_definition name: (property_identifier) @name.definition.method) @definition.method

(class_declaration name: (type_identifier) @name.definition.class) @definition.class

(abstract_class_declaration name: (type_identifier) @name.definition.class) @definition.class

(interface_declaration name: (type_identifier) @name.definition.interface) @definition.interface

(type_alias_declaration name: (type_identifier) @name.definition.type) @definition.type

(enum_declaration name: (identifier) @name.definition.enum) @definition.enum

(internal_module name: (identifier) @name.definition.module) @definition.module

(abstract_method_signature name: (property_identifier) @name.definition.method) @definition.method

(function_signature name: (identifier) @name.definition.function) @definition.function

(ambient_declaration
  (lexical_declaration
    (variable_declarator name: (identifier) @name.definition.variable))) @definition.variable

(ambient_declaration
  (variable_declaration
    (variable_declarator name: (identifier) @name.definition.variable))) @definition.variable

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

(public_field_definition name: (property_identifier) @name.definition.field) @definition.field

; --- references
(call_expression function: (identifier) @name.reference.call)

(call_expression
  function: (member_expression property: (property_identifier) @name.reference.method))

(new_expression constructor: (identifier) @name.reference.class)

(new_expression constructor: (member_expression property: (property_identifier) @name.reference.class))

(extends_clause value: (identifier) @name.reference.class)

(extends_clause value: (member_expression property: (property_identifier) @name.reference.class))

(type_annotation (type_identifier) @name.reference.type)

(generic_type name: (type_identifier) @name.reference.type)

(type_arguments (type_identifier) @name.reference.type)

(implements_clause (type_identifier) @name.reference.type)

(extends_type_clause (type_identifier) @name.reference.type)

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
