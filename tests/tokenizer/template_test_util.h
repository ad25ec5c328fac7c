// Helpers shared by the chat-template tests (harmony_template_test.cpp,
// jinja_parity_test.cpp).
#pragma once
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace ms::test {

// A whole file's bytes ("" when it cannot be read: the test's comparison
// then fails naming what it expected).
inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace ms::test
