// GGUF reader: maps the file and validates every field before it is used.
//
// Layout (all little-endian; versions 2 and 3 are identical on disk, version 1
// used 32-bit counts and lengths and is rejected):
//   "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//   n_kv     x { string key | u32 value_type | value }
//   n_tensors x { string name | u32 n_dims | u64 dims[n_dims] | u32 type | u64 offset }
//   padding to general.alignment (default 32) | tensor data
// A string is u64 length + bytes (no terminator); an array is u32 elem_type +
// u64 count + elements.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>

#include "format/gguf.h"
#include "util/error.h"
#include "util/mapped_file.h"

namespace ms {
namespace {

// Smallest encoded size of a value of each type: counts are checked against
// the bytes left using these, before anything is allocated.
uint64_t min_value_size(GgufType t) {
  switch (t) {
    case GgufType::UINT8:
    case GgufType::INT8:
    case GgufType::BOOL: return 1;
    case GgufType::UINT16:
    case GgufType::INT16: return 2;
    case GgufType::UINT32:
    case GgufType::INT32:
    case GgufType::FLOAT32: return 4;
    case GgufType::UINT64:
    case GgufType::INT64:
    case GgufType::FLOAT64: return 8;
    case GgufType::STRING: return 8;   // the length
    case GgufType::ARRAY: return 12;   // elem type + count
  }
  return 1;
}

constexpr uint64_t kMinKvSize = 8 + 4 + 1;              // key length, type, 1-byte value
constexpr uint64_t kMinTensorInfoSize = 8 + 4 + 8 + 4 + 8;  // name length, n_dims, 1 dim, type, offset
constexpr uint64_t kHeaderSize = 4 + 4 + 8 + 8;
// Counts are checked against the bytes left, but in a multi-GB file a corrupt
// count can still be large: containers start at most this big and grow as
// entries actually parse.
constexpr uint64_t kReserveCap = 1 << 16;

bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_mul_overflow(a, b, out); }
bool add_overflows(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_add_overflow(a, b, out); }

// ggml type ids that llama.cpp (de3ff81) defines or once wrote to GGUF files
// and moestream has no block layout for: named in the error, so a user sees
// which format the file uses.
const char* ggml_type_moestream_lacks(uint32_t id) {
  switch (id) {
    case 31: return "q4_0_4_4 (a repacked layout llama.cpp no longer writes)";
    case 32: return "q4_0_4_8 (a repacked layout llama.cpp no longer writes)";
    case 33: return "q4_0_8_8 (a repacked layout llama.cpp no longer writes)";
    case 36: return "iq4_nl_4_4 (a repacked layout llama.cpp no longer writes)";
    case 37: return "iq4_nl_4_8 (a repacked layout llama.cpp no longer writes)";
    case 38: return "iq4_nl_8_8 (a repacked layout llama.cpp no longer writes)";
    case 40: return "nvfp4";
    case 41: return "q1_0";
    case 42: return "q2_0";
    default: return nullptr;
  }
}

std::string range_str(uint64_t a, uint64_t b) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "[%llu, %llu)", static_cast<unsigned long long>(a), static_cast<unsigned long long>(b));
  return buf;
}

// Reads fields from the buffer, checking each against the bytes left. Errors
// read "<path>: <context>: <what> (at byte N)", where the context says which
// key or tensor is being read.
class Parser {
 public:
  Parser(const uint8_t* base, uint64_t size, const std::string& path) : base_(base), size_(size), path_(path) {}

  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }
  void set_context(std::string c) { context_ = std::move(c); }

  [[noreturn]] void fail(const std::string& what, uint64_t at, const char* where = "at byte") const {
    std::string msg = path_ + ": ";
    if (!context_.empty()) msg += context_ + ": ";
    throw Error(msg + what + " (" + where + " " + std::to_string(at) + ")");
  }

  // `n` bytes of `field` must be present at the cursor.
  void need(uint64_t n, const char* field, const char* part = "") const {
    if (n > left())
      fail(std::string(field) + part + " needs " + std::to_string(n) + " bytes but only " + std::to_string(left()) +
               " are left in the file (size " + std::to_string(size_) + "); the file is truncated or corrupt",
           pos_);
  }

  template <typename T>
  T read(const char* field) {
    need(sizeof(T), field);
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));  // x86-64 and ARM hosts are little-endian like the file
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(const char* field) {
    const uint64_t at = pos_;
    need(8, field, " length");
    const uint64_t len = read<uint64_t>(field);
    if (len > left())
      fail(std::string(field) + " has length " + std::to_string(len) + " but only " + std::to_string(left()) +
               " bytes are left in the file; the file is truncated or corrupt",
           at);
    std::string s(reinterpret_cast<const char*>(base_ + pos_), static_cast<size_t>(len));
    pos_ += len;
    return s;
  }

  GgufType read_type(const char* field) {
    const uint64_t at = pos_;
    const uint32_t t = read<uint32_t>(field);
    if (t > static_cast<uint32_t>(GgufType::FLOAT64))
      fail(std::string(field) + " is " + std::to_string(t) + ", not a GGUF value type (0..12)", at);
    return static_cast<GgufType>(t);
  }

  GgufValue read_value(GgufType type, int depth) {
    GgufValue v;
    v.type = type;
    switch (type) {
      case GgufType::UINT8: v.u = read<uint8_t>("uint8 value"); break;
      case GgufType::INT8: v.i = read<int8_t>("int8 value"); break;
      case GgufType::UINT16: v.u = read<uint16_t>("uint16 value"); break;
      case GgufType::INT16: v.i = read<int16_t>("int16 value"); break;
      case GgufType::UINT32: v.u = read<uint32_t>("uint32 value"); break;
      case GgufType::INT32: v.i = read<int32_t>("int32 value"); break;
      case GgufType::UINT64: v.u = read<uint64_t>("uint64 value"); break;
      case GgufType::INT64: v.i = read<int64_t>("int64 value"); break;
      case GgufType::FLOAT32: v.f = read<float>("float32 value"); break;
      case GgufType::FLOAT64: v.f = read<double>("float64 value"); break;
      case GgufType::BOOL: v.b = read<uint8_t>("bool value") != 0; break;
      case GgufType::STRING: v.s = read_string("string value"); break;
      case GgufType::ARRAY: read_array(v, depth + 1); break;
    }
    return v;
  }

 private:
  void read_array(GgufValue& v, int depth) {
    const uint64_t at = pos_;
    if (depth > kGgufMaxArrayDepth)
      fail("arrays nested more than " + std::to_string(kGgufMaxArrayDepth) + " deep", at);
    v.elem_type = read_type("array element type");
    const uint64_t count_at = pos_;
    const uint64_t count = read<uint64_t>("array count");
    const uint64_t min_size = min_value_size(v.elem_type);
    if (count > left() / min_size)
      fail("array count " + std::to_string(count) + " of " + gguf_type_name(v.elem_type) + " needs at least " +
               std::to_string(min_size) + " bytes each but only " + std::to_string(left()) +
               " bytes are left in the file; the file is truncated or corrupt",
           count_at);
    elements_ += count;
    if (elements_ > kGgufMaxArrayElements)
      fail("metadata arrays hold more than " + std::to_string(kGgufMaxArrayElements) +
               " elements in all, far more than any model's vocabulary; the file is corrupt",
           count_at);
    // Checked against the bytes left and the element cap; reserve no more than
    // a modest amount up front, so memory grows only as elements really parse.
    v.arr.reserve(static_cast<size_t>(std::min<uint64_t>(count, kReserveCap)));
    for (uint64_t k = 0; k < count; ++k) v.arr.push_back(read_value(v.elem_type, depth));
  }

  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& path_;
  std::string context_;
  uint64_t elements_ = 0;
};

}  // namespace

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  f->map_ = std::make_unique<MappedFile>(path);
  f->base_ = f->map_->data();
  f->size_ = f->map_->size();
  f->mapped_ = true;
  f->parse();
  return f;
}

std::unique_ptr<GgufFile> GgufFile::from_memory(const uint8_t* data, size_t size, const std::string& name) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = name;
  f->base_ = data;
  f->size_ = size;
  f->parse();
  return f;
}

GgufFile::~GgufFile() = default;

void GgufFile::parse() {
  Parser p(base_, size_, path_);
  if (size_ < kHeaderSize)
    p.fail("file is " + std::to_string(size_) + " bytes, too small for a GGUF header (" +
               std::to_string(kHeaderSize) + " bytes); the file is truncated or not a GGUF file",
           0);
  if (std::memcmp(base_, "GGUF", 4) != 0) {
    std::string seen;
    for (int k = 0; k < 4; ++k) {
      const unsigned char c = base_[k];
      char buf[8];
      std::snprintf(buf, sizeof buf, (c >= 0x20 && c < 0x7f) ? "%c" : "\\x%02x", c);
      seen += buf;
    }
    p.fail("not a GGUF file: magic is '" + seen + "', expected 'GGUF'", 0);
  }
  p.read<uint32_t>("magic");
  version_ = p.read<uint32_t>("version");
  if (version_ == 1)
    p.fail("GGUF version 1 is not supported (it predates 64-bit counts); re-convert the model with a current tool", 4);
  if (version_ != 2 && version_ != 3) {
    if ((version_ & 0xFFFF) == 0 && (version_ >> 24) >= 2 && (version_ >> 24) <= 3)
      p.fail("this is a big-endian GGUF file; moestream reads little-endian files only", 4);
    p.fail("GGUF version " + std::to_string(version_) + " is not supported (moestream reads versions 2 and 3)", 4);
  }
  const uint64_t n_tensors = p.read<uint64_t>("tensor count");
  const uint64_t n_kv = p.read<uint64_t>("metadata key/value count");
  if (n_tensors > p.left() / kMinTensorInfoSize)
    p.fail("tensor count " + std::to_string(n_tensors) + " cannot fit in the " + std::to_string(p.left()) +
               " bytes left (each tensor info takes at least " + std::to_string(kMinTensorInfoSize) +
               "); the file is truncated or corrupt",
           8);
  if (n_kv > p.left() / kMinKvSize || n_kv * kMinKvSize + n_tensors * kMinTensorInfoSize > p.left())
    p.fail("metadata key/value count " + std::to_string(n_kv) + " (and " + std::to_string(n_tensors) +
               " tensors) cannot fit in the " + std::to_string(p.left()) + " bytes left; the file is truncated or corrupt",
           16);

  // Metadata.
  kv_.reserve(static_cast<size_t>(std::min<uint64_t>(n_kv, kReserveCap)));  // checked above: at most left/13
  for (uint64_t k = 0; k < n_kv; ++k) {
    const uint64_t at = p.pos();
    p.set_context("metadata entry #" + std::to_string(k));
    std::string key = p.read_string("key");
    if (key.empty()) p.fail("empty key", at);
    p.set_context("metadata key '" + key + "'");
    if (kv_index_.count(key)) p.fail("duplicate key (it appears earlier in the file too)", at);
    const GgufType type = p.read_type("value type");
    GgufValue value = p.read_value(type, 0);
    if (key == "general.alignment") {
      if (type != GgufType::UINT32)
        p.fail(std::string("must be a uint32, is ") + gguf_type_name(type), at);
      if (value.u == 0 || (value.u & (value.u - 1)) != 0)
        p.fail("alignment " + std::to_string(value.u) + " is not a nonzero power of two", at);
      alignment_ = value.u;
    }
    kv_index_.emplace(key, kv_.size());
    kv_.emplace_back(std::move(key), std::move(value));
  }

  // Tensor infos. Data ranges are checked once the data section's start is known.
  if (n_tensors > p.left() / kMinTensorInfoSize) {
    p.set_context("");
    p.fail("tensor count " + std::to_string(n_tensors) + " cannot fit in the " + std::to_string(p.left()) +
               " bytes left after the metadata; the file is truncated or corrupt",
           8);
  }
  std::vector<uint64_t> info_at;
  tensors_.reserve(static_cast<size_t>(std::min<uint64_t>(n_tensors, kReserveCap)));
  info_at.reserve(static_cast<size_t>(std::min<uint64_t>(n_tensors, kReserveCap)));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    const uint64_t at = p.pos();
    p.set_context("tensor info #" + std::to_string(k));
    GgufTensorInfo t;
    t.name = p.read_string("name");
    if (t.name.empty()) p.fail("empty tensor name", at);
    p.set_context("tensor '" + t.name + "'");
    if (tensor_index_.count(t.name)) p.fail("duplicate tensor name (it appears earlier in the file too)", at);
    const uint64_t dims_at = p.pos();
    const uint32_t n_dims = p.read<uint32_t>("n_dims");
    if (n_dims < 1 || n_dims > 4) p.fail("n_dims is " + std::to_string(n_dims) + ", must be 1..4", dims_at);
    uint64_t n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim_at = p.pos();
      const uint64_t dim = p.read<uint64_t>("dimension");
      if (dim == 0 || dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        p.fail("dimension " + std::to_string(d) + " is " + std::to_string(dim) + ", must be at least 1 and below 2^63", dim_at);
      if (mul_overflows(n_elements, dim, &n_elements) ||
          n_elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        p.fail("dimensions' product (element count) overflows 63 bits at dimension " + std::to_string(d), dim_at);
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    const uint64_t type_at = p.pos();
    const uint32_t type_id = p.read<uint32_t>("type");
    const TypeInfo* ti = type_info(type_id);
    if (!ti) {
      if (const char* known = ggml_type_moestream_lacks(type_id))
        p.fail(std::string("type ") + known + " (ggml type id " + std::to_string(type_id) +
                   ") is not supported by moestream; re-quantize the model to a common type such as Q4_K or Q8_0",
               type_at);
      p.fail("unknown tensor type id " + std::to_string(type_id) +
                 " (a quantization this version of moestream does not know; re-quantize to a common type such as "
                 "Q4_K or Q8_0)",
             type_at);
    }
    t.type = ti->type;
    if (t.shape[0] % ti->block_size != 0)
      p.fail("innermost dimension " + std::to_string(t.shape[0]) + " is not a multiple of " + ti->name +
                 "'s block size " + std::to_string(ti->block_size),
             dims_at);
    // nbytes = blocks * type_size; blocks = n_elements / block_size exactly, since ne[0] divides.
    const uint64_t blocks = n_elements / static_cast<uint64_t>(ti->block_size);
    if (mul_overflows(blocks, static_cast<uint64_t>(ti->type_size), &t.nbytes))
      p.fail("byte size overflows 64 bits", dims_at);
    const uint64_t off_at = p.pos();
    t.offset = p.read<uint64_t>("data offset");
    if (t.offset % alignment_ != 0)
      p.fail("data offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                 std::to_string(alignment_),
             off_at);
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
    info_at.push_back(at);
  }

  // Data section: starts at the end of the header, rounded up to the alignment.
  p.set_context("");
  const uint64_t header_end = p.pos();
  data_offset_ = (header_end + alignment_ - 1) / alignment_ * alignment_;  // header_end < 2^63, no overflow
  for (size_t k = 0; k < tensors_.size(); ++k) {
    GgufTensorInfo& t = tensors_[k];
    p.set_context("tensor '" + t.name + "'");
    uint64_t begin = 0, end = 0;
    if (add_overflows(data_offset_, t.offset, &begin) || add_overflows(begin, t.nbytes, &end))
      p.fail("data offset " + std::to_string(t.offset) + " + " + std::to_string(t.nbytes) +
                 " bytes overflows 64 bits; the file is corrupt",
             info_at[k], "tensor info at byte");
    if (end > size_)
      p.fail("data " + range_str(begin, end) + " (" + std::to_string(t.nbytes) + " bytes of " + type_name(t.type) +
                 ") runs past the end of the file (size " + std::to_string(size_) +
                 "); the file is truncated or corrupt",
             info_at[k], "tensor info at byte");
    t.data = base_ + begin;
  }
  // No two tensors' bytes may overlap: a writer lays them out one after
  // another, so an overlap is a corrupt offset (or size), and a tensor's
  // weights would be another's.
  std::vector<size_t> by_offset(tensors_.size());
  for (size_t k = 0; k < by_offset.size(); ++k) by_offset[k] = k;
  std::sort(by_offset.begin(), by_offset.end(),
            [&](size_t a, size_t b) { return tensors_[a].offset < tensors_[b].offset; });
  for (size_t k = 1; k < by_offset.size(); ++k) {
    const GgufTensorInfo& prev = tensors_[by_offset[k - 1]];
    const GgufTensorInfo& t = tensors_[by_offset[k]];
    if (prev.nbytes == 0 || t.nbytes == 0 || prev.offset + prev.nbytes <= t.offset) continue;
    p.set_context("tensor '" + t.name + "'");
    p.fail("data " + range_str(data_offset_ + t.offset, data_offset_ + t.offset + t.nbytes) + " overlaps tensor '" +
               prev.name + "' " + range_str(data_offset_ + prev.offset, data_offset_ + prev.offset + prev.nbytes) +
               " (its offset or the other's size is wrong); the file is corrupt",
           info_at[by_offset[k]], "tensor info at byte");
  }
}

// ---------------------------------------------------------------- lookups

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const GgufValue& GgufFile::get(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) throw Error(path_ + ": missing metadata key '" + key + "'");
  return *v;
}

namespace {
// Runs a typed accessor, prefixing its error with the file's path.
template <typename F>
auto with_path(const std::string& path, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}
}  // namespace

std::string GgufFile::get_string(const std::string& key) const {
  const GgufValue& v = get(key);
  return with_path(path_, [&] { return v.as_string(key); });
}
int64_t GgufFile::get_int(const std::string& key) const {
  const GgufValue& v = get(key);
  return with_path(path_, [&] { return v.as_int(key); });
}
double GgufFile::get_float(const std::string& key) const {
  const GgufValue& v = get(key);
  return with_path(path_, [&] { return v.as_float(key); });
}
std::string GgufFile::get_string(const std::string& key, const std::string& def) const {
  const GgufValue* v = find(key);
  return v ? with_path(path_, [&] { return v->as_string(key); }) : def;
}
int64_t GgufFile::get_int(const std::string& key, int64_t def) const {
  const GgufValue* v = find(key);
  return v ? with_path(path_, [&] { return v->as_int(key); }) : def;
}
double GgufFile::get_float(const std::string& key, double def) const {
  const GgufValue* v = find(key);
  return v ? with_path(path_, [&] { return v->as_float(key); }) : def;
}
bool GgufFile::get_bool(const std::string& key, bool def) const {
  const GgufValue* v = find(key);
  return v ? with_path(path_, [&] { return v->as_bool(key); }) : def;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensorInfo& GgufFile::tensor(const std::string& name) const {
  const GgufTensorInfo* t = find_tensor(name);
  if (!t) throw Error(path_ + ": missing tensor '" + name + "'");
  return *t;
}

// ---------------------------------------------------------------- tensor info

int64_t GgufTensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // validated by the reader / writer not to overflow
  return n;
}

int64_t GgufTensorInfo::n_rows() const {
  int64_t n = 1;
  for (size_t d = 1; d < shape.size(); ++d) n *= shape[d];
  return n;
}

uint64_t GgufTensorInfo::row_nbytes() const { return static_cast<uint64_t>(row_bytes(type, row_len())); }

}  // namespace ms
