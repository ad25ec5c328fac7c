// The multi-device placement planner (experts/device_placement.h, issue
// #45): for 1 to 8 devices with uneven budgets, every tensor is placed
// once, no budget is exceeded and the plan is deterministic; a dense part
// too big is an error naming each device's need; the hottest experts are
// the resident ones; peers host experts only where that beats host RAM.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "experts/device_placement.h"
#include "util/error.h"

namespace ms {
namespace {

constexpr uint64_t MiB = 1ull << 20;

// A model of n layers (the first `dense_first` without experts), experts of
// varying sizes per layer, embedding and head apart.
PlacementModel make_model(uint32_t n, uint32_t n_expert, uint32_t k, uint32_t dense_first, std::mt19937& rng) {
  PlacementModel m;
  m.k = k;
  m.embed_bytes = 3 * MiB;
  m.head_bytes = 5 * MiB;
  m.reserve_bytes = 7 * MiB;
  m.hidden_bytes = 4096;
  for (uint32_t l = 0; l < n; ++l) {
    PlacementLayer L;
    L.dense_bytes = (4 + rng() % 8) * MiB;
    L.kv_bytes = (1 + rng() % 3) * MiB;
    if (l >= dense_first) L.n_expert = n_expert, L.expert_bytes = (1 + rng() % 3) * MiB + rng() % 4096;
    m.layers.push_back(L);
  }
  return m;
}

// Zipf-like uses per token over a random permutation, k per layer.
ExpertPopularity skewed(const PlacementModel& m, std::mt19937& rng) {
  ExpertPopularity pop(m.layers.size());
  for (size_t l = 0; l < m.layers.size(); ++l) {
    const uint32_t ne = m.layers[l].n_expert;
    if (ne == 0) continue;
    std::vector<double> w(ne);
    double sum = 0;
    for (uint32_t e = 0; e < ne; ++e) sum += w[e] = 1.0 / (1 + e);
    std::shuffle(w.begin(), w.end(), rng);
    for (double& v : w) v *= m.k / sum;
    pop[l] = w;
  }
  return pop;
}

uint64_t layer_expert_bytes(const PlacementModel& m) {
  uint64_t b = 0;
  for (const PlacementLayer& L : m.layers) b += uint64_t(L.n_expert) * L.expert_bytes;
  return b;
}

// Checks the plan from its tables alone (not from the counters it reports).
void check_plan(const PlacementModel& m, const std::vector<PlacementDevice>& devs, const DevicePlacement& p,
                const std::string& ctx) {
  const size_t n = m.layers.size(), D = devs.size();
  ASSERT_EQ(p.devices.size(), D) << ctx;
  ASSERT_EQ(p.owner.size(), n) << ctx;
  ASSERT_EQ(p.experts.size(), n) << ctx;
  // Ranges: contiguous, in device order, covering every layer once.
  uint32_t next = 0;
  for (size_t d = 0; d < D; ++d) {
    EXPECT_EQ(p.devices[d].id, devs[d].id) << ctx;
    EXPECT_EQ(p.devices[d].first_layer, next) << ctx << " device index " << d;
    EXPECT_GE(p.devices[d].end_layer, p.devices[d].first_layer) << ctx;
    for (uint32_t l = p.devices[d].first_layer; l < p.devices[d].end_layer; ++l) EXPECT_EQ(p.owner[l], d) << ctx;
    next = p.devices[d].end_layer;
  }
  EXPECT_EQ(next, n) << ctx;
  // Bytes per device, recomputed: reserve, its layers' dense and KV, the
  // embedding with layer 0, the head with the last layer, resident experts.
  std::vector<uint64_t> used(D, m.reserve_bytes);
  used[p.owner[0]] += m.embed_bytes;
  used[p.owner[n - 1]] += m.head_bytes;
  uint64_t placed_experts = 0;
  for (size_t l = 0; l < n; ++l) {
    used[p.owner[l]] += m.layers[l].dense_bytes + m.layers[l].kv_bytes;
    ASSERT_EQ(p.experts[l].size(), m.layers[l].n_expert) << ctx << " layer " << l;
    for (const ExpertPlace& e : p.experts[l]) {
      ++placed_experts;  // one entry, one home: each expert exactly once
      switch (e.home) {
        case ExpertHome::Owner:
          EXPECT_EQ(size_t(e.device), p.owner[l]) << ctx;
          used[size_t(e.device)] += m.layers[l].expert_bytes;
          break;
        case ExpertHome::Peer:
          ASSERT_GE(e.device, 0) << ctx;
          ASSERT_LT(size_t(e.device), D) << ctx;
          EXPECT_NE(size_t(e.device), p.owner[l]) << ctx;
          used[size_t(e.device)] += m.layers[l].expert_bytes;
          break;
        case ExpertHome::Stream:
        case ExpertHome::Cpu: EXPECT_EQ(e.device, -1) << ctx; break;
      }
    }
  }
  uint64_t n_expert = 0;
  for (const PlacementLayer& L : m.layers) n_expert += L.n_expert;
  EXPECT_EQ(placed_experts, n_expert) << ctx;
  for (size_t d = 0; d < D; ++d) {
    EXPECT_LE(used[d], devs[d].budget) << ctx << " device " << devs[d].id;
    EXPECT_EQ(used[d], p.devices[d].used_bytes()) << ctx << " device " << devs[d].id << ": counters disagree";
  }
}

bool same_plan(const DevicePlacement& a, const DevicePlacement& b) {
  if (a.owner != b.owner || a.devices.size() != b.devices.size() || a.cost.total_s() != b.cost.total_s()) return false;
  for (size_t l = 0; l < a.experts.size(); ++l)
    for (size_t e = 0; e < a.experts[l].size(); ++e)
      if (a.experts[l][e].home != b.experts[l][e].home || a.experts[l][e].device != b.experts[l][e].device) return false;
  return true;
}

TEST(DevicePlacement, OneToEightDevicesUnevenBudgets) {
  std::mt19937 rng(45);
  int with_peers = 0, with_cold = 0;
  for (uint32_t D = 1; D <= 8; ++D)
    for (uint32_t n : {3u, 12u, 24u}) {
      const PlacementModel m = make_model(n, 16, 4, n > 3 ? 1 : 0, rng);
      uint64_t fixed = 0;
      for (const PlacementLayer& L : m.layers) fixed += L.dense_bytes + L.kv_bytes;
      fixed += m.embed_bytes + m.head_bytes;
      // Budgets from 0.6x to 2.2x an even share of everything: some tight, some roomy.
      const uint64_t share = (fixed + layer_expert_bytes(m)) / D + m.reserve_bytes;
      std::vector<PlacementDevice> devs;
      for (uint32_t d = 0; d < D; ++d) {
        PlacementDevice dev;
        dev.id = int(7 - d);  // ids need not be 0..D-1 nor ascending
        dev.budget = std::max<uint64_t>(share * (6 + rng() % 17) / 10, fixed + m.reserve_bytes + 32 * MiB);
        dev.link_gbps = 10 + rng() % 30;
        dev.hbm_gbps = 500 + rng() % 2000;
        devs.push_back(dev);
      }
      if (D > 1) devs[1].budget = devs[0].budget / 2 + fixed;  // clearly uneven
      PlacementRates rates;
      rates.peer_gbps = 50;
      const ExpertPopularity pop = skewed(m, rng);
      const std::string ctx = std::to_string(D) + " devices, " + std::to_string(n) + " layers";
      const DevicePlacement p = plan_device_placement(m, devs, rates, pop);
      check_plan(m, devs, p, ctx);
      // Deterministic: the same inputs, the same plan.
      EXPECT_TRUE(same_plan(p, plan_device_placement(m, devs, rates, pop))) << ctx;
      // Its reported cost is the cost of its placement.
      EXPECT_DOUBLE_EQ(p.cost.total_s(), placement_cost(m, devs, rates, p, pop).total_s()) << ctx;
      for (const auto& layer : p.experts)
        for (const ExpertPlace& e : layer) {
          with_peers += e.home == ExpertHome::Peer;
          with_cold += e.home == ExpertHome::Cpu || e.home == ExpertHome::Stream;
        }
    }
  // The cases reach every kind of home (else the checks above check little).
  EXPECT_GT(with_peers, 0);
  EXPECT_GT(with_cold, 0);
}

TEST(DevicePlacement, MoreDevicesThanLayers) {
  std::mt19937 rng(7);
  const PlacementModel m = make_model(2, 8, 2, 0, rng);
  std::vector<PlacementDevice> devs;
  for (int d = 0; d < 5; ++d) devs.push_back({.id = d, .budget = 200 * MiB});
  const DevicePlacement p = plan_device_placement(m, devs, {});
  check_plan(m, devs, p, "5 devices, 2 layers");
}

TEST(DevicePlacement, DenseTooBigSaysWhatEachDeviceNeeds) {
  std::mt19937 rng(3);
  const PlacementModel m = make_model(8, 16, 4, 0, rng);
  std::vector<PlacementDevice> devs = {{.id = 0, .budget = 20 * MiB}, {.id = 1, .budget = 30 * MiB}};
  try {
    plan_device_placement(m, devs, {});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string w = e.what();
    for (const char* s : {"does not fit", "device 0", "device 1", "short by", "layers"})
      EXPECT_NE(w.find(s), std::string::npos) << s << ": " << w;
  }
  // One layer's dense part alone larger than every budget: no split fits.
  PlacementModel big = m;
  big.layers[3].dense_bytes = 100 * MiB;
  devs = {{.id = 0, .budget = 90 * MiB}, {.id = 1, .budget = 90 * MiB}, {.id = 2, .budget = 90 * MiB}};
  EXPECT_THROW(plan_device_placement(big, devs, {}), Error);
  // The same with one device large enough: it fits, and that device owns layer 3.
  devs[2].budget = 200 * MiB;
  const DevicePlacement p = plan_device_placement(big, devs, {});
  check_plan(big, devs, p, "one large device");
  EXPECT_EQ(p.owner[3], 2u);
}

TEST(DevicePlacement, ResidentsAreTheHottest) {
  // One device, equal layers and expert sizes: the residents are the most
  // used experts of the whole model, whatever their layer.
  PlacementModel m;
  m.k = 2;
  for (int l = 0; l < 4; ++l) m.layers.push_back({.dense_bytes = MiB, .kv_bytes = 0, .n_expert = 8, .expert_bytes = MiB});
  std::mt19937 rng(11);
  const ExpertPopularity pop = skewed(m, rng);
  const std::vector<PlacementDevice> devs = {{.id = 0, .budget = 4 * MiB + 10 * MiB + MiB / 2}};
  const DevicePlacement p = plan_device_placement(m, devs, {}, pop);
  double coldest_resident = 1e9, hottest_cold = 0;
  int residents = 0;
  for (size_t l = 0; l < 4; ++l)
    for (size_t e = 0; e < 8; ++e) {
      if (p.experts[l][e].home == ExpertHome::Owner) coldest_resident = std::min(coldest_resident, pop[l][e]), ++residents;
      else hottest_cold = std::max(hottest_cold, pop[l][e]);
    }
  EXPECT_EQ(residents, 10);
  EXPECT_GE(coldest_resident, hottest_cold);
}

TEST(DevicePlacement, PeersHostOnlyWhereThatBeatsHostRam) {
  // Two layers on a small device; a second device with room: the owner's
  // overflow goes to the peer when the peer link is fast, to host RAM when
  // it is slow.
  PlacementModel m;
  m.k = 4;
  m.hidden_bytes = 8192;
  for (int l = 0; l < 2; ++l) m.layers.push_back({.dense_bytes = 4 * MiB, .kv_bytes = 0, .n_expert = 32, .expert_bytes = 2 * MiB});
  // Device 0 must own both layers (device 1 is too small for a layer's dense part + reserve).
  m.reserve_bytes = 20 * MiB;
  const std::vector<PlacementDevice> devs = {{.id = 0, .budget = 60 * MiB}, {.id = 1, .budget = 23 * MiB}};
  PlacementRates fast, slow;
  fast.peer_gbps = 100;
  slow.peer_gbps = 0.001;
  const DevicePlacement pf = plan_device_placement(m, devs, fast);
  const DevicePlacement ps = plan_device_placement(m, devs, slow);
  check_plan(m, devs, pf, "fast peers");
  check_plan(m, devs, ps, "slow peers");
  EXPECT_EQ(pf.owner, (std::vector<uint32_t>{0, 0}));
  EXPECT_EQ(pf.devices[1].n_hosted, 1u);  // 3 MiB of room: one 2 MiB expert
  EXPECT_EQ(ps.devices[1].n_hosted, 0u);
  EXPECT_LT(pf.cost.total_s(), ps.cost.total_s());
  EXPECT_GT(pf.cost.peer_bytes, 0);
}

TEST(DevicePlacement, ColdExpertsTakeTheCheaperOfLinkAndCpu) {
  PlacementModel m;
  m.k = 1;
  m.layers.push_back({.dense_bytes = MiB, .kv_bytes = 0, .n_expert = 4, .expert_bytes = 8 * MiB});
  std::vector<PlacementDevice> devs = {{.id = 0, .budget = 2 * MiB, .link_gbps = 1000}};
  PlacementRates r;
  r.cost.cpu_gbps = 1;
  DevicePlacement p = plan_device_placement(m, devs, r);
  for (const ExpertPlace& e : p.experts[0]) EXPECT_EQ(e.home, ExpertHome::Stream);
  EXPECT_GT(p.cost.link_bytes, 0);
  devs[0].link_gbps = 1;
  r.cost.cpu_gbps = 1000;
  p = plan_device_placement(m, devs, r);
  for (const ExpertPlace& e : p.experts[0]) EXPECT_EQ(e.home, ExpertHome::Cpu);
  EXPECT_EQ(p.cost.link_bytes, 0);
}

TEST(DevicePlacement, BadInputsAreErrors) {
  std::mt19937 rng(5);
  const PlacementModel m = make_model(4, 8, 2, 0, rng);
  const PlacementDevice ok{.id = 0, .budget = 1ull << 34};
  auto fails = [&](const std::vector<PlacementDevice>& d, const ExpertPopularity& pop, const char* want) {
    try {
      plan_device_placement(m, d, {}, pop);
      ADD_FAILURE() << want << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  fails({}, {}, "1 to 16");
  fails(std::vector<PlacementDevice>(17, ok), {}, "1 to 16");
  fails({ok, ok}, {}, "listed twice");
  fails({{.id = 0, .budget = 0}}, {}, "budget must be positive");
  fails({{.id = 0, .budget = 1ull << 34, .link_gbps = 0}}, {}, "link_gbps");
  fails({ok}, ExpertPopularity(3), "popularity for 3 layers");
  ExpertPopularity neg = uniform_popularity(m);
  neg[1][2] = -1;
  fails({ok}, neg, "finite and >= 0");
  ExpertPopularity short_row = uniform_popularity(m);
  short_row[0].pop_back();
  fails({ok}, short_row, "7 experts");
}

}  // namespace
}  // namespace ms
