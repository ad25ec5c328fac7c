#include "experts/cost_model.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <utility>

#include "quant/types.h"
#include "util/error.h"

namespace ms {
namespace {

// Every tunable figure by name, for overrides and JSON.
std::pair<const char*, double CostModel::*> const kFields[] = {
    {"pcie_gbps", &CostModel::pcie_gbps},           {"cpu_gbps", &CostModel::cpu_gbps},
    {"gpu_hbm_gbps", &CostModel::gpu_hbm_gbps},     {"cpu_gflops", &CostModel::cpu_gflops},
    {"gpu_tflops", &CostModel::gpu_tflops},         {"flops_per_byte", &CostModel::flops_per_byte},
    {"copy_overhead_us", &CostModel::copy_overhead_us}, {"cpu_overhead_us", &CostModel::cpu_overhead_us},
    {"gpu_overhead_us", &CostModel::gpu_overhead_us},
};

double CostModel::* field(const std::string& name) {
  for (const auto& [n, f] : kFields)
    if (name == n) return f;
  std::string names;
  for (const auto& [n, f] : kFields) names += std::string(names.empty() ? "" : ", ") + n;
  throw Error("unknown cost model figure '" + name + "' (known: " + names + ")");
}

// Calls f(item) for each non-empty item of a comma list ("a=1,,b=2").
template <class F>
void for_each_item(const std::string& list, F&& f) {
  size_t at = 0;
  while (at < list.size()) {
    size_t end = list.find(',', at);
    if (end == std::string::npos) end = list.size();
    const std::string item = list.substr(at, end - at);
    at = end + 1;
    if (!item.empty()) f(item);
  }
}

}  // namespace

CostModel CostModel::for_quant(const std::string& quant_name) {
  CostModel m;
  if (quant_name.empty()) return m;
  try {
    const TypeInfo& t = type_info(parse_type(quant_name));
    m.flops_per_byte = 2.0 * double(t.block_size) / double(t.type_size);
  } catch (const Error&) {
    // Unknown type name in a trace: keep the default figure.
  }
  return m;
}

double CostModel::cpu_s(uint64_t bytes, uint32_t tokens) const {
  const double read = double(bytes) / (cpu_gbps * 1e9);
  const double math = double(tokens) * double(bytes) * flops_per_byte / (cpu_gflops * 1e9);
  return cpu_overhead_us * 1e-6 + std::max(read, math);
}

double CostModel::gpu_s(uint64_t bytes, uint32_t tokens) const {
  const double read = double(bytes) / (gpu_hbm_gbps * 1e9);
  const double math = double(tokens) * double(bytes) * flops_per_byte / (gpu_tflops * 1e12);
  return gpu_overhead_us * 1e-6 + std::max(read, math);
}

void CostModel::apply_overrides(const std::string& list) {
  CostModel m = *this;  // all or nothing
  m.apply_overrides_unchecked(list);
  m.validate();
  *this = m;
}

void CostModel::apply(const CostOverrides& overrides) {
  CostModel m = *this;  // all or nothing
  for (const auto& [f, v] : overrides.figures) m.*f = v;
  m.validate();
  *this = m;
}

CostOverrides CostOverrides::parse(const std::string& list) {
  CostOverrides o;
  CostModel probe;  // names and values checked as apply_overrides checks them
  probe.apply_overrides(list);
  for_each_item(list, [&](const std::string& item) {
    const size_t eq = item.find('=');
    o.figures.emplace_back(field(item.substr(0, eq)), std::strtod(item.c_str() + eq + 1, nullptr));
  });
  return o;
}

bool CostOverrides::sets(double CostModel::*figure) const {
  return std::any_of(figures.begin(), figures.end(), [&](const auto& p) { return p.first == figure; });
}

std::string CostOverrides::text() const {
  std::string s;
  for (const auto& [f, v] : figures)
    for (const auto& [n, g] : kFields)
      if (g == f) {
        char buf[64];
        std::snprintf(buf, sizeof(buf), "%.17g", v);
        s += std::string(s.empty() ? "" : ",") + n + "=" + buf;
      }
  return s;
}

void CostModel::apply_overrides_unchecked(const std::string& list) {
  for_each_item(list, [&](const std::string& item) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos) throw Error("cost override '" + item + "' must look like name=value (e.g. pcie_gbps=55)");
    const std::string value = item.substr(eq + 1);
    char* stop = nullptr;
    const double v = std::strtod(value.c_str(), &stop);
    if (value.empty() || *stop != '\0') throw Error("cost override '" + item + "': '" + value + "' is not a number");
    this->*field(item.substr(0, eq)) = v;
  });
}

void CostModel::apply_json(const nlohmann::json& j) {
  if (!j.is_object()) throw Error("cost model JSON must be an object of name: number");
  CostModel m = *this;  // all or nothing
  for (const auto& [name, value] : j.items()) {
    if (!value.is_number()) throw Error("cost model figure '" + name + "' must be a number");
    m.*field(name) = value.get<double>();
  }
  m.validate();
  *this = m;
}

nlohmann::json CostModel::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [n, f] : kFields) j[n] = this->*f;
  return j;
}

void CostModel::validate() const {
  for (const auto& [n, f] : kFields) {
    const double v = this->*f;
    const bool overhead = std::string(n).find("overhead") != std::string::npos;
    if (!(v == v) || v < 0 || (!overhead && v == 0))
      throw Error(std::string("cost model figure ") + n + " = " + std::to_string(v) +
                  (overhead ? " must be >= 0" : " must be > 0"));
  }
}

}  // namespace ms
