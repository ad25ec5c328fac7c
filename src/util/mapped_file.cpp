#include "util/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/error.h"

namespace ms {
namespace {

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "a device";
}

}  // namespace

MappedFile::MappedFile(const std::string& path) : path_(path) {
  if (path.empty()) throw Error("cannot open a file with an empty path");
  // Only a regular file can be mapped. Checked before open(): opening a FIFO
  // for reading blocks until a writer comes (forever, for a command that was
  // given one by mistake). O_NONBLOCK closes the gap between stat and open
  // (a regular file ignores it); the fstat below decides.
  struct stat pre {};
  if (::stat(path.c_str(), &pre) == 0 && !S_ISREG(pre.st_mode))
    throw Error(path + ": not a regular file (" + file_kind(pre.st_mode) + ")");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(path + ": cannot stat: " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path + ": not a regular file (" + file_kind(st.st_mode) + ")");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw Error(path + ": cannot map " + std::to_string(size_) + " bytes: " + std::strerror(err));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace ms
