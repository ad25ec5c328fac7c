// The reader on malformed input: every bad field is one ms::Error naming the
// field (and where it is), never a crash, never an allocation from a bad count.
#include <gtest/gtest.h>

#include <random>

#include "format/gguf.h"
#include "format/gguf_bytes.h"
#include "util/error.h"

namespace ms {
namespace {

using test::GgufBytes;

// Parses `b`; expects an ms::Error whose message holds every one of `parts`.
void expect_rejected(const GgufBytes& b, const std::vector<std::string>& parts) {
  try {
    GgufFile::from_memory(b.b.data(), b.size(), "bad.gguf");
    ADD_FAILURE() << "accepted a file that should be rejected (expected: " << parts[0] << ")";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("bad.gguf: ", 0), 0u) << "message starts with the path: " << msg;
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "missing '" << p << "' in: " << msg;
  }
}

// A small valid file: a few keys of several types, and two tensors.
GgufBytes valid_file() {
  GgufBytes b;
  b.header(3, 2, 4);
  b.kv_str("general.architecture", "qwen3moe");
  b.kv_u32("qwen3moe.block_count", 1);
  b.str("tokenizer.ggml.tokens").u32(9).u32(8).u64(2).str("a").str("bc");
  b.str("nested").u32(9).u32(9).u64(1).u32(5).u64(2).u32(1).u32(2);
  b.tensor_info("token_embd.weight", {4, 2}, 0, 0);       // f32, 32 bytes
  b.tensor_info("blk.0.ffn_up_exps.weight", {32, 1, 2}, 8, 32);  // q8_0, 68 bytes
  b.pad(32).fill(32, 1).fill(68, 2);
  return b;
}

TEST(GgufMalformed, TheBaseFileIsValid) {
  const GgufBytes b = valid_file();
  auto f = GgufFile::from_memory(b.b.data(), b.size());
  EXPECT_EQ(f->tensors().size(), 2u);
  EXPECT_EQ(f->tensor("blk.0.ffn_up_exps.weight").nbytes, 68u);
  EXPECT_EQ(f->get("nested").arr[0].arr[1].i, 2);
}

// Cut short at every byte: each prefix is rejected cleanly.
TEST(GgufMalformed, TruncatedAtEveryByte) {
  const GgufBytes b = valid_file();
  for (size_t n = 0; n < b.size(); ++n) {
    // A fresh exact-size buffer, so any read past the end would be caught by ASan.
    std::vector<uint8_t> prefix(b.b.begin(), b.b.begin() + static_cast<long>(n));
    try {
      GgufFile::from_memory(prefix.data(), prefix.size(), "cut.gguf");
      ADD_FAILURE() << "a file cut to " << n << " of " << b.size() << " bytes was accepted";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_TRUE(msg.find("truncated") != std::string::npos || msg.find("too small") != std::string::npos)
          << "cut at " << n << ": " << msg;
    }
  }
}

TEST(GgufMalformed, BadMagic) {
  GgufBytes b = valid_file();
  b.b[0] = 'g';
  expect_rejected(b, {"not a GGUF file", "magic", "gGUF", "at byte 0"});
  b.b[0] = 0x00;
  expect_rejected(b, {"not a GGUF file", "\\x00GUF"});
}

TEST(GgufMalformed, BadVersion) {
  GgufBytes v1;
  v1.header(1, 0, 0);
  expect_rejected(v1, {"version 1", "not supported", "at byte 4"});
  GgufBytes v4;
  v4.header(4, 0, 0);
  expect_rejected(v4, {"version 4", "2 and 3"});
  GgufBytes v0;
  v0.header(0, 0, 0);
  expect_rejected(v0, {"version 0"});
  GgufBytes be;
  be.header(0x03000000, 0, 0);  // version 3 written big-endian
  expect_rejected(be, {"big-endian"});
}

TEST(GgufMalformed, HugeCounts) {
  GgufBytes t;
  t.header(3, 1ull << 60, 0).fill(64);
  expect_rejected(t, {"tensor count 1152921504606846976", "at byte 8"});
  GgufBytes k;
  k.header(3, 0, ~0ull).fill(64);
  expect_rejected(k, {"key/value count 18446744073709551615", "at byte 16"});
  // Each fits alone, not together.
  GgufBytes both;
  both.header(3, 2, 3).fill(80);
  expect_rejected(both, {"key/value count 3", "2 tensors"});
}

TEST(GgufMalformed, HugeStringLengths) {
  GgufBytes key;
  key.header(3, 0, 1).u64(~0ull).fill(20);
  expect_rejected(key, {"metadata entry #0", "key has length 18446744073709551615", "at byte 24"});
  GgufBytes value;
  value.header(3, 0, 1).str("k").u32(8).u64(1ull << 40).fill(8);
  expect_rejected(value, {"metadata key 'k'", "string value has length 1099511627776", "at byte 37"});
  GgufBytes name;
  name.header(3, 1, 0).u64(1000).fill(40);
  expect_rejected(name, {"tensor info #0", "name has length 1000"});
}

TEST(GgufMalformed, HugeArrayCounts) {
  GgufBytes b;
  b.header(3, 0, 1).str("arr").u32(9).u32(6).u64(1ull << 62).fill(100);
  expect_rejected(b, {"metadata key 'arr'", "array count 4611686018427387904", "float32", "at byte 43"});
  // Strings need at least 8 bytes each: 13 of them cannot be in 100 bytes.
  GgufBytes s;
  s.header(3, 0, 1).str("s").u32(9).u32(8).u64(13).fill(100);
  expect_rejected(s, {"array count 13", "string"});
  // Nested arrays need at least 12 bytes each.
  GgufBytes n;
  n.header(3, 0, 1).str("n").u32(9).u32(9).u64(9).fill(100);
  expect_rejected(n, {"array count 9", "array"});
}

TEST(GgufMalformed, TooManyArrayElementsInAll) {
  // A count within the file's size but past the cap on metadata elements is
  // refused before anything is read or allocated.
  const uint64_t n = kGgufMaxArrayElements + 1;
  GgufBytes b;
  b.header(3, 0, 1).str("a").u32(9).u32(0).u64(n).fill(static_cast<size_t>(n));
  expect_rejected(b, {"metadata key 'a'", "elements in all"});
}

TEST(GgufMalformed, BadValueTypes) {
  GgufBytes b;
  b.header(3, 0, 1).str("k").u32(13).fill(8);
  expect_rejected(b, {"metadata key 'k'", "value type is 13", "at byte 33"});
  GgufBytes e;
  e.header(3, 0, 1).str("k").u32(9).u32(99).u64(0).fill(8);
  expect_rejected(e, {"metadata key 'k'", "array element type is 99", "at byte 37"});
}

TEST(GgufMalformed, ArraysNestedTooDeep) {
  GgufBytes b;
  b.header(3, 0, 1).str("deep").u32(9);
  for (int d = 0; d < kGgufMaxArrayDepth; ++d) b.u32(9).u64(1);
  b.u32(5).u64(0);
  expect_rejected(b, {"metadata key 'deep'", "nested more than 8"});
}

TEST(GgufMalformed, DuplicateAndEmptyKeys) {
  GgufBytes b;
  b.header(3, 0, 2).kv_u32("a", 1).kv_u32("a", 2);
  expect_rejected(b, {"metadata key 'a'", "duplicate key", "at byte 41"});
  GgufBytes e;
  e.header(3, 0, 1).kv_u32("", 1);
  expect_rejected(e, {"empty key"});
}

TEST(GgufMalformed, BadAlignment) {
  for (uint32_t a : {0u, 3u, 48u}) {
    GgufBytes b;
    b.header(3, 0, 1).kv_u32("general.alignment", a);
    expect_rejected(b, {"general.alignment", "alignment " + std::to_string(a) + " is not a nonzero power of two"});
  }
  GgufBytes t;
  t.header(3, 0, 1).str("general.alignment").u32(10).u64(32);
  expect_rejected(t, {"general.alignment", "must be a uint32, is uint64"});
}

// One tensor info after an empty metadata section; data follows at 32.
GgufBytes one_tensor(const std::vector<uint64_t>& dims, uint32_t type, uint64_t offset, size_t data) {
  GgufBytes b;
  b.header(3, 1, 0).tensor_info("blk.0.ffn_up_exps.weight", dims, type, offset).pad(32).fill(data);
  return b;
}

TEST(GgufMalformed, UnknownTensorType) {
  expect_rejected(one_tensor({32}, 5, 0, 64), {"tensor 'blk.0.ffn_up_exps.weight'", "unknown tensor type id 5"});
  expect_rejected(one_tensor({32}, 1000, 0, 64), {"unknown tensor type id 1000", "at byte 68"});
}

TEST(GgufMalformed, BadDims) {
  expect_rejected(one_tensor({32, 0}, 0, 0, 512), {"tensor 'blk.0.ffn_up_exps.weight'", "dimension 1 is 0"});
  expect_rejected(one_tensor({~0ull}, 0, 0, 64), {"dimension 0 is 18446744073709551615"});
  expect_rejected(one_tensor({1ull << 32, 1ull << 32}, 0, 0, 64), {"overflows", "dimension 1"});
  // 2^62 f32 elements: the count fits in 63 bits, the bytes (x4) do not.
  expect_rejected(one_tensor({1ull << 31, 1ull << 31}, 0, 0, 64), {"byte size overflows"});
  expect_rejected(one_tensor({}, 0, 0, 64), {"n_dims is 0"});
  expect_rejected(one_tensor({1, 1, 1, 1, 1}, 0, 0, 64), {"n_dims is 5", "at byte 56"});
}

TEST(GgufMalformed, InnermostDimNotAMultipleOfTheBlockSize) {
  expect_rejected(one_tensor({48, 2}, 12, 0, 1024), {"innermost dimension 48", "q4_K", "block size 256"});
}

TEST(GgufMalformed, MisalignedOffset) {
  expect_rejected(one_tensor({4}, 0, 8, 64), {"data offset 8", "alignment 32", "at byte 72"});
}

TEST(GgufMalformed, DataPastTheEnd) {
  // Header ends at 80, data starts at 96; 16 f32 = 64 bytes need [96, 160).
  expect_rejected(one_tensor({16}, 0, 0, 63),
                  {"tensor 'blk.0.ffn_up_exps.weight'", "data [96, 160)", "runs past the end of the file (size 159)",
                   "tensor info at byte 24"});
  expect_rejected(one_tensor({16}, 0, 1ull << 63, 64), {"runs past the end"});
  expect_rejected(one_tensor({16}, 0, ~0ull - 31, 64), {"overflows"});
}

TEST(GgufMalformed, DuplicateTensorNames) {
  GgufBytes b;
  b.header(3, 2, 0).tensor_info("w", {4}, 0, 0).tensor_info("w", {4}, 0, 32).pad(32).fill(64);
  expect_rejected(b, {"tensor 'w'", "duplicate tensor name", "at byte 57"});
  GgufBytes e;
  e.header(3, 1, 0).tensor_info("", {4}, 0, 0).pad(32).fill(16);
  expect_rejected(e, {"empty tensor name"});
}

// Two tensors whose bytes overlap (a wrong offset, or a size that disagrees
// with where the next tensor starts): rejected, naming both.
TEST(GgufMalformed, OverlappingTensors) {
  GgufBytes b;  // a: 16 f32 = 64 bytes at 0; b: 4 f32 at 32, inside a
  b.header(3, 2, 0).tensor_info("a.weight", {16}, 0, 0).tensor_info("b.weight", {4}, 0, 32).pad(32).fill(96);
  expect_rejected(b, {"tensor 'b.weight'", "overlaps tensor 'a.weight'", "the file is corrupt"});
  GgufBytes same;  // the same offset twice, listed in either order
  same.header(3, 2, 0).tensor_info("x", {8}, 0, 32).tensor_info("y", {8}, 0, 32).pad(32).fill(64);
  expect_rejected(same, {"overlaps tensor"});
  // Back to back is fine, in any listing order.
  GgufBytes ok;
  ok.header(3, 2, 0).tensor_info("late", {8}, 0, 32).tensor_info("early", {8}, 0, 0).pad(32).fill(64);
  auto f = GgufFile::from_memory(ok.b.data(), ok.size());
  EXPECT_EQ(f->tensors().size(), 2u);
}

// Types llama.cpp writes that moestream has no layout for are named.
TEST(GgufMalformed, UnsupportedLlamacppTypeIsNamed) {
  expect_rejected(one_tensor({64}, 40, 0, 64),
                  {"tensor 'blk.0.ffn_up_exps.weight'", "type nvfp4 (ggml type id 40) is not supported", "re-quantize"});
  expect_rejected(one_tensor({64}, 31, 0, 64), {"q4_0_4_4", "no longer writes"});
}

// An unknown type id on a later tensor names that tensor, not the first.
TEST(GgufMalformed, UnknownTypeNamesItsTensor) {
  GgufBytes b;
  b.header(3, 2, 0).tensor_info("good.weight", {32}, 0, 0).tensor_info("bad.weight", {32}, 77, 128).pad(32).fill(256);
  expect_rejected(b, {"tensor 'bad.weight'", "unknown tensor type id 77"});
}

// Random corruption of a valid file: every result is a parse or an ms::Error.
TEST(GgufMalformed, RandomCorruptionNeverCrashes) {
  const GgufBytes base = valid_file();
  std::mt19937 rng(1234);
  int accepted = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<uint8_t> b = base.b;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      const size_t at = rng() % b.size();
      switch (rng() % 3) {
        case 0: b[at] = static_cast<uint8_t>(rng()); break;
        case 1: b[at] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
        default: b[at] = (rng() % 2) ? 0xFF : 0x00; break;
      }
    }
    try {
      auto f = GgufFile::from_memory(b.data(), b.size());
      ++accepted;
      for (const auto& kv : f->metadata()) (void)kv.second.to_display();
      for (const auto& t : f->tensors()) {
        ASSERT_GE(t.data, b.data());
        ASSERT_LE(t.data + t.nbytes, b.data() + b.size());
      }
    } catch (const Error&) {
    }
  }
  EXPECT_GT(accepted, 0);  // flips inside tensor data or string bytes keep the file valid
}

}  // namespace
}  // namespace ms
