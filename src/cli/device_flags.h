// `--devices LIST` and the per-device form of `--vram` (issue #45): the
// GPUs a command may use and each one's budget. Parsed into typed values
// here, with errors that name the flag; the planner (experts/
// device_placement.h) takes them. Execution on several GPUs is not built:
// run, serve, bench and logits take one device (check_device_count).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ms::cli {

// The most devices --devices takes, and the largest device number.
constexpr size_t kMaxDevices = 16;
constexpr int kMaxDeviceId = 63;

// "0,1,3": distinct device numbers 0..kMaxDeviceId, in the order given.
// Throws ms::Error naming --devices: empty items, not a number, negative or
// too large, duplicates, more than kMaxDevices.
std::vector<int> parse_devices(const std::string& text);

// Whether --vram has the per-device form ("0:12G", "0:12G,1:20G").
bool is_per_device_vram(const std::string& text);

// --vram for the devices of --devices, one budget each in their order:
// "12G" (each device), "0:12G,1:20G" (every listed device once, and only
// those). Throws ms::Error naming --vram: a bad size, a device not in
// --devices, a device missing or given twice, the two forms mixed, "full"
// or "" (a plan needs a budget per device).
std::vector<uint64_t> parse_device_vram(const std::string& text, const std::vector<int>& devices);

// The one device run, serve, bench and logits execute on: the first of
// --devices (0 when none given). More than one is an error: multi-GPU
// execution is not built yet; it says what is (inspect and sim --devices).
int check_device_count(const std::vector<int>& devices);

}  // namespace ms::cli
