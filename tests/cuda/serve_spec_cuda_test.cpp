// `serve --spec mtp` on the CUDA backend (issue #42): three greedy requests
// decoding together in the scheduler, each slot's MtpDrafter fed its own
// sequence's hidden states out of the steps' multi-sequence passes
// (forward_seqs' hidden hook), answer as a plain server on the same backend
// does, and the drafters did propose (with no hidden states from the batched
// steps they would not). A step with a hybrid's verify runs entry by entry
// through forward() (token states), a plain step as one batched pass: the
// two round differently, so a greedy near-tie could part the answers (the
// message names the request; a failure here is worth a look at its logits
// before blaming the drafters).
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "cuda/backend/cuda_backend.h"
#include "cuda_test_util.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "server/spec_drafters.h"
#include "tiny_models.h"
#include "tokenizer/tokenizer.h"

namespace ms::cuda::test {
namespace {

struct Answer {
  std::string text, finish;
  int n_completion = 0;
};

std::vector<Answer> serve(Backend& be, const Tokenizer& tok, const std::vector<server::Job>& jobs,
                          server::Scheduler::Options o, server::Metrics* metrics = nullptr) {
  server::Scheduler sched(be, tok, o, metrics);
  std::vector<std::shared_ptr<server::Request>> rs;
  for (const server::Job& j : jobs) rs.push_back(sched.submit(j));
  std::vector<Answer> out;
  for (auto& r : rs) {
    Answer a;
    for (;;) {
      server::Update u = r->take(std::chrono::milliseconds(100));
      a.text += u.content;
      if (u.done) {
        EXPECT_TRUE(u.error.empty()) << u.error;
        a.finish = u.finish_reason;
        a.n_completion = u.n_completion;
        break;
      }
    }
    out.push_back(a);
  }
  return out;
}

double metric(const std::string& text, const std::string& series) {
  const size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + series.size() + 2));
}

TEST(CudaSpecServe, MtpGreedyAnswersOfThreeSlotsAreThePlainOnes) {
  MS_REQUIRE_GPU();
  const LoadedModel& m = tiny_model("qwen35moe", "q8_0");
  CudaBackend::Options bo{.ctx = 256, .n_seq = 3};
  bo.vram_full = true;
  CudaBackend gpu(m.weights, bo);
  ASSERT_TRUE(gpu.supports_mtp());
  const Tokenizer& tok = *m.tokenizer;
  std::vector<server::Job> jobs;
  for (const char* p : {"Once upon a time", "The experts of the", "In a small village there lived"}) {
    server::Job j;
    j.prompt = tok.encode(p, true, true);
    j.sampling.temperature = 0;
    j.gen.n_predict = 30;
    j.gen.stop_at_eog = false;
    jobs.push_back(j);
  }
  server::Scheduler::Options o;
  o.parallel = 3;
  o.ctx = 256;
  o.prefill_chunk = 32;
  const std::vector<Answer> plain = serve(gpu, tok, jobs, o);
  o.spec.make_drafter = server::mtp_drafters(gpu, KvType::F16);
  o.spec.control.draft_max = 3;
  o.spec.control.adaptive = false;
  server::Metrics metrics;
  const std::vector<Answer> spec = serve(gpu, tok, jobs, o, &metrics);
  gpu.set_hidden_hook(nullptr);
  ASSERT_EQ(spec.size(), plain.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_EQ(plain[i].finish, "length");
    EXPECT_EQ(spec[i].text, plain[i].text) << "request " << i;
    EXPECT_EQ(spec[i].n_completion, plain[i].n_completion) << "request " << i;
  }
  const std::string text = metrics.render();
  EXPECT_GT(metric(text, "moestream_spec_drafted_tokens_total"), 0) << "the MTP drafters proposed";
  EXPECT_GT(metric(text, "moestream_spec_verifies_total"), 0);
}

}  // namespace
}  // namespace ms::cuda::test
