// Splitting a prompt on special-token texts (SpecialSplitter) with many
// special tokens that share a prefix: gpt-oss's vocabulary carries about a
// thousand "<|reserved_N|>" ones; a hostile GGUF can carry far more. The
// text is 1 MiB of markup-like prose: a '<' every few bytes and a near miss
// of the shared prefix every 64 bytes, so most positions start a walk.
//
// Usage: special_split_bench [google benchmark flags]
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "tokenizer/special.h"

namespace {

using namespace ms;

void BM_SplitSharedPrefix(benchmark::State& state) {
  Vocab v;
  for (int64_t k = 0; k < state.range(0); ++k) {
    v.tokens.push_back("<|reserved_" + std::to_string(k) + "|>");
    v.types.push_back(TokenType::Control);
  }
  const SpecialSplitter splitter(v);
  std::string text;
  while (text.size() < (size_t{1} << 20)) text += "<b>abcd <|reserved_x <i>efgh </b>ijkl mnopqrst uvwxyz0123456789<|";
  std::vector<Fragment> out;
  for (auto _ : state) {
    out.clear();
    splitter.split(text, true, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(text.size()));
}
BENCHMARK(BM_SplitSharedPrefix)->Arg(30)->Arg(1000)->Arg(50000)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
