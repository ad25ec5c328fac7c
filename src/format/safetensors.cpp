#include "format/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "quant/half.h"
#include "util/error.h"

namespace ms {
namespace {

struct DTypeName { StDType t; const char* name; int size; };
constexpr DTypeName kDTypes[] = {
    {StDType::F64, "F64", 8},  {StDType::F32, "F32", 4}, {StDType::F16, "F16", 2},
    {StDType::BF16, "BF16", 2}, {StDType::I64, "I64", 8}, {StDType::I32, "I32", 4},
    {StDType::I16, "I16", 2},  {StDType::I8, "I8", 1},   {StDType::U8, "U8", 1},
    {StDType::BOOL, "BOOL", 1}, {StDType::F8_E4M3, "F8_E4M3", 1}, {StDType::F8_E5M2, "F8_E5M2", 1},
};

// Product of dims times element size, or throws on negative dims or overflow.
uint64_t checked_nbytes(const std::vector<int64_t>& shape, int elem, const std::string& what) {
  uint64_t n = static_cast<uint64_t>(elem);
  for (int64_t d : shape) {
    if (d < 0) throw Error(what + ": negative dimension");
    if (d != 0 && n > UINT64_MAX / static_cast<uint64_t>(d)) throw Error(what + ": shape overflows");
    n *= static_cast<uint64_t>(d);
  }
  return n;
}

}  // namespace

const char* st_dtype_name(StDType t) {
  for (const auto& d : kDTypes) if (d.t == t) return d.name;
  return "?";
}

int st_dtype_size(StDType t) {
  for (const auto& d : kDTypes) if (d.t == t) return d.size;
  return 0;
}

int64_t StTensor::n_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void StTensor::to_f32(float* out) const {
  const int64_t n = n_elements();
  switch (dtype) {
    case StDType::F32: std::memcpy(out, data, static_cast<size_t>(n) * 4); return;
    case StDType::F64:
      for (int64_t i = 0; i < n; ++i) {
        double v;
        std::memcpy(&v, data + i * 8, 8);
        out[i] = static_cast<float>(v);
      }
      return;
    case StDType::F16:
    case StDType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, data + i * 2, 2);
        out[i] = dtype == StDType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
      return;
    default:
      throw Error(file + ": tensor '" + name + "' has dtype " + st_dtype_name(dtype) +
                  ", which cannot be converted to floats (supported: F64, F32, F16, BF16)");
  }
}

SafetensorsFile::SafetensorsFile(const std::string& path) : map_(path) {
  const uint8_t* base = map_.data();
  const uint64_t size = map_.size();
  if (size < 8) throw Error(path + ": not a safetensors file (" + std::to_string(size) + " bytes, need at least 8)");
  uint64_t header_len;
  std::memcpy(&header_len, base, 8);
  if (header_len > size - 8)
    throw Error(path + ": header length " + std::to_string(header_len) + " runs past the end of the file (size " +
                std::to_string(size) + ")");
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = size - data_start;
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(base + 8, base + 8 + header_len);
  } catch (const std::exception& e) {
    throw Error(path + ": header is not valid JSON: " + e.what());
  }
  if (!header.is_object()) throw Error(path + ": header is not a JSON object");
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const std::string where = path + ": tensor '" + name + "'";
    if (name == "__metadata__") {
      if (!it->is_object()) throw Error(path + ": __metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m)
        if (m->is_string()) metadata_[m.key()] = m->get<std::string>();
      continue;
    }
    const auto& v = *it;
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      throw Error(where + ": needs dtype, shape and data_offsets");
    if (!v["dtype"].is_string()) throw Error(where + ": dtype is not a string");
    const std::string dt = v["dtype"].get<std::string>();
    const DTypeName* found = nullptr;
    for (const auto& d : kDTypes) if (dt == d.name) found = &d;
    if (!found) throw Error(where + ": unknown dtype '" + dt + "'");
    StTensor t;
    t.name = name;
    t.file = path;
    t.dtype = found->t;
    if (!v["shape"].is_array()) throw Error(where + ": shape is not an array");
    for (const auto& d : v["shape"]) {
      if (!d.is_number_integer()) throw Error(where + ": shape has a non-integer entry");
      t.shape.push_back(d.get<int64_t>());
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      throw Error(where + ": data_offsets must be two non-negative integers");
    const uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
    if (b > e || e > data_size)
      throw Error(where + ": data [" + std::to_string(b) + ", " + std::to_string(e) +
                  ") is outside the data section of " + std::to_string(data_size) + " bytes");
    const uint64_t expect = checked_nbytes(t.shape, found->size, where);
    if (e - b != expect)
      throw Error(where + ": holds " + std::to_string(e - b) + " bytes but dtype and shape need " +
                  std::to_string(expect));
    t.data = base + data_start + b;
    t.nbytes = e - b;
    if (t.nbytes > 0) ranges.emplace_back(b, e);
    tensors_.push_back(std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second)
      throw Error(path + ": tensor data ranges overlap at byte " + std::to_string(ranges[i].first));
  std::sort(tensors_.begin(), tensors_.end(), [](const StTensor& a, const StTensor& b) { return a.name < b.name; });
}

SafetensorsModel::SafetensorsModel(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path root(dir);
  const fs::path index = root / "model.safetensors.index.json";
  std::vector<std::string> shards;
  std::map<std::string, std::string> expected;  // tensor -> shard, from the index
  if (fs::exists(index)) {
    nlohmann::json j;
    try {
      std::ifstream in(index);
      j = nlohmann::json::parse(in);
    } catch (const std::exception& e) {
      throw Error(index.string() + ": not valid JSON: " + e.what());
    }
    if (!j.contains("weight_map") || !j["weight_map"].is_object())
      throw Error(index.string() + ": has no weight_map object");
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it->is_string()) throw Error(index.string() + ": weight_map entry '" + it.key() + "' is not a file name");
      const std::string shard = it->get<std::string>();
      if (shard.find('/') != std::string::npos || shard == ".." )
        throw Error(index.string() + ": shard name '" + shard + "' must be a plain file name");
      expected[it.key()] = shard;
      if (std::find(shards.begin(), shards.end(), shard) == shards.end()) shards.push_back(shard);
    }
    std::sort(shards.begin(), shards.end());
  } else if (fs::exists(root / "model.safetensors")) {
    shards.push_back("model.safetensors");
  } else {
    throw Error(dir + ": no model.safetensors or model.safetensors.index.json found");
  }
  for (const auto& shard : shards) {
    const fs::path p = root / shard;
    if (!fs::exists(p)) throw Error(dir + ": shard '" + shard + "' listed in the index is missing");
    files_.push_back(std::make_unique<SafetensorsFile>(p.string()));
    for (const auto& t : files_.back()->tensors()) {
      if (by_name_.count(t.name)) throw Error(p.string() + ": tensor '" + t.name + "' also appears in another shard");
      by_name_[t.name] = &t;
    }
  }
  for (const auto& [name, shard] : expected) {
    auto it = by_name_.find(name);
    if (it == by_name_.end())
      throw Error(dir + ": tensor '" + name + "' is listed in the index (shard '" + shard + "') but not found");
    if (fs::path(it->second->file).filename() != shard)
      throw Error(dir + ": tensor '" + name + "' is in '" + fs::path(it->second->file).filename().string() +
                  "' but the index says '" + shard + "'");
  }
}

const StTensor* SafetensorsModel::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

const StTensor& SafetensorsModel::get(const std::string& name) const {
  const StTensor* t = find(name);
  if (!t) throw Error("checkpoint has no tensor '" + name + "'");
  return *t;
}

std::vector<std::string> SafetensorsModel::names() const {
  std::vector<std::string> out;
  for (const auto& [n, t] : by_name_) out.push_back(n);
  return out;
}

uint64_t SafetensorsModel::total_bytes() const {
  uint64_t total = 0;
  for (const auto& [n, t] : by_name_) total += t->nbytes;
  return total;
}

}  // namespace ms
