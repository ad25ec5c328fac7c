// Several GPUs of one host as one pool of expert memory (issue #45): where
// every tensor of a MoE model lives and where every routed expert runs, for
// a list of devices with their own budgets, links and kernel rates. Pure
// policy, no CUDA: `moestream inspect --devices` prints a plan and
// `moestream sim --devices` replays a trace over it (engine/sim_devices.h).
//
// The plan:
//   - Every layer's dense part (attention, norms, router, shared experts,
//     dense FFN, its KV cache) lives on one device, its owner; owners take
//     contiguous layer ranges in device order. The token embedding goes with
//     the first layer, the output head with the last. Ranges are balanced by
//     bytes: the split minimises the largest load (a device's dense bytes,
//     reserve and its layers' experts over its budget); among equal loads,
//     the slowest device's dense time per token.
//   - Each routed expert then has one home: resident on its layer's owner,
//     resident on a peer device (the hidden state goes there and the result
//     comes back: the expert is computed where it lives, never copied), or
//     in host RAM, either streamed over the owner's link each use or
//     computed by the CPU, whichever the rates make cheaper.
//   - Resident homes are chosen greedily by time saved per token per byte
//     (popularity x (cold cost - resident cost) / bytes), hottest first, each
//     on the device where it saves the most while that device has room.
//
// Cost model (per decode token, one sequence): the sum of each piece's time
// -- dense weights read from the owner's memory, each routed expert in its
// tier, the hidden state handed from one owner to the next and to peers and
// back, the output head. The pieces are added, not overlapped (the devices,
// the links and the CPU could work at once in an engine that pipelines
// them): the figure is an upper bound for such an engine and what the
// placement minimises. Being a sum, its expectation over the popularity is
// exact, so a replay of a trace whose routes follow that popularity agrees
// with it (engine/sim_devices.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "experts/cost_model.h"

namespace ms {

// The most devices a plan takes (8 GPUs of one host, with room to spare).
constexpr size_t kMaxPlacementDevices = 16;

struct PlacementLayer {
  uint64_t dense_bytes = 0;   // weights read for every token: attention, norms, router, shared experts, dense FFN
  uint64_t kv_bytes = 0;      // its KV cache (or recurrent state): held by the owner, not read in full per token
  uint32_t n_expert = 0;      // routed experts (0: a dense layer)
  uint64_t expert_bytes = 0;  // one routed expert (gate + up + down)
};

struct PlacementModel {
  std::vector<PlacementLayer> layers;
  uint32_t k = 0;                 // experts each token chooses per MoE layer
  uint64_t embed_bytes = 0;       // token embedding: on the first layer's owner (a row read per token)
  uint64_t head_bytes = 0;        // output norm and head: on the last layer's owner (read per token)
  uint64_t reserve_bytes = 0;     // on every device: CUDA context, activations, workspaces
  uint64_t hidden_bytes = 8192;   // one token's hidden state, as sent to another device
};

struct PlacementDevice {
  int id = 0;              // the CUDA device number (--devices)
  uint64_t budget = 0;     // bytes this plan may use on it
  double link_gbps = 25;   // host -> device copies (its PCIe link)
  double hbm_gbps = 900;   // its kernels' read rate (a decode token is memory bound)
};

struct PlacementRates {
  // Device-to-device GB/s, [from][to] by index into the device list; empty:
  // peer_gbps for every pair.
  std::vector<std::vector<double>> peer_matrix;
  double peer_gbps = 25;
  double peer_latency_us = 10;  // per transfer between devices
  // The CPU's figures (cpu_gbps, cpu_overhead_us) and the per-expert
  // overheads of copies and GPU launches (copy_overhead_us, gpu_overhead_us).
  // Its pcie_gbps and gpu_hbm_gbps are not used: each device has its own.
  CostModel cost;
  // Throws ms::Error naming a non-positive or non-finite figure, or a
  // matrix that is not n x n.
  void validate(size_t n_devices) const;
  double peer(size_t from, size_t to) const;
};

// Where a routed expert lives and runs.
enum class ExpertHome : uint8_t { Owner, Peer, Stream, Cpu };
const char* expert_home_name(ExpertHome h);  // "owner", "peer", "stream", "cpu"

struct ExpertPlace {
  ExpertHome home = ExpertHome::Cpu;
  int8_t device = -1;  // index into the device list (Owner: the layer's owner; Peer: the host device); -1 otherwise
};

// Per-use times of every tier, from the model, the devices and the rates:
// what the planner ranks and the replay adds (one definition for both).
class PlacementCosts {
 public:
  PlacementCosts(const PlacementModel& model, const std::vector<PlacementDevice>& devices, const PlacementRates& rates);
  // Dense weights of layer l read on device d, per token.
  double dense_s(uint32_t l, size_t d) const;
  // One use of an expert of layer l resident on device d (its owner).
  double owner_s(uint32_t l, size_t d) const;
  // One use of an expert of layer l (owned by `owner`) resident on `host`:
  // the hidden state there and the result back, and the kernel on `host`.
  double peer_s(uint32_t l, size_t owner, size_t host) const;
  // One use streamed over the owner's link into a transit slot, then computed there.
  double stream_s(uint32_t l, size_t owner) const;
  // One use computed by the CPU from host RAM.
  double cpu_s(uint32_t l) const;
  // The hidden state of one token from device a to device b (0 when a == b).
  double handoff_s(size_t a, size_t b) const;
  // The output head on device d, per token.
  double head_s(size_t d) const;
  // The cheaper of stream and CPU for a cold expert of layer l (ties: the
  // CPU, which moves nothing over the link).
  ExpertHome cold_home(uint32_t l, size_t owner) const;
  double cold_s(uint32_t l, size_t owner) const;
  // One use of an expert placed at `p` in layer l owned by `owner`.
  double use_s(uint32_t l, size_t owner, const ExpertPlace& p) const;

 private:
  const PlacementModel& model_;
  const std::vector<PlacementDevice>& devices_;
  const PlacementRates& rates_;
};

struct DevicePlan {
  int id = 0;
  uint32_t first_layer = 0, end_layer = 0;  // owns layers [first_layer, end_layer) (empty when equal)
  uint64_t budget = 0;
  uint64_t fixed_bytes = 0;        // reserve + dense weights + KV of its layers (+ embedding / head)
  uint64_t own_expert_bytes = 0;   // its layers' experts resident on it
  uint64_t hosted_expert_bytes = 0;  // other devices' experts resident on it (the peer tier)
  uint32_t n_own = 0, n_hosted = 0;  // those experts' counts
  uint32_t n_stream = 0, n_cpu = 0;  // its layers' experts in host RAM, by tier
  uint64_t used_bytes() const { return fixed_bytes + own_expert_bytes + hosted_expert_bytes; }
  bool owns(uint32_t l) const { return l >= first_layer && l < end_layer; }
};

// The predicted time of one decode token, by piece (seconds).
struct PlacementCost {
  double dense_s = 0, owner_s = 0, peer_s = 0, stream_s = 0, cpu_s = 0, handoff_s = 0, head_s = 0;
  double link_bytes = 0;  // expected host -> device bytes per token (streamed experts)
  double peer_bytes = 0;  // expected device -> device bytes per token (hand-offs and peer experts)
  double total_s() const { return dense_s + owner_s + peer_s + stream_s + cpu_s + handoff_s + head_s; }
};

struct DevicePlacement {
  std::vector<DevicePlan> devices;              // in the order given
  std::vector<uint32_t> owner;                  // per layer: index into devices
  std::vector<std::vector<ExpertPlace>> experts;  // [layer][expert]
  PlacementCost cost;                           // predicted, per decode token
};

// Expected uses per decode token of each expert, [layer][expert] (each MoE
// layer's row sums to k). Empty rows or an empty table: uniform, k / n_expert.
using ExpertPopularity = std::vector<std::vector<double>>;
ExpertPopularity uniform_popularity(const PlacementModel& model);

// The plan. Deterministic: the same inputs give the same plan on any
// machine (ties broken by layer, expert, device index). Throws ms::Error
// when the devices are not 1..kMaxPlacementDevices with distinct ids and
// positive budgets, when the popularity does not match the model, and when
// the dense part does not fit: the message gives, for the split that comes
// closest, what each device would need against its budget.
DevicePlacement plan_device_placement(const PlacementModel& model, const std::vector<PlacementDevice>& devices,
                                      const PlacementRates& rates, const ExpertPopularity& popularity = {});

// The expected per-token cost of a placement under a popularity (the sum
// plan_device_placement reports; also for a placement evaluated under a
// popularity other than the one it was planned for).
PlacementCost placement_cost(const PlacementModel& model, const std::vector<PlacementDevice>& devices,
                             const PlacementRates& rates, const DevicePlacement& plan,
                             const ExpertPopularity& popularity = {});

// A table of the plan: one line per device (layers, bytes against budget,
// experts by tier) and the predicted cost per token by piece.
std::string describe_placement(const DevicePlacement& plan);

}  // namespace ms
