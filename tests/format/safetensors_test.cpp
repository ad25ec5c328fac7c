#include "format/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "quant/half.h"
#include "util/error.h"

namespace ms {
namespace {

namespace fs = std::filesystem;

struct Entry { std::string name, dtype; std::vector<int64_t> shape; std::vector<uint8_t> bytes; };

void write_st(const fs::path& path, const std::vector<Entry>& entries, const std::string& header_override = "") {
  nlohmann::json h = nlohmann::json::object();
  h["__metadata__"] = {{"format", "pt"}};
  uint64_t off = 0;
  for (const auto& e : entries) {
    h[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {off, off + e.bytes.size()}}};
    off += e.bytes.size();
  }
  const std::string hs = header_override.empty() ? h.dump() : header_override;
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = hs.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(hs.data(), static_cast<std::streamsize>(hs.size()));
  for (const auto& e : entries) out.write(reinterpret_cast<const char*>(e.bytes.data()), static_cast<std::streamsize>(e.bytes.size()));
}

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ms_st_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                                        "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(SafetensorsTest, ReadsTensorsAndConvertsToFloat) {
  std::vector<uint8_t> bf(4);
  const uint16_t a = f32_to_bf16(1.5f), b = f32_to_bf16(-2.0f);
  std::memcpy(bf.data(), &a, 2);
  std::memcpy(bf.data() + 2, &b, 2);
  write_st(dir_ / "model.safetensors", {{"w", "F32", {2, 3}, f32_bytes({1, 2, 3, 4, 5, 6})}, {"b", "BF16", {2}, bf}});
  SafetensorsModel m(dir_.string());
  EXPECT_EQ(m.names(), (std::vector<std::string>{"b", "w"}));
  const StTensor& w = m.get("w");
  EXPECT_EQ(w.shape, (std::vector<int64_t>{2, 3}));
  std::vector<float> f(6);
  w.to_f32(f.data());
  EXPECT_EQ(f[5], 6.0f);
  std::vector<float> g(2);
  m.get("b").to_f32(g.data());
  EXPECT_EQ(g[0], 1.5f);
  EXPECT_EQ(g[1], -2.0f);
  EXPECT_THROW(m.get("missing"), Error);
}

TEST_F(SafetensorsTest, ReadsShardedCheckpoints) {
  write_st(dir_ / "a.safetensors", {{"x", "F32", {1}, f32_bytes({7})}});
  write_st(dir_ / "b.safetensors", {{"y", "F32", {1}, f32_bytes({8})}});
  std::ofstream(dir_ / "model.safetensors.index.json")
      << R"({"metadata":{},"weight_map":{"x":"a.safetensors","y":"b.safetensors"}})";
  SafetensorsModel m(dir_.string());
  float v;
  m.get("y").to_f32(&v);
  EXPECT_EQ(v, 8.0f);
  EXPECT_EQ(m.total_bytes(), 8u);
}

TEST_F(SafetensorsTest, MissingShardIsAClearError) {
  write_st(dir_ / "a.safetensors", {{"x", "F32", {1}, f32_bytes({7})}});
  std::ofstream(dir_ / "model.safetensors.index.json")
      << R"({"weight_map":{"x":"a.safetensors","y":"b.safetensors"}})";
  try {
    SafetensorsModel m(dir_.string());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("b.safetensors"), std::string::npos) << e.what();
  }
}

TEST_F(SafetensorsTest, RejectsBadFiles) {
  const auto expect_error = [&](const std::string& header, const std::string& needle) {
    write_st(dir_ / "bad.safetensors", {{"w", "F32", {2}, f32_bytes({1, 2})}}, header);
    try {
      SafetensorsFile f((dir_ / "bad.safetensors").string());
      FAIL() << "accepted: " << header;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", "need");
  expect_error(R"({"w":{"dtype":"Q9","shape":[2],"data_offsets":[0,8]}})", "unknown dtype");
  expect_error(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,800]}})", "outside");
  expect_error(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", "negative");
  expect_error(R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})", "overflow");
  expect_error(R"({"w": 3})", "needs dtype");
  expect_error(R"(not json)", "JSON");
  expect_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", "overlap");
  // Header length past the end of the file.
  std::ofstream(dir_ / "short.safetensors", std::ios::binary) << std::string("\xff\xff\x00\x00\x00\x00\x00\x00{}", 10);
  EXPECT_THROW(SafetensorsFile((dir_ / "short.safetensors").string()), Error);
  EXPECT_THROW(SafetensorsModel((dir_ / "nowhere").string()), Error);
}

}  // namespace
}  // namespace ms
