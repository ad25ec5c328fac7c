// Builds GGUF files byte by byte, independently of GgufWriter, so tests can
// check the writer against the format and hand the reader malformed files.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace ms::test {

struct GgufBytes {
  std::vector<uint8_t> b;

  template <typename T>
  GgufBytes& put(T v) {
    uint8_t tmp[sizeof(T)];
    std::memcpy(tmp, &v, sizeof(T));
    b.insert(b.end(), tmp, tmp + sizeof(T));
    return *this;
  }
  GgufBytes& u8(uint8_t v) { return put(v); }
  GgufBytes& u32(uint32_t v) { return put(v); }
  GgufBytes& u64(uint64_t v) { return put(v); }
  GgufBytes& raw(const std::string& s) {
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  GgufBytes& str(const std::string& s) { return u64(s.size()).raw(s); }

  // "GGUF" | version | n_tensors | n_kv
  GgufBytes& header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    return raw("GGUF").u32(version).u64(n_tensors).u64(n_kv);
  }
  GgufBytes& kv_u32(const std::string& key, uint32_t v) { return str(key).u32(4).u32(v); }
  GgufBytes& kv_str(const std::string& key, const std::string& v) { return str(key).u32(8).str(v); }
  GgufBytes& tensor_info(const std::string& name, const std::vector<uint64_t>& dims, uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) u64(d);
    return u32(type).u64(offset);
  }
  GgufBytes& pad(uint64_t align) {
    while (b.size() % align) b.push_back(0);
    return *this;
  }
  GgufBytes& fill(size_t n, uint8_t v = 0) {
    b.insert(b.end(), n, v);
    return *this;
  }
  size_t size() const { return b.size(); }
};

}  // namespace ms::test
