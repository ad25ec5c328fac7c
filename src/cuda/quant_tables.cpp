// Registry of the per-file IQ table uploaders (see quant_tables.h).
#include "cuda/quant_tables.h"

#include <mutex>
#include <vector>

namespace ms::cuda {
namespace {
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::vector<detail::TableUploader>& registry() {
  static std::vector<detail::TableUploader> r;  // filled by static initialisers of the kernel files
  return r;
}
}  // namespace

bool detail::register_table_uploader(TableUploader up) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry().push_back(up);
  return true;
}

void prepare_quant_tables() {
  std::vector<detail::TableUploader> ups;
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    ups = registry();
  }
  for (auto up : ups) up();
}

}  // namespace ms::cuda
