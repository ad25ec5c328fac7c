// GGUF files: a validating reader over mmap, and a streaming writer.
//
// The reader checks every count, length, type id, dimension and offset against
// the file before using it, and rejects a bad file with one ms::Error naming
// the field and its byte offset. It never reads out of bounds and never
// allocates from an unchecked count.
#pragma once
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "quant/types.h"

namespace ms {

enum class GgufType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
  BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
const char* gguf_type_name(GgufType t);

// A metadata value. Arrays hold elements of one type, possibly arrays again.
struct GgufValue {
  GgufType type = GgufType::UINT8;
  GgufType elem_type = GgufType::UINT8;  // for ARRAY
  // Scalars are kept widened: integers in i (signed) or u (unsigned), floats in f.
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;
  bool b = false;
  std::string s;
  std::vector<GgufValue> arr;  // ARRAY elements (strings and nested arrays too)

  bool is_integer() const;
  bool is_float() const;
  // Typed access; throws ms::Error naming `key` if the value is not convertible
  // (e.g. negative to unsigned, non-integer to integer).
  int64_t as_int(const std::string& key) const;
  uint64_t as_uint(const std::string& key) const;
  double as_float(const std::string& key) const;
  const std::string& as_string(const std::string& key) const;
  bool as_bool(const std::string& key) const;
  std::string to_display(size_t max_items = 8) const;  // for inspect

  static GgufValue of_u32(uint32_t v);
  static GgufValue of_i32(int32_t v);
  static GgufValue of_u64(uint64_t v);
  static GgufValue of_i64(int64_t v);
  static GgufValue of_f32(float v);
  static GgufValue of_f64(double v);
  static GgufValue of_bool(bool v);
  static GgufValue of_string(std::string v);
  static GgufValue of_array(GgufType elem_type, std::vector<GgufValue> elems);
  static GgufValue of_strings(const std::vector<std::string>& v);
  static GgufValue of_f32s(const std::vector<float>& v);
  static GgufValue of_i32s(const std::vector<int32_t>& v);
};

// Limits the reader enforces beyond the format itself, so that a corrupt count
// in a large file cannot make it allocate without bound (the largest real
// vocabularies use about 1M array elements in all).
constexpr int kGgufMaxArrayDepth = 8;                 // arrays of arrays of ...
constexpr uint64_t kGgufMaxArrayElements = 1ull << 24;  // all metadata arrays together

struct GgufTensorInfo {
  std::string name;
  // ne[0] is the innermost (contiguous) dimension: a weight of `rows` output
  // features and `cols` inputs has shape {cols, rows}.
  std::vector<int64_t> shape;
  DType type = DType::F32;
  uint64_t offset = 0;      // relative to the data section
  uint64_t nbytes = 0;      // validated against the file
  const uint8_t* data = nullptr;  // into the mapping (reader only)

  int64_t n_elements() const;
  int64_t row_len() const { return shape.empty() ? 1 : shape[0]; }
  int64_t n_rows() const;   // product of shape[1..]
  uint64_t row_nbytes() const;
};

class MappedFile;

class GgufFile {
 public:
  // Maps and validates a file. Throws ms::Error("<path>: <what> at byte N").
  static std::unique_ptr<GgufFile> open(const std::string& path);
  // Validates a buffer the caller keeps alive (used by the fuzzer and tests).
  static std::unique_ptr<GgufFile> from_memory(const uint8_t* data, size_t size,
                                               const std::string& name = "<memory>");
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return size_; }
  const uint8_t* base() const { return base_; }

  // Metadata in file order, and lookup.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* find(const std::string& key) const;
  bool has(const std::string& key) const { return find(key) != nullptr; }
  // Required values: throw ms::Error "missing metadata key 'k'" or wrong type.
  const GgufValue& get(const std::string& key) const;
  std::string get_string(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;
  // Optional values with a default.
  std::string get_string(const std::string& key, const std::string& def) const;
  int64_t get_int(const std::string& key, int64_t def) const;
  double get_float(const std::string& key, double def) const;
  bool get_bool(const std::string& key, bool def) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(const std::string& name) const;
  const GgufTensorInfo& tensor(const std::string& name) const;  // throws if missing

 private:
  GgufFile() = default;
  void parse();  // gguf_reader.cpp; fills everything below from base_/size_
  std::unique_ptr<MappedFile> map_;  // open(): owns the mapping; from_memory(): null
  std::string path_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  bool mapped_ = false;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, size_t> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

// Writes a GGUF v3 file without holding tensor data in memory: declare the
// metadata and every tensor first, then stream each tensor's bytes in the
// order declared. Tensor data is aligned to `general.alignment` (default 32).
class GgufWriter {
 public:
  // Creates (truncates) the file now, so a bad path fails early.
  explicit GgufWriter(const std::string& path);
  ~GgufWriter();  // an unfinished file is removed
  GgufWriter(const GgufWriter&) = delete;
  GgufWriter& operator=(const GgufWriter&) = delete;

  // Metadata and tensors can be declared until the header is written. Values
  // are checked (array elements match elem_type, scalars fit their type,
  // general.alignment is a uint32 power of two) and a bad one throws.
  void set(const std::string& key, GgufValue value);  // replaces an earlier value
  void add_tensor(const std::string& name, DType type, std::vector<int64_t> shape);

  // Writes the header (metadata and tensor infos); called by the first
  // write_tensor_data if not called before.
  void write_header();
  // Appends the bytes of the next declared tensor (in declaration order). May
  // be called several times per tensor with consecutive chunks, and one chunk
  // may run on into the next tensors; a tensor is complete when its nbytes
  // have been written. Zero padding to the alignment is added between tensors.
  void write_tensor_data(const void* data, size_t nbytes);
  // Writes the header if not yet written, checks every tensor is complete,
  // flushes and closes. Throws on I/O errors (the file is then removed).
  void finish();

 private:
  void write_bytes(const void* p, size_t n);  // throws ms::Error on I/O errors
  void pad_to(uint64_t pos);                  // zero bytes up to file position pos

  std::string path_;
  std::FILE* file_ = nullptr;
  uint64_t alignment_ = 32;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<GgufTensorInfo> tensors_;  // offsets set by write_header
  std::map<std::string, size_t> tensor_index_;
  bool header_written_ = false;
  bool remove_on_failure_ = false;  // only a regular file we created is removed
  size_t current_ = 0;          // tensor being written
  uint64_t current_written_ = 0;
  uint64_t pos_ = 0;            // bytes written so far
  bool finished_ = false;
};

}  // namespace ms
