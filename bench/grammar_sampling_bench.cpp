// Constrained sampling (response_format json_schema) on the CPU: the time to
// pick one token under a grammar, with a vocabulary of Qwen3's size (151936
// pieces, random printable bytes plus JSON punctuation; seeded, so every run
// has the same one). Two ways, same logits, same states:
//   mask  TokenMask::fill (the trie walk over the whole vocabulary) and a
//         sample over the masked logits: what serve did for every token;
//   lazy  Sampler with a TokenFilter: its best tokens asked one by one
//         (Sampler::mask_from_best), the whole mask only where it must.
// States: inside a JSON string value of a schema with maxLength (each
// position a different state, so fill()'s small cache misses, as it does in
// a real answer), and with 40 string alternatives (256 parse stacks, the
// matcher's bound). Samplers: greedy and top-k 40 at temperature 0.8.
//
// Usage: grammar_sampling_bench [google benchmark flags]
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "grammar/json_schema.h"
#include "grammar/token_mask.h"
#include "server/grammar_filter.h"

namespace {

using namespace ms;

constexpr int32_t kVocab = 151936;

struct Setup {
  std::vector<std::string> pieces;
  std::vector<bool> eog;
  std::unique_ptr<grammar::TokenMask> mask;
  std::vector<float> logits;
  Setup() {
    std::mt19937 rng(42);
    pieces.resize(kVocab);
    eog.assign(kVocab, false);
    const std::string json = "{}[]\":, \n0123456789";
    for (int32_t i = 0; i < kVocab; ++i) {
      std::string s;
      const int len = 1 + static_cast<int>(rng() % 8);
      for (int k = 0; k < len; ++k)
        s += rng() % 8 == 0 ? json[rng() % json.size()] : static_cast<char>('a' + rng() % 26);
      pieces[static_cast<size_t>(i)] = s;
    }
    eog[kVocab - 1] = true;
    pieces[kVocab - 1] = "";
    mask = std::make_unique<grammar::TokenMask>(pieces, eog);
    std::normal_distribution<float> g(0.0f, 2.0f);
    logits.resize(kVocab);
    for (float& l : logits) l = g(rng);
  }
};

Setup& setup() {
  static Setup s;
  return s;
}

// 32 states inside a string value, each a different position.
std::vector<grammar::Matcher> string_states(const grammar::Grammar& g, const char* open) {
  std::vector<grammar::Matcher> out;
  for (int i = 0; i < 32; ++i) {
    grammar::Matcher m(g);
    m.advance(std::string(open) + std::string(static_cast<size_t>(i), 'x'));
    out.push_back(m);
  }
  return out;
}

const grammar::Grammar& schema(int which) {
  static const grammar::Grammar plain = grammar::compile_json_schema(
      nlohmann::ordered_json::parse(R"({"type":"object","properties":{"text":{"type":"string","maxLength":400}},"required":["text"]})"));
  static const grammar::Grammar many = [] {
    nlohmann::ordered_json alts = nlohmann::ordered_json::array();
    for (int i = 0; i < 40; ++i) alts.push_back({{"type", "string"}, {"maxLength", 100 + i}});
    return grammar::compile_json_schema({{"type", "array"}, {"items", {{"anyOf", alts}}}});
  }();
  return which == 0 ? plain : many;
}

void run(benchmark::State& state, bool lazy) {
  Setup& s = setup();
  const int which = static_cast<int>(state.range(0));
  const bool greedy = state.range(1) == 0;
  const auto states = string_states(schema(which), which == 0 ? "{\"text\": \"" : "[\"");
  SamplerParams p;
  p.temperature = greedy ? 0.0f : 0.8f;
  p.top_k = 40;
  Sampler sampler(p);
  std::vector<uint8_t> allowed;
  size_t i = 0, stacks = 0;
  for (auto _ : state) {
    const grammar::Matcher& m = states[i++ % states.size()];
    stacks = m.state().size();
    SampleOptions o;
    server::GrammarFilter filter(*s.mask, m, allowed);
    if (lazy) {
      o.filter = &filter;
    } else {
      s.mask->fill(m, allowed);
      o.allowed = allowed.data();
    }
    benchmark::DoNotOptimize(sampler.sample(s.logits.data(), kVocab, o));
  }
  state.counters["stacks"] = static_cast<double>(stacks);
  state.SetLabel(std::string(which == 0 ? "string" : "40 alternatives") + (greedy ? ", greedy" : ", top-k 40"));
}

// The same sampler without a grammar: what any token costs to pick.
void BM_NoGrammar(benchmark::State& state) {
  Setup& s = setup();
  SamplerParams p;
  p.temperature = state.range(0) == 0 ? 0.0f : 0.8f;
  p.top_k = 40;
  Sampler sampler(p);
  for (auto _ : state) benchmark::DoNotOptimize(sampler.sample(s.logits.data(), kVocab));
  state.SetLabel(state.range(0) == 0 ? "greedy" : "top-k 40");
}

void BM_WholeMask(benchmark::State& state) { run(state, false); }
void BM_LazyFilter(benchmark::State& state) { run(state, true); }

BENCHMARK(BM_NoGrammar)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_WholeMask)->ArgsProduct({{0, 1}, {0, 1}})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_LazyFilter)->ArgsProduct({{0, 1}, {0, 1}})->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
