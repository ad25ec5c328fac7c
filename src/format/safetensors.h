// Hugging Face safetensors files: an 8-byte little-endian header length, a
// JSON header naming each tensor's dtype, shape and [begin, end) byte range in
// the data that follows, and optional string metadata ("__metadata__").
// Sharded checkpoints add model.safetensors.index.json mapping tensor names to
// shard files; SafetensorsModel opens either layout.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "util/mapped_file.h"

namespace ms {

enum class StDType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL, F8_E4M3, F8_E5M2 };
const char* st_dtype_name(StDType t);
int st_dtype_size(StDType t);

struct StTensor {
  std::string name;
  StDType dtype = StDType::F32;
  std::vector<int64_t> shape;  // outermost first, as in PyTorch
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;
  std::string file;            // the shard it lives in

  int64_t n_elements() const;
  // Converts to float32 (F64/F32/F16/BF16 only; other dtypes throw ms::Error).
  void to_f32(float* out) const;
};

class SafetensorsFile {
 public:
  // Maps and validates: header length within the file, JSON well formed,
  // dtypes known, shapes non-negative without overflow, byte ranges inside the
  // data, matching dtype*shape, and not overlapping. Throws ms::Error naming
  // the file and the tensor.
  explicit SafetensorsFile(const std::string& path);
  const std::string& path() const { return map_.path(); }
  const std::vector<StTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  MappedFile map_;
  std::vector<StTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A whole checkpoint directory: model.safetensors, or the shards listed in
// model.safetensors.index.json (every listed shard must exist and hold the
// tensors the index says it does).
class SafetensorsModel {
 public:
  explicit SafetensorsModel(const std::string& dir);
  const StTensor* find(const std::string& name) const;
  const StTensor& get(const std::string& name) const;  // throws naming the tensor
  std::vector<std::string> names() const;              // sorted
  uint64_t total_bytes() const;

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const StTensor*> by_name_;
};

}  // namespace ms
