// libFuzzer target for the GGUF reader: any input must either parse into a
// file whose every field can be used safely, or be rejected with ms::Error.
// Anything else (a crash, a sanitizer report, another exception) is a bug.
// Run with scripts/fuzz.sh; seeds are in fuzz/corpus/.
#include <cstddef>
#include <cstdint>

#include "format/gguf.h"
#include "util/error.h"

namespace {

// Uses a value the way inspect and the loaders do: display text and every
// typed accessor (each may refuse with ms::Error, never crash).
uint64_t touch_value(const std::string& key, const ms::GgufValue& v) {
  uint64_t h = v.to_display(8).size();
  try { h += static_cast<uint64_t>(v.as_int(key)); } catch (const ms::Error&) {}
  try { h += v.as_uint(key); } catch (const ms::Error&) {}
  try { h += static_cast<uint64_t>(v.as_float(key) != 0); } catch (const ms::Error&) {}
  try { h += v.as_string(key).size(); } catch (const ms::Error&) {}
  try { h += v.as_bool(key); } catch (const ms::Error&) {}
  for (const ms::GgufValue& e : v.arr) h += touch_value(key, e);
  return h;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto f = ms::GgufFile::from_memory(data, size, "fuzz");
    volatile uint64_t sink = f->version() + f->alignment() + f->data_offset();
    for (const auto& [key, value] : f->metadata()) {
      sink = sink + touch_value(key, value);
      sink = sink + (f->find(key) == &value);
      try { sink = sink + static_cast<uint64_t>(f->get_int(key, 0)); } catch (const ms::Error&) {}
      try { sink = sink + f->get_string(key, "").size(); } catch (const ms::Error&) {}
    }
    for (const ms::GgufTensorInfo& t : f->tensors()) {
      // First and last byte of every tensor: out-of-range data is an ASan report.
      sink = sink + t.data[0] + t.data[t.nbytes - 1];
      sink = sink + static_cast<uint64_t>(t.n_elements()) + static_cast<uint64_t>(t.n_rows()) + t.row_nbytes();
      sink = sink + (f->find_tensor(t.name) == &t);
    }
    (void)sink;
  } catch (const ms::Error&) {
    // Rejected cleanly: the expected outcome for most inputs.
  }
  return 0;
}
