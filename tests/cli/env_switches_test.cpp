// Behaviour is chosen by typed options and CLI flags (issue #30); the
// environment is read only for the short list of variables below, each
// documented in the README's "Environment" section. This test reads the
// source: it fails when src/ gains a getenv of a MOESTREAM_* variable outside
// the list, a getenv whose name is not a string literal (it could not be
// checked), or when the README stops documenting a listed variable.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace ms {
namespace {

namespace fs = std::filesystem;

// The moestream variables the product may read, and why each is not a flag.
const std::set<std::string> kMoestreamVariables = {
    "MOESTREAM_API_KEY",        // serve's key: a secret, kept off the command line (ps, shell history)
    "MOESTREAM_DEFAULT_MODEL",  // the model used when -m is not given
    "MOESTREAM_ISA",            // debug: caps the SIMD level the CPU kernels dispatch to
};
// Variables of the system the product may read (where the cache directory is).
const std::set<std::string> kSystemVariables = {"HOME", "XDG_CACHE_HOME"};

std::string read_all(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct EnvRead {
  std::string where;  // file:line
  std::string name;   // the literal, or "" when the argument is not one
};

// Every getenv / secure_getenv call in the product's sources.
std::vector<EnvRead> env_reads() {
  std::vector<EnvRead> reads;
  const std::regex call(R"((?:secure_)?getenv\s*\(\s*([^)]*)\))");
  const std::regex literal(R"re(^"([^"]*)"\s*$)re");
  for (const auto& e : fs::recursive_directory_iterator(fs::path(MS_SOURCE_DIR) / "src")) {
    if (!e.is_regular_file()) continue;
    const std::string ext = e.path().extension().string();
    if (ext != ".cpp" && ext != ".h" && ext != ".cu" && ext != ".cuh" && ext != ".hpp") continue;
    std::ifstream f(e.path());
    std::string line;
    for (int no = 1; std::getline(f, line); ++no) {
      const std::string code = line.substr(0, line.find("//"));  // comments may name variables freely
      for (std::sregex_iterator it(code.begin(), code.end(), call), end; it != end; ++it) {
        std::smatch m;
        const std::string arg = (*it)[1].str();
        EnvRead r;
        r.where = fs::relative(e.path(), MS_SOURCE_DIR).string() + ":" + std::to_string(no);
        if (std::regex_match(arg, m, literal)) r.name = m[1].str();
        reads.push_back(r);
      }
    }
  }
  return reads;
}

TEST(EnvSwitches, SourcesReadOnlyTheListedVariables) {
  const std::vector<EnvRead> reads = env_reads();
  // The scan must find the reads we know of, or it checks nothing.
  std::set<std::string> seen;
  for (const EnvRead& r : reads) seen.insert(r.name);
  EXPECT_TRUE(seen.count("MOESTREAM_API_KEY")) << "the scan of src/ found no getenv(\"MOESTREAM_API_KEY\")";
  for (const EnvRead& r : reads) {
    EXPECT_FALSE(r.name.empty()) << r.where << ": getenv of a name that is not a string literal";
    if (r.name.rfind("MOESTREAM_", 0) == 0)
      EXPECT_TRUE(kMoestreamVariables.count(r.name))
          << r.where << ": " << r.name
          << " is not a listed environment variable; make it a typed option with a CLI flag (see "
             "src/cli/backend_choice.h and src/cuda/backend/cuda_options.h), or add it to the list here and to the README's "
             "\"Environment\" section";
    else if (!r.name.empty())
      EXPECT_TRUE(kSystemVariables.count(r.name)) << r.where << ": reads " << r.name << ", which is not listed here";
  }
}

TEST(EnvSwitches, ReadmeDocumentsEveryListedVariable) {
  const std::string readme = read_all(fs::path(MS_SOURCE_DIR) / "README.md");
  const size_t section = readme.find("\n## Environment");
  ASSERT_NE(section, std::string::npos) << "README.md has no \"## Environment\" section";
  const size_t next = readme.find("\n## ", section + 1);
  const std::string text = readme.substr(section, next == std::string::npos ? std::string::npos : next - section);
  for (const std::string& v : kMoestreamVariables)
    EXPECT_NE(text.find("`" + v), std::string::npos) << "README's Environment section does not document " << v;
  // And names no variable that the product no longer reads.
  const std::regex var(R"(MOESTREAM_[A-Z0-9_]+)");
  for (std::sregex_iterator it(text.begin(), text.end(), var), end; it != end; ++it)
    EXPECT_TRUE(kMoestreamVariables.count(it->str())) << "README's Environment section names " << it->str()
                                                      << ", which the product does not read";
}

}  // namespace
}  // namespace ms
