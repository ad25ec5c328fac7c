#include "util/bytes.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "util/error.h"

namespace ms {

uint64_t parse_bytes(const std::string& text) {
  const auto fail = [&](const char* why) {
    return Error("invalid byte count '" + text + "': " + why +
                 " (examples: 12G, 1.5GiB, 800M, 4096)");
  };
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0) throw fail("expected a number");
  const std::string number = text.substr(0, i);
  char* end = nullptr;
  const double value = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size() || !std::isfinite(value)) throw fail("bad number");
  std::string suffix;
  for (size_t j = i; j < text.size(); ++j) suffix += static_cast<char>(std::toupper(static_cast<unsigned char>(text[j])));
  double mult = 1;
  if (!suffix.empty()) {
    const char unit = suffix[0];
    const std::string rest = suffix.substr(1);
    if (unit == 'B' && rest.empty()) mult = 1;
    else if (unit == 'K') mult = 1024.0;
    else if (unit == 'M') mult = 1024.0 * 1024;
    else if (unit == 'G') mult = 1024.0 * 1024 * 1024;
    else if (unit == 'T') mult = 1024.0 * 1024 * 1024 * 1024;
    else throw fail("unknown unit");
    if (unit != 'B' && !(rest.empty() || rest == "B" || rest == "I" || rest == "IB")) throw fail("unknown unit");
  }
  const double bytes = value * mult;
  if (bytes >= 18446744073709551615.0) throw fail("too large");
  return static_cast<uint64_t>(std::llround(bytes));
}

std::string format_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) { v /= 1024.0; ++u; }
  char buf[48];
  if (u == 0) std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  else std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

}  // namespace ms
