// ExpertCopier: an expert's three parts land at their slot offsets, from the
// pinned copy (one DMA per expert, padding zeroed) and through the staging
// ring (one DMA per part and chunk), with odd part sizes; the CPU's view of
// the pinned copy holds the same bytes as the mapping. Skips without a device.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "cuda/expert_copier.h"
#include "cuda_test_util.h"

namespace ms::cuda::test {
namespace {

struct Fixture {
  std::vector<uint8_t> host;  // stands for the mapped file: parts scattered in it
  std::vector<ExpertSource> experts;
};

// n experts with parts of odd sizes placed out of order in one buffer.
Fixture make_experts(int n, uint64_t gate, uint64_t up, uint64_t down) {
  Fixture f;
  const uint64_t sizes[3] = {gate, up, down};
  const uint64_t per = gate + up + down + 3 * 7;
  f.host.resize(per * static_cast<uint64_t>(n));
  std::mt19937 rng(3);
  for (auto& b : f.host) b = static_cast<uint8_t>(rng());
  auto align = [](uint64_t v) { return (v + 255) & ~uint64_t(255); };
  for (int i = 0; i < n; ++i) {
    ExpertSource x;
    // Reverse expert order in the "file", parts down, up, gate.
    uint64_t at = per * static_cast<uint64_t>(n - 1 - i);
    for (int p = 2; p >= 0; --p) {
      x.part[p] = f.host.data() + at;
      x.bytes[p] = sizes[p];
      at += sizes[p] + 7;
    }
    x.offset[0] = 0;
    x.offset[1] = align(gate);
    x.offset[2] = x.offset[1] + align(up);
    x.slot_bytes = x.offset[2] + align(down);
    f.experts.push_back(x);
  }
  return f;
}

void expect_copies(HostPin pin, const char* what) {
  const Fixture f = make_experts(5, 1000, 3333, 70001);
  const uint64_t slot = f.experts[0].slot_bytes;
  ExpertCopier copier(f.experts, pin, nullptr, /*staging_chunk=*/1 << 20, /*staging_buffers=*/2);
  DeviceBuffer dev(slot * 5);
  MS_CUDA_CHECK(cudaMemset(dev.get(), 0xAB, slot * 5));
  MS_CUDA_CHECK(cudaDeviceSynchronize());  // the copy stream does not wait for the legacy stream's memset
  for (size_t i = 0; i < 5; ++i) copier.copy_expert(4 - i, static_cast<char*>(dev.get()) + slot * i);
  MS_CUDA_CHECK(cudaStreamSynchronize(copier.stream()));
  const std::vector<uint8_t> got = download<uint8_t>(dev.get(), slot * 5);
  for (size_t i = 0; i < 5; ++i) {
    const ExpertSource& x = f.experts[4 - i];
    for (int p = 0; p < 3; ++p) {
      EXPECT_EQ(std::memcmp(got.data() + slot * i + x.offset[p], x.part[p], x.bytes[p]), 0)
          << what << ": slot " << i << " part " << p;
      const auto* view = static_cast<const uint8_t*>(copier.host_part(4 - i, p));
      EXPECT_EQ(std::memcmp(view, x.part[p], x.bytes[p]), 0) << what << ": host view of part " << p;
    }
    if (copier.copied())  // the slot image's padding travels too, as zeros
      EXPECT_EQ(got[slot * i + x.offset[0] + x.bytes[0]], 0) << what;
  }
}

TEST(ExpertCopier, PinnedCopyPutsEveryPartAtItsSlotOffset) {
  MS_REQUIRE_GPU();
  expect_copies(HostPin::Copy, "copy");
}

TEST(ExpertCopier, StagingRingPutsEveryPartAtItsSlotOffset) {
  MS_REQUIRE_GPU();
  expect_copies(HostPin::Staging, "staging");
}

TEST(ExpertCopier, APartLargerThanItsSlotIsRefused) {
  MS_REQUIRE_GPU();
  Fixture f = make_experts(1, 100, 100, 100);
  f.experts[0].bytes[2] = f.experts[0].slot_bytes;  // down would overrun the slot
  EXPECT_THROW(ExpertCopier(f.experts, HostPin::Staging), Error);
}

}  // namespace
}  // namespace ms::cuda::test
