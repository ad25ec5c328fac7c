// The corrupt-weights scan behind `moestream inspect --check` and the type
// table of `inspect`: every quant type's scale fields lie inside its block, a
// clean file passes, and a NaN or Inf planted in a scale field (d, dmin, IQ1_M's
// packed scale, MXFP4's exponent) or in a float tensor is found with the
// tensor's name and the block's index.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <random>

#include "format/gguf.h"
#include "model/weight_check.h"
#include "util/error.h"

namespace ms {
namespace {

namespace fs = std::filesystem;

TEST(WeightCheck, ScaleFieldsLieInsideTheirBlock) {
  int with_fields = 0;
  for (uint32_t id = 0; id < 64; ++id) {
    const TypeInfo* ti = type_info(id);
    if (!ti) continue;
    for (const ScaleField& f : scale_fields(ti->type)) {
      const int width = f.kind == ScaleKind::F32 ? 4 : f.kind == ScaleKind::E8M0 ? 1 : f.kind == ScaleKind::F16 ? 2 : 8;
      EXPECT_LE(f.offset + width, ti->type_size) << ti->name << " field " << f.name;
      ++with_fields;
    }
  }
  EXPECT_GE(with_fields, 20);
  // Every block type moestream knows has a scale to check (float/int types are scanned whole or skipped).
  for (DType t : {DType::Q4_0, DType::Q8_0, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K,
                  DType::IQ1_M, DType::IQ4_XS, DType::TQ1_0, DType::MXFP4})
    EXPECT_FALSE(scale_fields(t).empty()) << type_name(t);
}

class WeightCheckFile : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (fs::temp_directory_path() / ("ms_wcheck_" + std::to_string(::getpid()) + "_" +
                                          ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".gguf"))
                .string();
  }
  void TearDown() override { fs::remove(path_); }

 public:
  struct Spec {
    std::string name;
    DType type;
    std::vector<int64_t> shape;
  };
  // Random bytes with every scale field set to a finite value (1.0 or its
  // format's equivalent), float tensors to finite values; then `poison`.

 protected:
  std::unique_ptr<GgufFile> write(const std::vector<Spec>& specs,
                                  const std::function<void(const Spec&, std::vector<uint8_t>&)>& poison = {}) {
    std::mt19937 rng(7);
    GgufWriter w(path_);
    w.set("general.architecture", GgufValue::of_string("qwen3moe"));
    for (const Spec& s : specs) w.add_tensor(s.name, s.type, s.shape);
    for (const Spec& s : specs) {
      const TypeInfo& ti = type_info(s.type);
      int64_t n = 1;
      for (int64_t d : s.shape) n *= d;
      std::vector<uint8_t> bytes(static_cast<size_t>(n / ti.block_size * ti.type_size));
      for (auto& b : bytes) b = static_cast<uint8_t>(rng());
      if (s.type == DType::F32) {
        for (size_t i = 0; i < bytes.size(); i += 4) {
          const float v = static_cast<float>(rng() % 1000) / 100.0f - 5.0f;
          std::memcpy(&bytes[i], &v, 4);
        }
      } else if (s.type == DType::F16 || s.type == DType::BF16) {
        for (size_t i = 0; i < bytes.size(); i += 2) bytes[i + 1] &= 0x3F;  // exponent never all ones
      }
      for (size_t b = 0; b < bytes.size(); b += static_cast<size_t>(ti.type_size))
        for (const ScaleField& f : scale_fields(s.type)) {
          uint8_t* p = &bytes[b + static_cast<size_t>(f.offset)];
          if (f.kind == ScaleKind::F16) p[0] = 0x00, p[1] = 0x3C;                        // 1.0
          if (f.kind == ScaleKind::F32) p[0] = p[1] = 0, p[2] = 0x80, p[3] = 0x3F;     // 1.0f
          if (f.kind == ScaleKind::E8M0) p[0] = 127;                                  // 2^0
          if (f.kind == ScaleKind::IQ1M_PACKED) for (int k = 1; k < 8; k += 2) p[k] &= 0x0F;  // scale 0
        }
      if (poison) poison(s, bytes);
      w.write_tensor_data(bytes.data(), bytes.size());
    }
    w.finish();
    return GgufFile::open(path_);
  }
  std::string path_;
};

const std::vector<std::pair<std::string, DType>> kTypes = {
    {"a.q4_K", DType::Q4_K}, {"b.q8_0", DType::Q8_0}, {"c.q6_K", DType::Q6_K}, {"d.iq1_m", DType::IQ1_M},
    {"e.mxfp4", DType::MXFP4}, {"f.f16", DType::F16}, {"g.f32", DType::F32}, {"h.q2_K", DType::Q2_K},
    {"i.bf16", DType::BF16}, {"j.i32", DType::I32}};

std::vector<WeightCheckFile::Spec> all_types() {
  std::vector<WeightCheckFile::Spec> s;
  for (const auto& [name, t] : kTypes) s.push_back({name, t, {256, 3}});
  return s;
}

TEST_F(WeightCheckFile, CleanFilePasses) {
  auto f = write(all_types());
  int calls = 0;
  uint64_t last = 0, total = 0;
  const WeightCheck r = check_weights(*f, [&](uint64_t done, uint64_t all) {
    ++calls;
    last = done;
    total = all;
  });
  EXPECT_TRUE(r.bad.empty()) << r.bad[0].describe();
  EXPECT_EQ(r.tensors_scanned, static_cast<int>(kTypes.size()));
  ASSERT_EQ(r.skipped.size(), 1u);
  EXPECT_EQ(r.skipped[0], "j.i32");
  EXPECT_GE(calls, 1);
  EXPECT_EQ(last, total);
  EXPECT_EQ(r.bytes_scanned, total);
}

// A NaN or Inf planted in block 2 of each type is found there, by name.
TEST_F(WeightCheckFile, FindsThePlantedValueInEveryType) {
  for (const auto& [name, type] : kTypes) {
    if (type == DType::I32) continue;
    const TypeInfo& ti = type_info(type);
    for (bool inf : {false, true}) {
      if (inf && type == DType::MXFP4) continue;  // E8M0 has no Inf
      auto f = write(all_types(), [&](const Spec& s, std::vector<uint8_t>& bytes) {
        if (s.name != name) return;
        const std::vector<ScaleField> fields = scale_fields(type);
        const size_t block = 2;
        if (fields.empty()) {  // a float tensor: element 2
          const size_t at = block * static_cast<size_t>(ti.type_size);
          if (type == DType::F32) bytes[at + 3] = 0x7F, bytes[at + 2] = inf ? 0x80 : 0xC0, bytes[at + 1] = 0, bytes[at] = 0;
          else if (type == DType::F16) bytes[at + 1] = 0x7C, bytes[at] = inf ? 0 : 1;
          else bytes[at + 1] = 0x7F, bytes[at] = inf ? 0x80 : 0xC1;  // bf16
          return;
        }
        const ScaleField& sf = fields.back();  // dmin where there is one
        uint8_t* p = &bytes[block * static_cast<size_t>(ti.type_size) + static_cast<size_t>(sf.offset)];
        if (sf.kind == ScaleKind::F16) p[0] = inf ? 0 : 1, p[1] = 0x7C;
        else if (sf.kind == ScaleKind::E8M0) p[0] = 0xFF;
        else if (sf.kind == ScaleKind::IQ1M_PACKED) p[7] = 0x70 | (p[7] & 0x0F), p[5] |= 0xC0, p[1] = (p[1] & 0x0F) | (inf ? 0 : 0x10);
      });
      const WeightCheck r = check_weights(*f);
      ASSERT_EQ(r.bad.size(), 1u) << name << (inf ? " inf" : " nan");
      EXPECT_EQ(r.bad[0].tensor, name);
      EXPECT_EQ(r.bad[0].block, 2u) << name;
      EXPECT_EQ(r.bad[0].nan, !inf) << name;
      const std::string d = r.bad[0].describe();
      EXPECT_NE(d.find("tensor '" + name + "' (" + std::string(ti.name) + ")"), std::string::npos) << d;
      EXPECT_NE(d.find(inf ? "is Inf" : "is NaN"), std::string::npos) << d;
    }
  }
}

TEST_F(WeightCheckFile, StopsAfterMaxBad) {
  auto f = write(all_types(), [](const Spec& s, std::vector<uint8_t>& bytes) {
    if (s.type == DType::Q8_0 || s.type == DType::Q4_K) bytes[1] = 0x7E;  // block 0's d: NaN
  });
  EXPECT_EQ(check_weights(*f).bad.size(), 2u);
  const WeightCheck one = check_weights(*f, {}, 1);
  ASSERT_EQ(one.bad.size(), 1u);
  EXPECT_EQ(one.bad[0].tensor, "a.q4_K");  // the first in file order
  EXPECT_EQ(one.bad[0].field, "d");
  EXPECT_TRUE(one.stopped_early);
}

TEST_F(WeightCheckFile, BytesByType) {
  auto f = write({{"x", DType::Q8_0, {64, 2}}, {"y", DType::F32, {8}}, {"z", DType::Q8_0, {32, 1}}, {"w", DType::IQ1_M, {256}}});
  const std::vector<TypeBytes> t = bytes_by_type(*f);
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].type, DType::F32);
  EXPECT_EQ(t[0].bytes, 32u);
  EXPECT_EQ(t[1].type, DType::Q8_0);
  EXPECT_EQ(t[1].n_tensors, 2);
  EXPECT_EQ(t[1].bytes, 34u * 5);
  EXPECT_EQ(t[2].type, DType::IQ1_M);
  EXPECT_EQ(t[2].bytes, static_cast<uint64_t>(type_info(DType::IQ1_M).type_size));
  EXPECT_EQ(t[2].computable, type_info(DType::IQ1_M).computable);
}

}  // namespace
}  // namespace ms
