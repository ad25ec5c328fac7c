// serve --kv-type q8_0: the fits-in-memory check counts the q8_0 pool's real
// bytes (34/64 of f16's K/V), so more tokens fit the same memory;
// and a q8_0 slot generates what generate() gives on a q8_0 cache.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "cpu/thread_pool.h"
#include "engine/cpu_backend.h"
#include "engine/generate.h"
#include "engine/loaded_model.h"
#include "engine/synthetic_model.h"
#include "server/scheduler.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace ms::server {
namespace {

namespace fs = std::filesystem;

struct TinyModel {
  ThreadPool pool{2};
  std::string path = (fs::temp_directory_path() / ("sched_kv_q8_" + std::to_string(::getpid()) + ".gguf")).string();
  std::unique_ptr<LoadedModel> model;
  std::unique_ptr<CpuBackend> be;
  TinyModel() {
    GenOptions g;  // tiny qwen3moe: head size 64
    generate_model(g, path, pool);
    model = LoadedModel::open(path);
    be = std::make_unique<CpuBackend>(model->weights, pool);
  }
  ~TinyModel() { fs::remove(path); }
  const Tokenizer& tok() const { return *model->tokenizer; }
};

std::string refused(const TinyModel& t, const Scheduler::Options& o) {
  try {
    Scheduler s(*t.be, t.tok(), o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The CPU backend's slots share one pool of --ctx tokens (paged KV): a q8_0
// pool holds more tokens in the same memory.
TEST(SchedulerKvQ8_0, AQ8_0PoolHoldsMoreTokensInTheSameMemory) {
  TinyModel t;
  Scheduler::Options o;
  o.parallel = 4;
  const uint64_t f16_128 = t.be->make_cache(128).bytes();
  const uint64_t q8_128 = t.be->make_cache(128, KvType::Q8_0).bytes();
  EXPECT_EQ(q8_128 * 64, f16_128 * 34);
  o.max_kv_bytes = f16_128 * 3 + f16_128 / 2;  // 448 f16 tokens, 843 q8_0 tokens
  o.ctx = 448;
  EXPECT_EQ(refused(t, o), "");
  o.ctx = 768;
  const std::string why = refused(t, o);
  EXPECT_NE(why.find("--ctx 768 needs"), std::string::npos) << why;
  o.kv_type = KvType::Q8_0;
  EXPECT_EQ(refused(t, o), "");
}

TEST(SchedulerKvQ8_0, ASlotGeneratesWhatAQ8_0CacheGives) {
  TinyModel t;
  const std::vector<int32_t> prompt = {5, 77, 300, 12, 41, 200, 3};
  // The reference: generate() on a q8_0 cache, greedy.
  KvCache kv = t.be->make_cache(256, KvType::Q8_0);
  SamplerParams sp;
  sp.temperature = 0;
  Sampler sampler(sp);
  GenerateParams gp;
  gp.n_predict = 12;
  StreamDecoder dec(t.tok());
  std::string want;
  generate(*t.be, kv, sampler, &t.tok(), prompt, gp, [&](int32_t id) {
    if (!t.tok().is_eog(id)) want += dec.push(id);
    return true;
  });
  want += dec.flush();

  Scheduler::Options o;
  o.ctx = 256;
  o.kv_type = KvType::Q8_0;
  Scheduler sched(*t.be, t.tok(), o);
  Job j;
  j.prompt = prompt;
  j.sampling.temperature = 0;
  j.gen.n_predict = 12;
  auto r = sched.submit(std::move(j));
  std::string got;
  for (;;) {
    Update u = r->take(std::chrono::milliseconds(100));
    got += u.content;
    if (u.done) break;
  }
  EXPECT_EQ(got, want);
  EXPECT_FALSE(want.empty());
}

}  // namespace
}  // namespace ms::server
