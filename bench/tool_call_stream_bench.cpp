// Tool-call parsing of a streamed reply (server/tool_call_parser.h): the
// parser sees the reply a piece at a time, as serve decodes it. Three long
// replies, each fed in `range(0)` pieces:
//   qwen_call      <tool_call> then 3-byte pieces of a long argument;
//   mistral_nested [TOOL_CALLS] then '{"a": ' pieces (an ever deeper JSON value);
//   gap            a word, then newlines only (whitespace held as the gap before a call).
// Each reply costs its length once when the parser resumes its scan where
// the last piece stopped; it cost length x pieces when every piece rescanned.
//
// Usage: tool_call_stream_bench [google benchmark flags]
#include <benchmark/benchmark.h>

#include <string>

#include <nlohmann/json.hpp>

#include "server/tool_call_parser.h"

namespace {

using namespace ms::server;

void feed(benchmark::State& state, ToolCallFormat format, const std::string& open, const std::string& piece) {
  const auto n = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    ToolCallParser p(format, nlohmann::json::array());
    size_t out = p.push(open).content.size();
    for (size_t i = 0; i < n; ++i) out += p.push(piece).content.size();
    out += p.flush().content.size();
    benchmark::DoNotOptimize(out);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * (open.size() + n * piece.size())));
}

void BM_QwenCall(benchmark::State& s) { feed(s, ToolCallFormat::QwenJson, "<tool_call>", "ab "); }
void BM_MistralNested(benchmark::State& s) { feed(s, ToolCallFormat::Mistral, "[TOOL_CALLS]", "{\"a\": "); }
void BM_Gap(benchmark::State& s) { feed(s, ToolCallFormat::QwenJson, "done", "\n"); }
BENCHMARK(BM_QwenCall)->Arg(20000)->Arg(80000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MistralNested)->Arg(20000)->Arg(80000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Gap)->Arg(20000)->Arg(80000)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
