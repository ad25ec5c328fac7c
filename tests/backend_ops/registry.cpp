// The registry's bookkeeping and the comparison every case goes through.
#include "backend_ops/registry.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "util/error.h"

namespace ms::backend_ops {

int64_t Case::at(const std::string& k) const {
  const auto it = p.find(k);
  if (it == p.end()) throw Error("backend_ops case '" + label + "' has no parameter '" + k + "'");
  return it->second;
}

Op& Registry::add(Op op) {
  if (has(op.name)) throw Error("backend_ops: op '" + op.name + "' registered twice");
  ops_.push_back(std::move(op));
  return ops_.back();
}

bool Registry::has(const std::string& name) const {
  return std::any_of(ops_.begin(), ops_.end(), [&](const Op& o) { return o.name == name; });
}

Op& Registry::op(const std::string& name) {
  for (Op& o : ops_)
    if (o.name == name) return o;
  throw Error("backend_ops: no op '" + name + "'");
}

void Registry::add_impl(const std::string& op_name, Impl impl) { op(op_name).impls.push_back(std::move(impl)); }

const Registry& registry() {
  static const Registry r = [] {
    Registry reg;
    register_quant_ops(reg);
    register_cpu_ops(reg);
    register_cuda_impls(reg);
    register_cuda_fused_impls(reg);
    register_cuda_moe_impls(reg);
    return reg;
  }();
  return r;
}

Verdict compare(const Problem& p, const std::vector<float>& got, double tol) {
  Verdict v;
  std::ostringstream os;
  if (got.size() != p.ref.size()) {
    os << "output has " << got.size() << " elements, the reference " << p.ref.size();
    v.detail = os.str();
    return v;
  }
  double global = 0;
  for (double r : p.ref) global = std::max(global, std::fabs(r));
  if (global == 0) global = 1;  // an all-zero reference: absolute error
  int64_t first_bad = -1;
  for (size_t k = 0; k < got.size(); ++k) {
    if (!std::isfinite(got[k])) {
      if (first_bad < 0) first_bad = static_cast<int64_t>(k);
      ++v.not_finite;
      continue;
    }
    double s = p.scale.empty() ? global : p.scale[k];
    if (!(s > 0)) s = 1e-30;
    const double e = std::fabs(static_cast<double>(got[k]) - p.ref[k]) / s;
    if (v.worst < 0 || e > v.err) {
      v.err = e;
      v.worst = static_cast<int64_t>(k);
    }
  }
  if (first_bad >= 0) v.worst = first_bad;
  v.ok = v.not_finite == 0 && v.err <= tol;
  os << "err " << v.err << " (tol " << tol << ")";
  if (v.not_finite) os << ", " << v.not_finite << " elements not finite (unwritten?)";
  if (v.worst >= 0) os << ", worst [" << v.worst << "] got " << got[v.worst] << " want " << p.ref[v.worst];
  v.detail = os.str();
  return v;
}

}  // namespace ms::backend_ops
