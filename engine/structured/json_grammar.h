// The grammars of OpenAI's response_format: "json_object" (any JSON object) and "json_schema" (the
// JSON values a schema accepts), as byte grammars for GrammarMatcher (grammar.h).
//
// Supported JSON Schema: type (one or a list: object, array, string, integer, number, boolean,
// null), properties (generated in the schema's order; those not in `required` may be left out),
// required, additionalProperties (a schema for an object without properties; otherwise only the
// listed properties are generated), items, minItems / maxItems, minLength / maxLength (up to 256),
// enum, const, anyOf, oneOf (as anyOf), allOf with one schema, $ref to "#/$defs/NAME" or
// "#/definitions/NAME" (recursion allowed), true / {}; annotations (title, description, default,
// examples, $schema, $id, $comment) are ignored. Any other keyword that would constrain a value
// (pattern, format, minimum, ...) is refused, naming it and where it is, rather than produce
// output that does not validate. Strings are valid UTF-8 with JSON's escapes; numbers are JSON's
// (no leading zeros); between JSON tokens there is at most kMaxWhitespace blank (space, tab,
// newline): output is compact JSON, and a model cannot spend its tokens on blanks (small models,
// given the room, fill every gap with as many spaces as they may).
//
// Must not: know tokenizers or requests.
#pragma once

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/structured/grammar.h"

namespace baton::structured {

inline constexpr int kMaxWhitespace = 1;
inline constexpr int kMaxBoundedLength = 256;  // minLength / maxLength / minItems / maxItems
inline constexpr int kMaxSchemaDepth = 64;      // subschemas nested in one another

// OpenAI's response_format object, as JSON text: {"type": "json_object"} or {"type": "json_schema",
// "json_schema": {"schema": SCHEMA, ...}} (name, strict and description are not needed). nullptr
// for {"type": "text"}; InvalidArgument saying what is wrong otherwise.
absl::StatusOr<std::shared_ptr<const Grammar>> response_format_grammar(std::string_view response_format);

// Any JSON object (OpenAI's {"type": "json_object"}).
std::shared_ptr<const Grammar> json_object_grammar();

// The values `schema` (a JSON Schema, as JSON text) accepts; InvalidArgument naming the keyword and
// its place ("'pattern' at /properties/id is not supported") for what is not supported.
absl::StatusOr<std::shared_ptr<const Grammar>> json_schema_grammar(std::string_view schema);

}  // namespace baton::structured
