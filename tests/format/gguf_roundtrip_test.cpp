// GgufWriter -> GgufFile round trips, the writer's exact bytes, and its errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include "format/gguf.h"
#include "format/gguf_bytes.h"
#include "util/error.h"

namespace ms {
namespace {

namespace fs = std::filesystem;

class GgufFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ms_gguf_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

std::vector<uint8_t> read_all(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& x : v) x = static_cast<uint8_t>(rng());
  return v;
}

GgufValue scalar(GgufType t, int64_t i, uint64_t u = 0, double f = 0) {
  GgufValue v;
  v.type = t;
  v.i = i;
  v.u = u;
  v.f = f;
  return v;
}

// Deep comparison of what the reader gives back with what was written.
void expect_same(const GgufValue& a, const GgufValue& b, const std::string& where) {
  ASSERT_EQ(a.type, b.type) << where;
  switch (a.type) {
    case GgufType::UINT8:
    case GgufType::UINT16:
    case GgufType::UINT32:
    case GgufType::UINT64: EXPECT_EQ(a.u, b.u) << where; break;
    case GgufType::INT8:
    case GgufType::INT16:
    case GgufType::INT32:
    case GgufType::INT64: EXPECT_EQ(a.i, b.i) << where; break;
    case GgufType::FLOAT32:
    case GgufType::FLOAT64:
      if (std::isnan(a.f)) EXPECT_TRUE(std::isnan(b.f)) << where;
      else EXPECT_EQ(a.f, b.f) << where;
      break;
    case GgufType::BOOL: EXPECT_EQ(a.b, b.b) << where; break;
    case GgufType::STRING: EXPECT_EQ(a.s, b.s) << where; break;
    case GgufType::ARRAY:
      ASSERT_EQ(a.elem_type, b.elem_type) << where;
      ASSERT_EQ(a.arr.size(), b.arr.size()) << where;
      for (size_t k = 0; k < a.arr.size(); ++k) expect_same(a.arr[k], b.arr[k], where + "[" + std::to_string(k) + "]");
      break;
  }
}

// Every metadata type, with the edge values of each.
std::vector<std::pair<std::string, GgufValue>> every_kind_of_value() {
  std::vector<std::pair<std::string, GgufValue>> kv;
  kv.emplace_back("general.architecture", GgufValue::of_string("test"));
  kv.emplace_back("t.u8", scalar(GgufType::UINT8, 0, 255));
  kv.emplace_back("t.i8", scalar(GgufType::INT8, -128));
  kv.emplace_back("t.u16", scalar(GgufType::UINT16, 0, 65535));
  kv.emplace_back("t.i16", scalar(GgufType::INT16, -32768));
  kv.emplace_back("t.u32", GgufValue::of_u32(0xFFFFFFFFu));
  kv.emplace_back("t.i32", GgufValue::of_i32(std::numeric_limits<int32_t>::min()));
  kv.emplace_back("t.u64", GgufValue::of_u64(std::numeric_limits<uint64_t>::max()));
  kv.emplace_back("t.i64", GgufValue::of_i64(std::numeric_limits<int64_t>::min()));
  kv.emplace_back("t.f32", GgufValue::of_f32(-1.5e-7f));
  kv.emplace_back("t.f32_inf", GgufValue::of_f32(std::numeric_limits<float>::infinity()));
  kv.emplace_back("t.f32_nan", GgufValue::of_f32(std::numeric_limits<float>::quiet_NaN()));
  kv.emplace_back("t.f64", GgufValue::of_f64(3.141592653589793));
  kv.emplace_back("t.true", GgufValue::of_bool(true));
  kv.emplace_back("t.false", GgufValue::of_bool(false));
  kv.emplace_back("t.empty_string", GgufValue::of_string(""));
  kv.emplace_back("t.unicode", GgufValue::of_string("héllo wörld — 你好 🦙"));
  kv.emplace_back("t.embedded_nul", GgufValue::of_string(std::string("a\0b", 3)));
  kv.emplace_back("t.empty_u8s", GgufValue::of_array(GgufType::UINT8, {}));
  kv.emplace_back("t.empty_strings", GgufValue::of_strings({}));
  kv.emplace_back("t.strings", GgufValue::of_strings({"", "a", "ĠHello", "<|im_end|>"}));
  kv.emplace_back("t.f32s", GgufValue::of_f32s({0.0f, -0.0f, 1e30f}));
  kv.emplace_back("t.i32s", GgufValue::of_i32s({1, -2, 3}));
  kv.emplace_back("t.bools", GgufValue::of_array(GgufType::BOOL, {GgufValue::of_bool(true), GgufValue::of_bool(false)}));
  kv.emplace_back("t.u16s", GgufValue::of_array(GgufType::UINT16, {scalar(GgufType::UINT16, 0, 7)}));
  kv.emplace_back("t.nested",
                  GgufValue::of_array(GgufType::ARRAY, {GgufValue::of_i32s({1, 2}), GgufValue::of_i32s({}),
                                                        GgufValue::of_i32s({3})}));
  kv.emplace_back("t.nested_strings", GgufValue::of_array(GgufType::ARRAY, {GgufValue::of_strings({"x", ""}),
                                                                          GgufValue::of_strings({"y"})}));
  kv.emplace_back("t.empty_of_arrays", GgufValue::of_array(GgufType::ARRAY, {}));
  // Nested as deep as the reader allows.
  GgufValue deep = GgufValue::of_i32s({42});
  for (int d = 1; d < kGgufMaxArrayDepth; ++d) deep = GgufValue::of_array(GgufType::ARRAY, {deep});
  kv.emplace_back("t.deep", deep);
  return kv;
}

struct TensorSpec {
  std::string name;
  DType type;
  std::vector<int64_t> shape;
};

const std::vector<TensorSpec> kTensors = {
    {"token_embd.weight", DType::F16, {64, 5}},
    {"blk.0.attn_norm.weight", DType::F32, {7}},          // odd byte count: padding follows
    {"blk.0.ffn_up_exps.weight", DType::Q8_0, {64, 3, 4}},
    {"blk.0.ffn_down_exps.weight", DType::Q4_K, {256, 2, 2, 1}},
    {"output.weight", DType::BF16, {3, 1}},
};

std::vector<std::vector<uint8_t>> write_file(const std::string& p, const std::vector<std::pair<std::string, GgufValue>>& kv,
                                             const std::vector<TensorSpec>& tensors, size_t chunk) {
  GgufWriter w(p);
  for (const auto& [k, v] : kv) w.set(k, v);
  std::vector<std::vector<uint8_t>> data;
  for (const auto& t : tensors) {
    w.add_tensor(t.name, t.type, t.shape);
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    const TypeInfo& ti = type_info(t.type);
    data.push_back(random_bytes(static_cast<size_t>(n / ti.block_size * ti.type_size), static_cast<uint32_t>(data.size())));
  }
  w.write_header();
  for (const auto& d : data)
    for (size_t off = 0; off < d.size(); off += chunk) w.write_tensor_data(d.data() + off, std::min(chunk, d.size() - off));
  w.finish();
  return data;
}

void check_file(const GgufFile& f, const std::vector<std::pair<std::string, GgufValue>>& kv,
                const std::vector<TensorSpec>& tensors, const std::vector<std::vector<uint8_t>>& data) {
  EXPECT_EQ(f.version(), 3u);
  ASSERT_EQ(f.metadata().size(), kv.size());
  for (size_t k = 0; k < kv.size(); ++k) {
    EXPECT_EQ(f.metadata()[k].first, kv[k].first) << "metadata keeps file order";
    expect_same(f.metadata()[k].second, kv[k].second, kv[k].first);
    ASSERT_NE(f.find(kv[k].first), nullptr) << kv[k].first;
  }
  ASSERT_EQ(f.tensors().size(), tensors.size());
  for (size_t k = 0; k < tensors.size(); ++k) {
    const GgufTensorInfo& t = f.tensor(tensors[k].name);
    EXPECT_EQ(&t, &f.tensors()[k]);
    EXPECT_EQ(t.type, tensors[k].type);
    EXPECT_EQ(t.shape, tensors[k].shape);
    ASSERT_EQ(t.nbytes, data[k].size()) << t.name;
    EXPECT_EQ((t.data - f.base()) % f.alignment(), 0u) << t.name << " data is aligned";
    EXPECT_EQ(static_cast<uint64_t>(t.data - f.base()), f.data_offset() + t.offset);
    EXPECT_EQ(std::memcmp(t.data, data[k].data(), data[k].size()), 0) << t.name << " bytes survive";
  }
}

TEST_F(GgufFileTest, RoundTripsEveryValueTypeAndTensorBytes) {
  const auto kv = every_kind_of_value();
  const auto data = write_file(path("a.gguf"), kv, kTensors, 1 << 20);
  auto f = GgufFile::open(path("a.gguf"));
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->data_offset() % 32, 0u);
  EXPECT_EQ(f->file_size(), fs::file_size(path("a.gguf")));
  check_file(*f, kv, kTensors, data);
  // from_memory over the same bytes gives the same result.
  const auto bytes = read_all(path("a.gguf"));
  auto g = GgufFile::from_memory(bytes.data(), bytes.size(), "copy");
  check_file(*g, kv, kTensors, data);
  EXPECT_EQ(g->path(), "copy");
}

TEST_F(GgufFileTest, StreamsDataInOddChunksAcrossTensorBoundaries) {
  const auto kv = every_kind_of_value();
  const auto whole = write_file(path("whole.gguf"), kv, kTensors, 1 << 20);
  const auto chunked = write_file(path("chunked.gguf"), kv, kTensors, 7);
  EXPECT_EQ(read_all(path("whole.gguf")), read_all(path("chunked.gguf")));
  // One call may also span several tensors.
  std::vector<uint8_t> all;
  for (const auto& d : whole) all.insert(all.end(), d.begin(), d.end());
  {
    GgufWriter w(path("one_call.gguf"));
    for (const auto& [k, v] : kv) w.set(k, v);
    for (const auto& t : kTensors) w.add_tensor(t.name, t.type, t.shape);
    w.write_tensor_data(all.data(), all.size());  // writes the header itself
    w.finish();
  }
  EXPECT_EQ(read_all(path("whole.gguf")), read_all(path("one_call.gguf")));
}

class GgufAlignmentTest : public GgufFileTest, public ::testing::WithParamInterface<uint32_t> {};

TEST_P(GgufAlignmentTest, RoundTripsWithAlignment) {
  auto kv = every_kind_of_value();
  kv.emplace_back("general.alignment", GgufValue::of_u32(GetParam()));
  const auto data = write_file(path("a.gguf"), kv, kTensors, 5);
  auto f = GgufFile::open(path("a.gguf"));
  EXPECT_EQ(f->alignment(), GetParam());
  EXPECT_EQ(f->data_offset() % GetParam(), 0u);
  check_file(*f, kv, kTensors, data);
}

INSTANTIATE_TEST_SUITE_P(Alignments, GgufAlignmentTest, ::testing::Values(1u, 2u, 8u, 32u, 64u, 4096u));

TEST_F(GgufFileTest, SetReplacesEarlierValueInPlace) {
  {
    GgufWriter w(path("a.gguf"));
    w.set("a", GgufValue::of_u32(1));
    w.set("b", GgufValue::of_u32(2));
    w.set("a", GgufValue::of_string("again"));
    w.finish();
  }
  auto f = GgufFile::open(path("a.gguf"));
  ASSERT_EQ(f->metadata().size(), 2u);
  EXPECT_EQ(f->metadata()[0].first, "a");
  EXPECT_EQ(f->get_string("a"), "again");
  EXPECT_TRUE(f->tensors().empty());
}

// The writer's bytes match the format as the spec describes it, built here by hand.
TEST_F(GgufFileTest, WriterBytesMatchTheSpec) {
  {
    GgufWriter w(path("a.gguf"));
    w.set("general.alignment", GgufValue::of_u32(16));
    w.set("k", GgufValue::of_array(GgufType::ARRAY, {GgufValue::of_strings({"ab"})}));
    w.add_tensor("t0", DType::F32, {3});
    w.add_tensor("t1", DType::F16, {2, 2});
    const float a[3] = {1, 2, 3};
    const uint16_t b[4] = {1, 2, 3, 4};
    w.write_tensor_data(a, sizeof a);
    w.write_tensor_data(b, sizeof b);
    w.finish();
  }
  test::GgufBytes e;
  e.header(3, 2, 2).kv_u32("general.alignment", 16);
  e.str("k").u32(9).u32(9).u64(1).u32(8).u64(1).str("ab");
  e.tensor_info("t0", {3}, 0, 0).tensor_info("t1", {2, 2}, 1, 16).pad(16);
  for (float x : {1.0f, 2.0f, 3.0f}) e.put(x);
  e.pad(16);
  for (uint16_t x : {1, 2, 3, 4}) e.put(x);
  e.pad(16);
  EXPECT_EQ(read_all(path("a.gguf")), e.b);
}

TEST_F(GgufFileTest, ReadsAHandBuiltVersion2File) {
  // v2 has the same layout as v3 (64-bit counts and lengths).
  test::GgufBytes e;
  e.header(2, 1, 2).kv_str("general.architecture", "llama").kv_u32("llama.block_count", 2);
  e.tensor_info("w", {32, 2}, 8, 0).pad(32);  // q8_0: 2 rows of one 34-byte block
  const auto data = random_bytes(68, 9);
  e.b.insert(e.b.end(), data.begin(), data.end());
  auto f = GgufFile::from_memory(e.b.data(), e.size(), "v2");
  EXPECT_EQ(f->version(), 2u);
  EXPECT_EQ(f->get_string("general.architecture"), "llama");
  EXPECT_EQ(f->get_int("llama.block_count"), 2);
  const GgufTensorInfo& t = f->tensor("w");
  EXPECT_EQ(t.type, DType::Q8_0);
  EXPECT_EQ(t.nbytes, 68u);
  EXPECT_EQ(t.n_elements(), 64);
  EXPECT_EQ(t.n_rows(), 2);
  EXPECT_EQ(t.row_len(), 32);
  EXPECT_EQ(t.row_nbytes(), 34u);
  EXPECT_EQ(std::memcmp(t.data, data.data(), 68), 0);
}

TEST_F(GgufFileTest, TensorsMayBeInAnyOrderInTheDataSection) {
  test::GgufBytes e;
  e.header(3, 2, 0).tensor_info("second", {4}, 0, 32).tensor_info("first", {4}, 0, 0).pad(32);
  e.fill(32, 1).fill(16, 2);
  auto f = GgufFile::from_memory(e.b.data(), e.size());
  EXPECT_EQ(f->tensor("first").data[0], 1);
  EXPECT_EQ(f->tensor("second").data[15], 2);
}

// ---------------------------------------------------------------- typed access

TEST_F(GgufFileTest, TypedGettersConvertAndNameTheKey) {
  {
    GgufWriter w(path("a.gguf"));
    for (const auto& [k, v] : every_kind_of_value()) w.set(k, v);
    w.finish();
  }
  auto f = GgufFile::open(path("a.gguf"));
  EXPECT_EQ(f->get_int("t.u8"), 255);
  EXPECT_EQ(f->get_int("t.i8"), -128);
  EXPECT_EQ(f->get_int("t.u16"), 65535);
  EXPECT_EQ(f->get_int("t.i16"), -32768);
  EXPECT_EQ(f->get_int("t.u32"), 0xFFFFFFFFll);
  EXPECT_EQ(f->get_int("t.i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(f->get_float("t.u32"), 4294967295.0);  // floats accept integers
  EXPECT_EQ(f->get_float("t.i8"), -128.0);
  EXPECT_FLOAT_EQ(static_cast<float>(f->get_float("t.f32")), -1.5e-7f);
  EXPECT_EQ(f->get_float("t.f64"), 3.141592653589793);
  EXPECT_TRUE(f->get_bool("t.true", false));
  EXPECT_FALSE(f->get_bool("t.false", true));
  EXPECT_EQ(f->get_string("t.unicode"), "héllo wörld — 你好 🦙");
  EXPECT_EQ(f->get("t.u64").as_uint("t.u64"), std::numeric_limits<uint64_t>::max());
  // Defaults apply only when the key is missing.
  EXPECT_EQ(f->get_int("missing", 7), 7);
  EXPECT_EQ(f->get_float("missing", 0.5), 0.5);
  EXPECT_EQ(f->get_string("missing", "d"), "d");
  EXPECT_TRUE(f->get_bool("missing", true));
  EXPECT_FALSE(f->has("missing"));
  EXPECT_TRUE(f->has("t.u8"));

  auto expect_error = [](auto&& fn, const std::vector<std::string>& parts) {
    try {
      fn();
      ADD_FAILURE() << "expected an error mentioning " << parts[0];
    } catch (const Error& e) {
      for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
  };
  expect_error([&] { f->get_int("missing"); }, {"missing metadata key 'missing'", path("a.gguf")});
  expect_error([&] { f->get_string("t.u8"); }, {"'t.u8'", "uint8", "string", path("a.gguf")});
  expect_error([&] { f->get_int("t.f32"); }, {"'t.f32'", "integer"});
  expect_error([&] { f->get_int("t.u64"); }, {"'t.u64'", "too large"});
  expect_error([&] { f->get_int("t.strings", 3); }, {"'t.strings'", "array of string"});  // present: no default
  expect_error([&] { f->get_bool("t.u8", false); }, {"'t.u8'", "bool"});
  expect_error([&] { f->get_float("t.true"); }, {"'t.true'", "number"});
  expect_error([&] { f->get("t.i8").as_uint("t.i8"); }, {"'t.i8'", "negative"});
  expect_error([&] { f->tensor("nope"); }, {"missing tensor 'nope'"});
  EXPECT_EQ(f->find_tensor("nope"), nullptr);
}

TEST(GgufValueTest, DisplayTextIsShortAndEscaped) {
  EXPECT_EQ(GgufValue::of_u32(7).to_display(), "7");
  EXPECT_EQ(GgufValue::of_i32(-7).to_display(), "-7");
  EXPECT_EQ(GgufValue::of_bool(true).to_display(), "true");
  EXPECT_EQ(GgufValue::of_f32(0.5f).to_display(), "0.5");
  EXPECT_EQ(GgufValue::of_f32(1e-6f).to_display(), "1e-06") << "shortest text for the float, not its double noise";
  EXPECT_EQ(GgufValue::of_f64(0.1).to_display(), "0.1");
  EXPECT_EQ(GgufValue::of_f64(1.0 / 3).to_display(), "0.3333333333333333");
  EXPECT_EQ(GgufValue::of_string("a\"b\n").to_display(), "\"a\\\"b\\n\"");
  EXPECT_EQ(GgufValue::of_i32s({1, 2, 3}).to_display(2), "[1, 2, ... (3 items)]");
  EXPECT_EQ(GgufValue::of_strings({}).to_display(), "[]");
  EXPECT_EQ(GgufValue::of_array(GgufType::ARRAY, {GgufValue::of_strings({"x"})}).to_display(), "[[\"x\"]]");
  const std::string long_text(1000, 'x');
  const std::string shown = GgufValue::of_string(long_text).to_display();
  EXPECT_LT(shown.size(), 200u);
  EXPECT_NE(shown.find("1000 bytes"), std::string::npos);
}

// ---------------------------------------------------------------- writer errors

template <typename F>
void expect_writer_error(F&& fn, const std::string& part) {
  try {
    fn();
    ADD_FAILURE() << "expected an error mentioning " << part;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST_F(GgufFileTest, WriterRejectsBadDeclarations) {
  GgufWriter w(path("a.gguf"));
  expect_writer_error([&] { w.set("general.alignment", GgufValue::of_u32(0)); }, "power of two");
  expect_writer_error([&] { w.set("general.alignment", GgufValue::of_u32(24)); }, "power of two");
  expect_writer_error([&] { w.set("general.alignment", GgufValue::of_u64(32)); }, "uint32");
  expect_writer_error([&] { w.set("", GgufValue::of_u32(1)); }, "empty");
  expect_writer_error([&] { w.set("x", GgufValue::of_array(GgufType::INT32, {GgufValue::of_string("s")})); },
                      "'x'");
  expect_writer_error([&] { w.set("x", scalar(GgufType::UINT8, 0, 256)); }, "does not fit");
  GgufValue deep = GgufValue::of_i32s({1});
  for (int d = 0; d < kGgufMaxArrayDepth; ++d) deep = GgufValue::of_array(GgufType::ARRAY, {deep});
  expect_writer_error([&] { w.set("deep", deep); }, "nested");
  w.add_tensor("t", DType::F32, {2});
  expect_writer_error([&] { w.add_tensor("t", DType::F32, {2}); }, "twice");
  expect_writer_error([&] { w.add_tensor("z", DType::F32, {2, 0}); }, "at least 1");
  expect_writer_error([&] { w.add_tensor("z", DType::F32, {}); }, "dimensions");
  expect_writer_error([&] { w.add_tensor("z", DType::F32, {1, 1, 1, 1, 1}); }, "dimensions");
  expect_writer_error([&] { w.add_tensor("z", DType::Q4_K, {128}); }, "block size");
  expect_writer_error([&] { w.add_tensor("z", DType::F32, {1ll << 40, 1ll << 40}); }, "overflow");
  const float x[3] = {1, 2, 3};
  expect_writer_error([&] { w.write_tensor_data(x, sizeof x); }, "past the last declared tensor");
  expect_writer_error([&] { w.set("late", GgufValue::of_u32(1)); }, "after the header");
  expect_writer_error([&] { w.add_tensor("late", DType::F32, {1}); }, "after the header");
}

TEST_F(GgufFileTest, UnfinishedFilesAreRemoved) {
  {
    GgufWriter w(path("a.gguf"));
    w.add_tensor("t", DType::F32, {4});
    const float x[2] = {1, 2};
    w.write_tensor_data(x, sizeof x);
    EXPECT_TRUE(fs::exists(path("a.gguf")));
    expect_writer_error([&] { w.finish(); }, "'t' has 8 of 16 bytes written");
  }
  EXPECT_FALSE(fs::exists(path("a.gguf")));
  {
    GgufWriter w(path("b.gguf"));
    w.set("a", GgufValue::of_u32(1));
  }  // never finished
  EXPECT_FALSE(fs::exists(path("b.gguf")));
  expect_writer_error([&] { GgufWriter w(path("no/such/dir/c.gguf")); }, "cannot create");
}

TEST_F(GgufFileTest, DiskFullIsAnError) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  try {
    GgufWriter w("/dev/full");  // not a regular file: never removed
    w.add_tensor("t", DType::F32, {1 << 20});
    std::vector<float> data(1 << 20, 1.0f);
    w.write_tensor_data(data.data(), data.size() * 4);
    w.finish();
    ADD_FAILURE() << "writing 4 MiB to /dev/full succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("write failed"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::exists("/dev/full"));
}

}  // namespace
}  // namespace ms
