// JSON schema `format` values that constrain what is generated: the rule of
// a string's content (between the quotes) for date, time, date-time, uuid,
// email and ipv4. Each gives a subset of what RFC 3339 / RFC 4122 / RFC 5321
// / RFC 2673 allow, all of it valid: days by month (February up to 28),
// no leap seconds, times with an offset ("Z" or +hh:mm), lower/upper hex
// digits, dot-atom email addresses with bounded parts.
#pragma once
#include <optional>
#include <string>

#include "grammar/grammar.h"

namespace ms::grammar {

// nullopt: a format that is not constrained here (an annotation, as
// validators treat formats by default).
std::optional<uint32_t> string_format_rule(Builder& b, const std::string& format);

// The formats string_format_rule constrains, for messages and docs.
const char* constrained_formats();

}  // namespace ms::grammar
