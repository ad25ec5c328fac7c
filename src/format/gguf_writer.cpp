// GGUF writer: metadata and tensor infos are declared up front, then tensor
// bytes are streamed straight to the file, so memory stays O(header).
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "format/gguf.h"
#include "util/error.h"

namespace ms {
namespace {

constexpr uint32_t kWriteVersion = 3;

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// Checks a value can be written as declared: known types, array elements of
// the array's elem_type, scalars within their type's range, bounded nesting.
void check_value(const std::string& key, const GgufValue& v, GgufType type, int depth) {
  auto fail = [&](const std::string& what) { throw Error("GGUF writer: metadata key '" + key + "': " + what); };
  if (static_cast<uint32_t>(type) > static_cast<uint32_t>(GgufType::FLOAT64))
    fail("unknown value type " + std::to_string(static_cast<uint32_t>(type)));
  if (v.type != type)
    fail(std::string("array element of type ") + gguf_type_name(v.type) + " in an array of " + gguf_type_name(type));
  auto fits_u = [&](uint64_t max) {
    if (v.u > max) fail(std::to_string(v.u) + " does not fit in " + gguf_type_name(type));
  };
  auto fits_i = [&](int64_t min, int64_t max) {
    if (v.i < min || v.i > max) fail(std::to_string(v.i) + " does not fit in " + gguf_type_name(type));
  };
  switch (type) {
    case GgufType::UINT8: fits_u(0xFF); break;
    case GgufType::UINT16: fits_u(0xFFFF); break;
    case GgufType::UINT32: fits_u(0xFFFFFFFFu); break;
    case GgufType::INT8: fits_i(-128, 127); break;
    case GgufType::INT16: fits_i(-32768, 32767); break;
    case GgufType::INT32: fits_i(std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()); break;
    case GgufType::ARRAY:
      if (depth >= kGgufMaxArrayDepth) fail("arrays nested more than " + std::to_string(kGgufMaxArrayDepth) + " deep");
      if (static_cast<uint32_t>(v.elem_type) > static_cast<uint32_t>(GgufType::FLOAT64))
        fail("unknown array element type " + std::to_string(static_cast<uint32_t>(v.elem_type)));
      for (const GgufValue& e : v.arr) check_value(key, e, v.elem_type, depth + 1);
      break;
    default: break;
  }
}

// Appends little-endian encodings to a byte buffer (the header is built in
// memory: it is small next to the data, a few MB at most for big vocabularies).
class Encoder {
 public:
  std::string out;
  template <typename T>
  void put(T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out.append(b, sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    out += s;
  }
  void put_value(const GgufValue& v) {
    switch (v.type) {
      case GgufType::UINT8: put<uint8_t>(static_cast<uint8_t>(v.u)); break;
      case GgufType::INT8: put<int8_t>(static_cast<int8_t>(v.i)); break;
      case GgufType::UINT16: put<uint16_t>(static_cast<uint16_t>(v.u)); break;
      case GgufType::INT16: put<int16_t>(static_cast<int16_t>(v.i)); break;
      case GgufType::UINT32: put<uint32_t>(static_cast<uint32_t>(v.u)); break;
      case GgufType::INT32: put<int32_t>(static_cast<int32_t>(v.i)); break;
      case GgufType::UINT64: put<uint64_t>(v.u); break;
      case GgufType::INT64: put<int64_t>(v.i); break;
      case GgufType::FLOAT32: put<float>(static_cast<float>(v.f)); break;
      case GgufType::FLOAT64: put<double>(v.f); break;
      case GgufType::BOOL: put<uint8_t>(v.b ? 1 : 0); break;
      case GgufType::STRING: put_string(v.s); break;
      case GgufType::ARRAY:
        put<uint32_t>(static_cast<uint32_t>(v.elem_type));
        put<uint64_t>(v.arr.size());
        for (const GgufValue& e : v.arr) put_value(e);
        break;
    }
  }
};

}  // namespace

GgufWriter::GgufWriter(const std::string& path) : path_(path) {
  file_ = std::fopen(path.c_str(), "wb");
  if (!file_) throw Error(path + ": cannot create: " + std::strerror(errno));
  struct stat st {};
  remove_on_failure_ = ::fstat(fileno(file_), &st) == 0 && S_ISREG(st.st_mode);
  std::setvbuf(file_, nullptr, _IOFBF, size_t{1} << 20);
}

GgufWriter::~GgufWriter() {
  if (file_) std::fclose(file_);
  if (!finished_ && remove_on_failure_) std::remove(path_.c_str());
}

void GgufWriter::set(const std::string& key, GgufValue value) {
  if (header_written_) throw Error(path_ + ": GGUF writer: metadata key '" + key + "' set after the header was written");
  if (key.empty()) throw Error(path_ + ": GGUF writer: empty metadata key");
  check_value(key, value, value.type, 0);
  if (key == "general.alignment") {
    if (value.type != GgufType::UINT32)
      throw Error(path_ + ": general.alignment must be a uint32, is " + gguf_type_name(value.type));
    if (value.u == 0 || (value.u & (value.u - 1)) != 0)
      throw Error(path_ + ": general.alignment " + std::to_string(value.u) + " is not a nonzero power of two");
    alignment_ = value.u;
  }
  for (auto& [k, v] : kv_)
    if (k == key) {
      v = std::move(value);
      return;
    }
  kv_.emplace_back(key, std::move(value));
}

void GgufWriter::add_tensor(const std::string& name, DType type, std::vector<int64_t> shape) {
  const std::string where = path_ + ": GGUF writer: tensor '" + name + "': ";
  if (header_written_) throw Error(where + "declared after the header was written");
  if (name.empty()) throw Error(path_ + ": GGUF writer: empty tensor name");
  if (tensor_index_.count(name)) throw Error(where + "declared twice");
  if (shape.empty() || shape.size() > 4)
    throw Error(where + std::to_string(shape.size()) + " dimensions, must be 1..4");
  const TypeInfo& ti = type_info(type);
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 1) throw Error(where + "dimension " + std::to_string(d) + " must be at least 1");
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n) ||
        n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw Error(where + "element count overflows");
  }
  if (shape[0] % ti.block_size != 0)
    throw Error(where + "innermost dimension " + std::to_string(shape[0]) + " is not a multiple of " + ti.name +
                "'s block size " + std::to_string(ti.block_size));
  GgufTensorInfo t;
  t.name = name;
  t.type = type;
  t.shape = std::move(shape);
  if (__builtin_mul_overflow(n / static_cast<uint64_t>(ti.block_size), static_cast<uint64_t>(ti.type_size), &t.nbytes))
    throw Error(where + "byte size overflows");
  tensor_index_.emplace(name, tensors_.size());
  tensors_.push_back(std::move(t));
}

void GgufWriter::write_bytes(const void* p, size_t n) {
  if (!file_) throw Error(path_ + ": GGUF writer: write after the file was closed");
  if (n == 0) return;
  if (std::fwrite(p, 1, n, file_) != n)
    throw Error(path_ + ": write failed after " + std::to_string(pos_) + " bytes: " + std::strerror(errno) +
                " (is the disk full?)");
  pos_ += n;
}

void GgufWriter::pad_to(uint64_t pos) {
  static const char zeros[256] = {};
  while (pos_ < pos) write_bytes(zeros, static_cast<size_t>(std::min<uint64_t>(sizeof zeros, pos - pos_)));
}

void GgufWriter::write_header() {
  if (header_written_) throw Error(path_ + ": GGUF writer: header written twice");
  uint64_t off = 0;
  for (GgufTensorInfo& t : tensors_) {
    t.offset = off;
    off = align_up(off + t.nbytes, alignment_);
  }
  Encoder e;
  e.out.append("GGUF", 4);
  e.put<uint32_t>(kWriteVersion);
  e.put<uint64_t>(tensors_.size());
  e.put<uint64_t>(kv_.size());
  for (const auto& [k, v] : kv_) {
    e.put_string(k);
    e.put<uint32_t>(static_cast<uint32_t>(v.type));
    e.put_value(v);
  }
  for (const GgufTensorInfo& t : tensors_) {
    e.put_string(t.name);
    e.put<uint32_t>(static_cast<uint32_t>(t.shape.size()));
    for (int64_t d : t.shape) e.put<uint64_t>(static_cast<uint64_t>(d));
    e.put<uint32_t>(static_cast<uint32_t>(t.type));
    e.put<uint64_t>(t.offset);
  }
  header_written_ = true;
  write_bytes(e.out.data(), e.out.size());
  pad_to(align_up(pos_, alignment_));
}

void GgufWriter::write_tensor_data(const void* data, size_t nbytes) {
  if (!header_written_) write_header();
  const auto* p = static_cast<const uint8_t*>(data);
  while (nbytes > 0) {
    if (current_ >= tensors_.size())
      throw Error(path_ + ": GGUF writer: " + std::to_string(nbytes) + " bytes written past the last declared tensor");
    const GgufTensorInfo& t = tensors_[current_];
    const uint64_t take = std::min<uint64_t>(nbytes, t.nbytes - current_written_);
    write_bytes(p, static_cast<size_t>(take));
    p += take;
    nbytes -= static_cast<size_t>(take);
    current_written_ += take;
    if (current_written_ == t.nbytes) {
      pad_to(align_up(pos_, alignment_));  // the next tensor starts aligned
      ++current_;
      current_written_ = 0;
    }
  }
}

void GgufWriter::finish() {
  if (finished_) return;
  if (!header_written_) write_header();
  if (current_ < tensors_.size()) {
    const GgufTensorInfo& t = tensors_[current_];
    throw Error(path_ + ": GGUF writer: tensor '" + t.name + "' has " + std::to_string(current_written_) + " of " +
                std::to_string(t.nbytes) + " bytes written (" + std::to_string(tensors_.size() - current_) +
                " tensor(s) incomplete)");
  }
  const bool flush_failed = std::fflush(file_) != 0 || std::ferror(file_);
  const int flush_errno = errno;
  const bool close_failed = std::fclose(file_) != 0;
  const int close_errno = errno;
  file_ = nullptr;
  if (flush_failed || close_failed)
    throw Error(path_ + ": write failed: " + std::strerror(flush_failed ? flush_errno : close_errno) +
                " (is the disk full?)");
  finished_ = true;
}

}  // namespace ms
