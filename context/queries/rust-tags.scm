; Tags of a Rust file. Capture names are described in python-tags.scm.
; `use` trees are captured whole (@import.use) and flattened in code, one import per path.

; --- definitions
(impl_item
  body: (declaration_list
    (function_item name: (identifier) @name.definition.method) @definition.method))

(trait_item
  body: (declaration_list
    (function_signature_item name: (identifier) @name.definition.method) @definition.method))

(trait_item
  body: (declaration_list
    (function_item name: (identifier) @name.definition.method) @definition.method))

(function_item name: (identifier) @name.definition.function) @definition.function

(function_signature_item name: (identifier) @name.definition.function) @definition.function

(struct_item name: (type_identifier) @name.definition.struct) @definition.struct

(union_item name: (type_identifier) @name.definition.struct) @definition.struct

(enum_item name: (type_identifier) @name.definition.enum) @definition.enum

(trait_item name: (type_identifier) @name.definition.trait) @definition.trait

(type_item name: (type_identifier) @name.definition.type) @definition.type

(const_item name: (identifier) @name.definition.constant) @definition.constant

(static_item name: (identifier) @name.definition.constant) @definition.constant

(mod_item name: (identifier) @name.definition.module body: (declaration_list)) @definition.module

(macro_definition name: (identifier) @name.definition.macro) @definition.macro

(enum_variant name: (identifier) @name.definition.variant) @definition.variant

; --- references
(call_expression function: (identifier) @name.reference.call)

(call_expression function: (scoped_identifier name: (identifier) @name.reference.call))

(call_expression function: (field_expression field: (field_identifier) @name.reference.method))

(macro_invocation macro: (identifier) @name.reference.macro)

(struct_expression name: (type_identifier) @name.reference.type)

(impl_item trait: (type_identifier) @name.reference.trait)

(impl_item type: (type_identifier) @name.reference.type)

(type_arguments (type_identifier) @name.reference.type)

(parameter type: (type_identifier) @name.reference.type)

(function_item return_type: (type_identifier) @name.reference.type)

; --- imports
(use_declaration argument: (_) @import.use) @import

(mod_item name: (identifier) @import.module !body) @import

(extern_crate_declaration name: (identifier) @import.module) @import
