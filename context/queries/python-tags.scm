; Tags of a Python file: definitions, references and imports.
; Captures (shared by every *-tags.scm):
;   @name.definition.<kind>  the defined name      @definition.<kind>  the whole definition
;   @name.reference.<kind>   a use of a name (kind "method" for `x.name(...)`, whose target is unknown)
;   @import                  an import statement   @import.module      the module it names
;   @import.name             one imported name     @import.wildcard    a `*` / namespace import
; When one name matches several patterns, the first pattern wins (methods before functions).

; --- definitions
(class_definition
  body: (block
    (function_definition name: (identifier) @name.definition.method) @definition.method))

(class_definition
  body: (block
    (decorated_definition
      definition: (function_definition name: (identifier) @name.definition.method)) @definition.method))

(decorated_definition
  definition: (function_definition name: (identifier) @name.definition.function)) @definition.function

(function_definition name: (identifier) @name.definition.function) @definition.function

(decorated_definition
  definition: (class_definition name: (identifier) @name.definition.class)) @definition.class

(class_definition name: (identifier) @name.definition.class) @definition.class

(module
  (expression_statement
    (assignment left: (identifier) @name.definition.variable)) @definition.variable)

(class_definition
  body: (block
    (expression_statement
      (assignment left: (identifier) @name.definition.field)) @definition.field))

; --- references
(call function: (identifier) @name.reference.call)

(call function: (attribute attribute: (identifier) @name.reference.method))

(decorator (identifier) @name.reference.call)

(decorator (attribute attribute: (identifier) @name.reference.call))

(class_definition
  superclasses: (argument_list (identifier) @name.reference.class))

(class_definition
  superclasses: (argument_list (attribute attribute: (identifier) @name.reference.class)))

(type (identifier) @name.reference.type)

(type (generic_type (identifier) @name.reference.type))

(type (subscript value: (identifier) @name.reference.type))

(import_from_statement name: (dotted_name (identifier) @name.reference.import))

(import_from_statement
  name: (aliased_import name: (dotted_name (identifier) @name.reference.import)))

; --- imports
(import_statement name: (dotted_name) @import.module) @import

(import_statement name: (aliased_import name: (dotted_name) @import.module)) @import

(import_from_statement
  module_name: (_) @import.module
  name: (dotted_name) @import.name) @import

(import_from_statement
  module_name: (_) @import.module
  name: (aliased_import name: (dotted_name) @import.name)) @import

(import_from_statement
  module_name: (_) @import.module
  (wildcard_import) @import.wildcard) @import
