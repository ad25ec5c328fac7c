// The list of CUDA launchers (launchers.cpp) against the headers they are
// declared in (read from the source tree at run time, so a launcher added
// to src/cuda without a registry case and an entry here fails this test,
// CUDA build or not), against the registry (every "op/impl" it names must be
// a registered GPU implementation; CUDA builds only, the CPU build registers
// none) and against tests/backend_ops/README.md (every launcher listed).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "backend_ops/launchers.h"
#include "backend_ops/registry.h"

namespace ms::backend_ops {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// The public headers of src/cuda and src/cuda/backend (.cuh files are the
// kernels' internals, reached through these).
std::vector<fs::path> cuda_headers() {
  std::vector<fs::path> v;
  for (const char* dir : {"src/cuda", "src/cuda/backend"})
    for (const auto& e : fs::directory_iterator(fs::path(MS_SOURCE_DIR) / dir))
      if (e.is_regular_file() && e.path().extension() == ".h") v.push_back(e.path());
  std::sort(v.begin(), v.end());
  return v;
}

TEST(BackendOpsLaunchers, ParserFindsFreeLaunchersOnly) {
  const std::string text = R"(
    // void commented(cudaStream_t s);
    #define MACRO(x) void from_macro(cudaStream_t s)
    namespace ms::cuda {
    struct S { void member(cudaStream_t s); cudaStream_t field = nullptr; };
    class C { public: void method(cudaStream_t s) { (void)s; } };
    void plain(const float* x, int n, cudaStream_t stream, const Extras& e = {});
    void plain(const double* x, int n, cudaStream_t stream);
    size_t no_stream(int n);
    inline void inline_one(cudaStream_t s) { other(s); }
    namespace inner {
    void nested(float* out,
                cudaStream_t stream);
    }  // namespace inner
    /* void block_comment(cudaStream_t s); */
    }  // namespace ms::cuda
  )";
  const std::vector<std::string> got = launchers_declared_in(text);
  EXPECT_EQ(got, (std::vector<std::string>{"cuda::plain", "cuda::inline_one", "cuda::inner::nested"}));
}

TEST(BackendOpsLaunchers, EveryDeclaredLauncherIsListedAndNoListedOneIsGone) {
  std::set<std::string> declared;
  std::map<std::string, std::string> where;
  for (const fs::path& h : cuda_headers())
    for (const std::string& name : launchers_declared_in(read_text(h))) {
      declared.insert(name);
      where[name] = fs::relative(h, fs::path(MS_SOURCE_DIR)).string();
    }
  ASSERT_GT(declared.size(), 30u) << "the header scan found too few launchers: is MS_SOURCE_DIR right? " << MS_SOURCE_DIR;
  std::set<std::string> listed;
  for (const Launcher& l : cuda_launchers()) {
    EXPECT_TRUE(listed.insert(l.name).second) << l.name << " listed twice";
    EXPECT_TRUE(declared.count(l.name)) << l.name << " is listed in tests/backend_ops/launchers.cpp but declared in "
                                        << "no src/cuda header (renamed or removed?)";
    EXPECT_NE(l.covered_by.empty(), l.uncovered_why.empty())
        << l.name << ": either the cases that cover it or why none does";
  }
  for (const std::string& d : declared)
    EXPECT_TRUE(listed.count(d)) << d << " (" << where[d] << ") launches kernels but has no entry in "
                                 << "tests/backend_ops/launchers.cpp: add its cases to the registry and list them";
}

TEST(BackendOpsLaunchers, ReadmeListsEveryLauncher) {
  const std::string readme = read_text(fs::path(MS_SOURCE_DIR) / "tests/backend_ops/README.md");
  ASSERT_FALSE(readme.empty());
  for (const Launcher& l : cuda_launchers())
    EXPECT_NE(readme.find("`" + l.name + "`"), std::string::npos) << l.name << " is not in tests/backend_ops/README.md";
}

TEST(BackendOpsLaunchers, CoveringCasesAreRegisteredGpuImplementations) {
#ifndef MOESTREAM_HAVE_CUDA
  GTEST_SKIP() << "a build without CUDA registers no CUDA implementation";
#else
  for (const Launcher& l : cuda_launchers())
    for (const std::string& c : l.covered_by) {
      const size_t slash = c.find('/');
      ASSERT_NE(slash, std::string::npos) << l.name << ": '" << c << "' is not op/impl";
      const std::string op = c.substr(0, slash), impl = c.substr(slash + 1);
      bool found = false;
      for (const Op& o : registry().ops())
        if (o.name == op)
          for (const Impl& i : o.impls) found = found || (i.name == impl && i.gpu);
      EXPECT_TRUE(found) << l.name << ": no GPU implementation '" << impl << "' of op '" << op << "' is registered";
    }
#endif
}

}  // namespace
}  // namespace ms::backend_ops
