// A grammar job's constraint as the sampler asks it (engine/sampler.h,
// TokenFilter): single tokens through the vocabulary's byte table with one
// StepMemo per pick, the whole mask (a walk of the vocabulary's trie) only
// where the sampler needs every answer.
#pragma once
#include <cstdint>
#include <mutex>
#include <vector>

#include "engine/sampler.h"
#include "grammar/token_mask.h"
#include "util/error.h"

namespace ms::server {

class GrammarFilter final : public TokenFilter {
 public:
  // Valid for one pick: the matcher must not change meanwhile. mask_mutex
  // (optional) guards the TokenMask's cache of whole masks, which several
  // slots picking side by side share.
  GrammarFilter(const grammar::TokenMask& vocab, const grammar::Matcher& matcher, std::vector<uint8_t>& allowed,
                std::mutex* mask_mutex = nullptr)
      : vocab_(vocab), matcher_(matcher), allowed_(allowed), mask_mutex_(mask_mutex), memo_(matcher) {}

  bool allows(int32_t id) override { return vocab_.allows(matcher_, memo_, id); }

  const uint8_t* mask() override {
    std::unique_lock<std::mutex> lock;
    if (mask_mutex_) lock = std::unique_lock<std::mutex>(*mask_mutex_);
    const size_t n = vocab_.fill(matcher_, allowed_);
    if (n == 0) throw Error("the vocabulary has no token that continues the JSON answer here");
    return allowed_.data();
  }

 private:
  const grammar::TokenMask& vocab_;
  const grammar::Matcher& matcher_;
  std::vector<uint8_t>& allowed_;
  std::mutex* mask_mutex_;
  grammar::StepMemo memo_;
};

}  // namespace ms::server
