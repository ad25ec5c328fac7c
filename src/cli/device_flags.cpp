#include "cli/device_flags.h"

#include <algorithm>
#include <cctype>

#include "util/bytes.h"
#include "util/error.h"
#include "util/split.h"

namespace ms::cli {
namespace {

// A device number: digits only, 0..kMaxDeviceId. `flag` and `whole` name the
// option and its value in the error.
int parse_device_id(const std::string& item, const std::string& flag, const std::string& whole) {
  const bool digits = !item.empty() && item.size() <= 4 &&
                      std::all_of(item.begin(), item.end(), [](unsigned char ch) { return std::isdigit(ch); });
  if (!digits || std::stoi(item) > kMaxDeviceId)
    throw Error(flag + " " + whole + ": '" + item + "' is not a device number (0.." + std::to_string(kMaxDeviceId) +
                "); use e.g. --devices 0,1");
  return std::stoi(item);
}

uint64_t parse_budget(const std::string& size, const std::string& whole) {
  if (size == "full" || size == "auto" || size.empty())
    throw Error("--vram " + whole + ": several devices take a size for each (e.g. 12G, or 0:12G,1:20G), not '" +
                size + "'");
  uint64_t b = 0;
  try {
    b = parse_bytes(size);
  } catch (const Error& e) {
    throw Error("--vram " + whole + ": '" + size + "' is not a size (" + e.what() + "); use e.g. 12G or 0:12G,1:20G");
  }
  if (b == 0) throw Error("--vram " + whole + ": a budget must be positive");
  return b;
}

}  // namespace

std::vector<int> parse_devices(const std::string& text) {
  if (text.empty()) throw Error("--devices: give device numbers, e.g. --devices 0,1");
  std::vector<int> ids;
  for (const std::string& item : split_list(text)) {
    const int id = parse_device_id(item, "--devices", text);
    if (std::find(ids.begin(), ids.end(), id) != ids.end())
      throw Error("--devices " + text + ": device " + item + " is listed twice");
    ids.push_back(id);
  }
  if (ids.size() > kMaxDevices)
    throw Error("--devices " + text + ": at most " + std::to_string(kMaxDevices) + " devices");
  return ids;
}

bool is_per_device_vram(const std::string& text) { return text.find(':') != std::string::npos; }

std::vector<uint64_t> parse_device_vram(const std::string& text, const std::vector<int>& devices) {
  if (devices.empty()) throw Error("--vram " + text + ": no devices (give --devices)");
  if (!is_per_device_vram(text)) return std::vector<uint64_t>(devices.size(), parse_budget(text, text));
  std::vector<uint64_t> budget(devices.size(), 0);
  for (const std::string& item : split_list(text)) {
    const size_t colon = item.find(':');
    if (colon == std::string::npos)
      throw Error("--vram " + text + ": '" + item + "' names no device; give every item as DEVICE:SIZE (0:12G,1:20G) "
                  "or one size for each device (12G)");
    const int id = parse_device_id(item.substr(0, colon), "--vram", text);
    const auto at = std::find(devices.begin(), devices.end(), id);
    if (at == devices.end())
      throw Error("--vram " + text + ": device " + std::to_string(id) + " is not in --devices");
    uint64_t& b = budget[size_t(at - devices.begin())];
    if (b != 0) throw Error("--vram " + text + ": device " + std::to_string(id) + " is given twice");
    b = parse_budget(item.substr(colon + 1), text);
  }
  for (size_t i = 0; i < devices.size(); ++i)
    if (budget[i] == 0)
      throw Error("--vram " + text + ": no budget for device " + std::to_string(devices[i]) +
                  " (give one for every device of --devices)");
  return budget;
}

int check_device_count(const std::vector<int>& devices) {
  if (devices.size() > 1)
    throw Error("--devices: " + std::to_string(devices.size()) +
                " devices given, but multi-GPU execution is not built yet (issue #45): this build runs a model on one "
                "GPU (e.g. --devices " + std::to_string(devices[0]) +
                "). `moestream inspect MODEL --devices LIST --vram ...` prints the placement several GPUs would take, "
                "and `moestream sim --trace FILE --devices N` replays a trace over it");
  return devices.empty() ? 0 : devices[0];
}

}  // namespace ms::cli
