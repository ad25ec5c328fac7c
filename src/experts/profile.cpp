#include "experts/profile.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "util/error.h"

namespace ms {

ExpertProfile ExpertProfile::from_trace(const Trace& trace) {
  ExpertProfile p;
  p.model = trace.header.model;
  p.n_layer = trace.header.n_layer;
  p.n_expert = trace.header.n_expert;
  p.counts.assign(size_t(p.n_layer) * p.n_expert, 0);
  for (const TraceRecord& r : trace.records)
    for (uint16_t e : trace.ids_of(r)) ++p.counts[size_t(r.layer) * p.n_expert + e];
  return p;
}

std::string ExpertProfile::to_json() const {
  nlohmann::json j;
  j["format"] = "moestream-profile";
  j["version"] = 1;
  j["model"] = model;
  j["n_layer"] = n_layer;
  j["n_expert"] = n_expert;
  nlohmann::json rows = nlohmann::json::array();
  for (uint32_t l = 0; l < n_layer; ++l)
    rows.push_back(std::vector<uint64_t>(counts.begin() + size_t(l) * n_expert, counts.begin() + size_t(l + 1) * n_expert));
  j["counts"] = rows;
  return j.dump() + "\n";
}

ExpertProfile ExpertProfile::from_json(const std::string& text, const std::string& name) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(name + ": not valid JSON (" + e.what() + ")");
  }
  const auto bad = [&](const std::string& m) {
    return Error(name + ": not a moestream profile: " + m + " (write one with `moestream trace profile TRACE -o FILE`)");
  };
  if (!j.is_object() || j.value("format", "") != "moestream-profile") throw bad("missing \"format\": \"moestream-profile\"");
  if (j.value("version", 0) != 1) throw bad("unsupported version");
  ExpertProfile p;
  try {
    p.model = j.value("model", "");
    p.n_layer = j.at("n_layer").get<uint32_t>();
    p.n_expert = j.at("n_expert").get<uint32_t>();
    if (p.n_layer == 0 || p.n_layer > 4096 || p.n_expert == 0 || p.n_expert > 65535) throw bad("n_layer/n_expert out of range");
    const auto& rows = j.at("counts");
    if (!rows.is_array() || rows.size() != p.n_layer) throw bad("\"counts\" must have n_layer rows");
    p.counts.reserve(size_t(p.n_layer) * p.n_expert);
    for (const auto& row : rows) {
      if (!row.is_array() || row.size() != p.n_expert) throw bad("each row of \"counts\" must have n_expert entries");
      for (const auto& c : row) p.counts.push_back(c.get<uint64_t>());
    }
  } catch (const nlohmann::json::exception& e) {
    throw bad(e.what());
  }
  return p;
}

void ExpertProfile::save(const std::string& path) const {
  std::ofstream out(path);
  if (!out) throw Error("cannot create profile file '" + path + "'");
  out << to_json();
  if (!out) throw Error("cannot write profile file '" + path + "'");
}

ExpertProfile ExpertProfile::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("cannot open profile file '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return from_json(ss.str(), path);
}

std::vector<ExpertKey> ExpertProfile::hottest(size_t n) const {
  std::vector<ExpertKey> keys(counts.size());
  std::iota(keys.begin(), keys.end(), 0);
  std::stable_sort(keys.begin(), keys.end(), [&](ExpertKey a, ExpertKey b) { return counts[a] > counts[b]; });
  size_t m = 0;
  while (m < keys.size() && m < n && counts[keys[m]] > 0) ++m;
  keys.resize(m);
  return keys;
}

std::vector<ExpertKey> layer_keys(const std::vector<uint32_t>& layers, uint32_t n_expert) {
  std::vector<ExpertKey> keys;
  for (uint32_t l : layers)
    for (uint32_t e = 0; e < n_expert; ++e) keys.push_back(l * n_expert + e);
  return keys;
}

}  // namespace ms
