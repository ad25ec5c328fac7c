// How streamed experts reach the GPU (`--host-pin`; cuda/expert_copier.h
// says what each way costs), in a header without CUDA so that the CLI parses
// the name once, on any build, and the backend takes the typed value.
#pragma once
#include <string>

#include "util/error.h"

namespace ms::cuda {

// Auto: Copy when the experts take at most half the available RAM, else Staging.
enum class HostPin { Auto, Copy, Register, Staging };

inline const char* host_pin_name(HostPin p) {
  switch (p) {
    case HostPin::Auto: return "auto";
    case HostPin::Copy: return "copy";
    case HostPin::Register: return "register";
    case HostPin::Staging: return "staging";
  }
  return "?";
}

// "auto" | "copy" | "register" | "staging"; throws ms::Error naming them.
inline HostPin parse_host_pin(const std::string& s) {
  for (HostPin p : {HostPin::Auto, HostPin::Copy, HostPin::Register, HostPin::Staging})
    if (s == host_pin_name(p)) return p;
  throw Error("host pin mode '" + s + "': expected auto, copy, register or staging");
}

}  // namespace ms::cuda
