// Device plumbing: queries, arenas (alignment, overflow message), buffers,
// streams/events, pinned memory, and the error-check macro.
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "util/error.h"

namespace ms::cuda::test {
namespace {

TEST(CudaDevice, CountNeverThrows) {
  std::string why;
  const int n = device_count(&why);
  EXPECT_GE(n, 0);
  if (n == 0) EXPECT_FALSE(why.empty());
}

TEST(CudaDevice, InfoDescribesTheDevice) {
  MS_REQUIRE_GPU();
  const DeviceInfo info = device_info(0);
  EXPECT_FALSE(info.name.empty());
  EXPECT_GT(info.sm_count, 0);
  EXPECT_GT(info.total_bytes, 0u);
  EXPECT_GT(info.free_bytes, 0u);
  EXPECT_GE(info.cc_major, 7);
  const std::string d = describe(info);
  EXPECT_NE(d.find(info.name), std::string::npos);
  std::printf("[ device   ] %s\n", d.c_str());
}

TEST(CudaDevice, ArenaAlignsAndReportsOverflow) {
  MS_REQUIRE_GPU();
  DeviceArena a("weights", 1 << 20);
  EXPECT_EQ(a.capacity(), size_t{1} << 20);
  void* p1 = a.alloc(10);
  void* p2 = a.alloc(10, 4096);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p1) % 256, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p2) % 4096, 0u);
  EXPECT_GE(static_cast<char*>(p2) - static_cast<char*>(p1), 10);
  // the memory is usable
  MS_CUDA_CHECK(cudaMemset(p2, 0, 10));
  const size_t m = a.mark();
  float* f = a.alloc_n<float>(1000);
  EXPECT_NE(f, nullptr);
  a.rewind(m);
  EXPECT_EQ(a.used(), m);
  try {
    a.alloc(2 << 20);
    FAIL() << "overflow did not throw";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("arena 'weights'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("asked 2.0 MiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("left of 1.0 MiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("GPU has"), std::string::npos) << msg;
  }
  EXPECT_THROW(a.alloc(16, 24), Error);  // not a power of two
  EXPECT_THROW(a.rewind(a.used() + 1), Error);
  a.reset();
  EXPECT_EQ(a.used(), 0u);
  DeviceArena moved = std::move(a);
  EXPECT_EQ(moved.capacity(), size_t{1} << 20);
  EXPECT_EQ(a.capacity(), 0u);
}

TEST(CudaDevice, HugeArenaFailsWithAClearMessage) {
  MS_REQUIRE_GPU();
  try {
    DeviceArena a("kv cache", size_t{1} << 50);  // 1 PiB
    FAIL() << "a 1 PiB arena was allocated";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("arena 'kv cache'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("asked"), std::string::npos) << msg;
    EXPECT_NE(msg.find("free"), std::string::npos) << msg;
  }
  // the failure left no sticky error behind
  DeviceBuffer ok(1024);
  MS_CUDA_CHECK(cudaMemset(ok.get(), 0, 1024));
  MS_CUDA_CHECK(cudaDeviceSynchronize());
}

TEST(CudaDevice, CheckMacroNamesFileAndError) {
  MS_REQUIRE_GPU();
  try {
    MS_CUDA_CHECK(cudaSetDevice(12345));  // an invalid device: a host-side, non-sticky error
    FAIL() << "bad device id did not throw";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("device_test.cpp:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cudaSetDevice(12345)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cudaError"), std::string::npos) << msg;
  }
  cudaGetLastError();
}

TEST(CudaDevice, StreamsEventsAndPinnedCopies) {
  MS_REQUIRE_GPU();
  Stream s;
  Event start, stop;
  PinnedBuffer host(1 << 20);
  ASSERT_NE(host.get(), nullptr);
  for (size_t i = 0; i < (1 << 20); ++i) host.as<uint8_t>()[i] = static_cast<uint8_t>(i * 7);
  DeviceBuffer dev(1 << 20);
  start.record(s);
  MS_CUDA_CHECK(cudaMemcpyAsync(dev.get(), host.get(), 1 << 20, cudaMemcpyHostToDevice, s));
  stop.record(s);
  stop.synchronize();
  EXPECT_TRUE(stop.done());
  EXPECT_GE(stop.ms_since(start), 0.f);
  PinnedBuffer back(1 << 20);
  MS_CUDA_CHECK(cudaMemcpy(back.get(), dev.get(), 1 << 20, cudaMemcpyDeviceToHost));
  EXPECT_EQ(std::memcmp(back.get(), host.get(), 1 << 20), 0);
  Stream other;
  Event ordering(false);
  ordering.record(s);
  ordering.wait_on(other);
  other.synchronize();
}

}  // namespace
}  // namespace ms::cuda::test
