// A read-only memory mapping of a whole file (RAII). Empty files map to a
// null pointer with size 0.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace ms {

class MappedFile {
 public:
  // Throws ms::Error naming the path and the OS error, or saying the path is
  // not a regular file (a FIFO is refused without blocking in open()).
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ms
