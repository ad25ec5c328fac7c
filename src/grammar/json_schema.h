// JSON schema -> grammar (grammar/grammar.h): the strings the grammar
// accepts are JSON texts (compact or with bounded whitespace) valid under
// the schema, so sampling under it always gives a valid answer.
//
// Supported (everything else that constrains a value is refused with a
// SchemaError naming the keyword, never silently ignored; docs/server.md has
// the table):
//   type (one name or a list): object, array, string, number, integer,
//     boolean, null; enum and const (values the sibling keywords refuse are
//     dropped); anyOf; oneOf where no value can match two alternatives
//     (different kinds, or a required property's const/enum tells them
//     apart); allOf and $ref beside other keywords (merged into one
//     schema); not over types; $ref to "#", "#/$defs/..", "#/definitions/.."
//     or any local JSON pointer (recursion through a value is fine; a loop
//     that reads nothing is refused);
//   object: properties (written in the schema's order), required,
//     additionalProperties (false; true or a schema allow extra members only
//     on objects that declare no properties: objects that do get exactly
//     their declared ones), minProperties, maxProperties;
//   array: items, prefixItems, minItems, maxItems; string: minLength,
//     maxLength, pattern (grammar/pattern.h), format (grammar/string_format.h);
//   number/integer: minimum, maximum, exclusiveMinimum, exclusiveMaximum,
//     multipleOf (grammar/number_range.h: exact at the bounds' decimals).
// Annotations (title, description, default, examples, $schema, $id,
// $comment, deprecated, readOnly, writeOnly, unconstrained formats, ...) are
// ignored, as validators do. Refused: uniqueItems true, if/then/else,
// contains, patternProperties, propertyNames, dependent*, unevaluated*,
// $dynamicRef, remote $refs and $refs under a nested $id.
// Unbounded numbers have <= 16 integer digits, <= 16 fraction digits, <= 2
// exponent digits, and whitespace runs are bounded too, so a model cannot
// loop forever inside one token class.
#pragma once
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"

namespace ms::grammar {

struct SchemaError : std::runtime_error {
  std::string keyword;  // the keyword refused, or ""
  SchemaError(const std::string& message, std::string keyword_)
      : std::runtime_error(message), keyword(std::move(keyword_)) {}
};

struct SchemaLimits {
  int max_depth = 64;         // nesting of subschemas
  int64_t max_bound = 4096;   // largest maxItems / maxLength / minItems / minLength
  GrammarLimits grammar;
};

// The grammar of JSON texts valid under `schema`. Throws SchemaError with a
// message naming the keyword and where in the schema it is (a JSON pointer).
Grammar compile_json_schema(const nlohmann::ordered_json& schema, const SchemaLimits& limits = {});

// Any JSON object (response_format json_object).
Grammar any_json_object();

}  // namespace ms::grammar
