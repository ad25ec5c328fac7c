// One parameterised test per (op, implementation) of the registry: every case
// (shape) of the op is run and compared with the scalar reference, and a line
// per case says the error. CPU implementations are the BackendOps suite, CUDA
// ones BackendOpsCuda (labelled gpu by tests/CMakeLists; they skip without a
// device).
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <ostream>
#include <set>
#include <utility>
#include <string>
#include <vector>

#include "backend_ops/registry.h"

namespace ms::backend_ops {
namespace {

struct Param {
  size_t op = 0, impl = 0;
};

std::vector<Param> params(bool gpu) {
  std::vector<Param> v;
  const auto& ops = registry().ops();
  for (size_t o = 0; o < ops.size(); ++o)
    for (size_t k = 0; k < ops[o].impls.size(); ++k)
      if (ops[o].impls[k].gpu == gpu) v.push_back({o, k});
  return v;
}

void PrintTo(const Param& p, std::ostream* os) {
  const Op& op = registry().ops()[p.op];
  *os << op.name << " " << op.impls[p.impl].name;
}

// Each case's inputs and reference, made once and shared by the op's
// implementations (the references of the big ops dominate the run time).
const Problem& problem(size_t op, size_t c) {
  static std::map<std::pair<size_t, size_t>, Problem> made;
  auto it = made.find({op, c});
  if (it == made.end()) it = made.emplace(std::make_pair(op, c), registry().ops()[op].make(registry().ops()[op].cases[c])).first;
  return it->second;
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  const Op& op = registry().ops()[info.param.op];
  return op.name + "_" + op.impls[info.param.impl].name;
}

void run_all_cases(const Param& prm) {
  const Op& op = registry().ops()[prm.op];
  const Impl& impl = op.impls[prm.impl];
  if (impl.unavailable) {
    const std::string why = impl.unavailable();
    if (!why.empty()) GTEST_SKIP() << op.name << " " << impl.name << ": " << why;
  }
  const double tol = impl.tol >= 0 ? impl.tol : op.tol;
  int ran = 0;
  for (size_t ci = 0; ci < op.cases.size(); ++ci) {
    const Case& c = op.cases[ci];
    if (impl.skip_case && !impl.skip_case(c).empty()) continue;
    const Problem& p = problem(prm.op, ci);
    const std::vector<float> got = impl.run(c, p);
    const Verdict v = compare(p, got, tol);
    std::printf("[backend_ops] %-28s %-18s %-40s %s %s\n", op.name.c_str(), impl.name.c_str(), c.label.c_str(),
                v.ok ? "ok  " : "FAIL", v.detail.c_str());
    EXPECT_TRUE(v.ok) << op.name << " " << impl.name << " " << c.label << ": " << v.detail;
    ++ran;
  }
  EXPECT_GT(ran, 0) << op.name << " " << impl.name << " ran no case";
}

class BackendOps : public ::testing::TestWithParam<Param> {};
class BackendOpsCuda : public ::testing::TestWithParam<Param> {};

TEST_P(BackendOps, MatchesReference) { run_all_cases(GetParam()); }
TEST_P(BackendOpsCuda, MatchesReference) { run_all_cases(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Ops, BackendOps, ::testing::ValuesIn(params(false)), param_name);
INSTANTIATE_TEST_SUITE_P(Ops, BackendOpsCuda, ::testing::ValuesIn(params(true)), param_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(BackendOpsCuda);

// The registry itself: names usable as test names, each op with cases, an
// implementation and a reference that yields a finite output.
TEST(BackendOpsRegistry, EveryOpHasCasesImplsAndUniqueNames) {
  std::set<std::string> names;
  for (const Op& op : registry().ops()) {
    EXPECT_TRUE(names.insert(op.name).second) << op.name;
    EXPECT_FALSE(op.cases.empty()) << op.name;
    EXPECT_FALSE(op.impls.empty()) << op.name;
    for (char ch : op.name) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_') << op.name;
    std::set<std::string> impls;
    for (const Impl& i : op.impls) EXPECT_TRUE(impls.insert(i.name).second) << op.name << " " << i.name;
  }
}

// The comparison catches what it must: an unwritten (NaN) element, and an
// error over the tolerance; it passes an exact answer.
TEST(BackendOpsRegistry, CompareCatchesPoisonAndErrors) {
  Problem p;
  p.ref = {1.0, -2.0, 0.5};
  EXPECT_TRUE(compare(p, {1.f, -2.f, 0.5f}, 0).ok);
  EXPECT_FALSE(compare(p, {1.f, -2.f, NAN}, 1).ok);
  EXPECT_FALSE(compare(p, {1.f, -2.1f, 0.5f}, 0.01).ok);  // 0.1 / max|ref| 2 = 0.05
  EXPECT_TRUE(compare(p, {1.f, -2.1f, 0.5f}, 0.06).ok);
  EXPECT_FALSE(compare(p, {1.f, -2.f}, 1).ok);  // wrong size
  p.scale = {1e-3, 1e-3, 1e-3};
  EXPECT_FALSE(compare(p, {1.f, -2.f, 0.5001f}, 0.01).ok);  // 1e-4 / 1e-3 = 0.1
}

}  // namespace
}  // namespace ms::backend_ops
