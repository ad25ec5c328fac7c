#include "engine/loaded_model.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "cpu/thread_pool.h"
#include "engine/synthetic_model.h"
#include "util/error.h"

namespace ms {

LoadedModel::~LoadedModel() {
  if (ram_) ::munmap(ram_, ram_bytes_);
}

std::unique_ptr<LoadedModel> LoadedModel::open(const std::string& path, bool to_ram) {
  auto m = std::make_unique<LoadedModel>();
  m->file = GgufFile::open(path);
  const uint8_t* data = nullptr;
  if (to_ram) {
    const size_t n = static_cast<size_t>(m->file->file_size() - m->file->data_offset());
    void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      throw Error(path + ": cannot allocate " + std::to_string(n >> 20) + " MiB to load the weights into RAM; "
                  "run without --no-mmap");
    ::madvise(p, n, MADV_HUGEPAGE);  // a hint: ignored where THP is off
    m->ram_ = p;
    m->ram_bytes_ = n;
    const uint8_t* src = m->file->base() + m->file->data_offset();
    // Copying in parallel: one thread's copy runs far below the memory's
    // bandwidth (bench/results/cpu_kernels.md, "What the numbers say").
    ThreadPool pool;
    const int64_t chunk = int64_t{64} << 20;
    pool.parallel_for((static_cast<int64_t>(n) + chunk - 1) / chunk, 1, [&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e; ++c) {
        const size_t off = static_cast<size_t>(c * chunk);
        std::memcpy(static_cast<uint8_t*>(p) + off, src + off, std::min<size_t>(static_cast<size_t>(chunk), n - off));
      }
    });
    data = static_cast<const uint8_t*>(p);
  }
  m->weights = bind_weights(*m->file, data);
  m->tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_gguf(*m->file));
  if (m->tokenizer->n_tokens() > m->weights.cfg.n_vocab)
    throw Error(path + ": the tokenizer has " + std::to_string(m->tokenizer->n_tokens()) +
                " tokens but token_embd only " + std::to_string(m->weights.cfg.n_vocab) + " rows");
  return m;
}

namespace {

std::filesystem::path exe_dir() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::current_path() : p.parent_path();
}

bool writable_dir(const std::filesystem::path& d) {
  std::error_code ec;
  std::filesystem::create_directories(d, ec);
  return ::access(d.c_str(), W_OK) == 0;
}

}  // namespace

std::string default_model_path(bool* generated) {
  if (generated) *generated = false;
  if (const char* env = std::getenv("MOESTREAM_DEFAULT_MODEL"); env && *env) return env;
  const char* name = "tiny.gguf";
  std::vector<std::filesystem::path> dirs = {exe_dir()};
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) dirs.push_back(std::filesystem::path(x) / "moestream");
  if (const char* h = std::getenv("HOME"); h && *h) dirs.push_back(std::filesystem::path(h) / ".cache" / "moestream");
  dirs.push_back(std::filesystem::temp_directory_path() / "moestream");
  for (const auto& d : dirs)
    if (std::filesystem::exists(d / name)) return (d / name).string();
  for (const auto& d : dirs) {
    if (!writable_dir(d)) continue;
    const auto path = d / name;
    const auto tmp = d / ("tiny.gguf.tmp" + std::to_string(::getpid()));
    ThreadPool pool;
    GenOptions opt;  // the defaults are the built-in model: tiny qwen3moe, q4_k_m, seed 1
    generate_model(opt, tmp.string(), pool);
    std::filesystem::rename(tmp, path);  // atomic: a concurrent run sees all or nothing
    if (generated) *generated = true;
    return path.string();
  }
  throw Error("no default model: cannot write tiny.gguf next to the executable or in a cache directory; "
              "generate one with `moestream gen --preset tiny -o tiny.gguf` and pass -m tiny.gguf");
}

}  // namespace ms
