// The decode floor at a VRAM budget (experts/floor.h) and bench's per-budget
// summary: table, JSON and chart (experts/budget_sweep.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "experts/budget_sweep.h"
#include "experts/floor.h"
#include "experts/svg_plot.h"
#include "util/split.h"

namespace ms {
namespace {

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

TEST(DecodeFloor, SlowestTierSetsIt) {
  // 2 GB over HBM at 2000 GB/s: 1 ms; 110 MB over PCIe at 55 GB/s: 2 ms; 30 MB on a 30 GB/s CPU: 1 ms.
  const DecodeFloor f = decode_floor({2e9, 110e6, 30e6}, {2000, 55, 30});
  EXPECT_NEAR(f.gpu_s, 1e-3, 1e-12);
  EXPECT_NEAR(f.pcie_s, 2e-3, 1e-12);
  EXPECT_NEAR(f.cpu_s, 1e-3, 1e-12);
  EXPECT_NEAR(f.tokens_per_s(), 500.0, 1e-9);
  EXPECT_EQ(f.bound(), "pcie");
  EXPECT_EQ(decode_floor({2e9, 0, 90e6}, {2000, 55, 30}).bound(), "cpu");
  EXPECT_EQ(decode_floor({2e9, 0, 0}, {2000, 55, 30}).bound(), "hbm");
}

TEST(DecodeFloor, HostMemorySharedByTheLinkAndTheCpuCanSetIt) {
  // 110 MB streamed + 30 MB on the CPU, both read from host memory at 90 GB/s: 1.56 ms, below PCIe's 2 ms.
  const DecodeFloor f = decode_floor({2e9, 110e6, 30e6}, {2000, 55, 30, 90});
  EXPECT_NEAR(f.host_s, 140e6 / 90e9, 1e-12);
  EXPECT_EQ(f.bound(), "pcie");
  // A split that balances PCIe and the CPU: 2 ms each, but 220 MB from host memory take 2.44 ms.
  const DecodeFloor g = decode_floor({2e9, 110e6, 60e6 + 50e6}, {2000, 55, 55, 90});
  EXPECT_NEAR(g.host_s, 220e6 / 90e9, 1e-12);
  EXPECT_NEAR(g.seconds(), g.host_s, 1e-15);
  EXPECT_EQ(g.bound(), "host memory");
  // Not measured: left out.
  EXPECT_EQ(decode_floor({2e9, 110e6, 110e6}, {2000, 55, 55, 0}).host_s, 0.0);
}

TEST(DecodeFloor, ATierWithoutBytesNeedsNoRateAndOneWithoutRateIsUnknown) {
  EXPECT_NEAR(decode_floor({1e9, 0, 0}, {1000, 0, 0}).tokens_per_s(), 1000.0, 1e-9);
  EXPECT_EQ(decode_floor({1e9, 1e6, 0}, {1000, 0, 30}).tokens_per_s(), 0.0);
}

ExpertTelemetry hybrid_run() {
  ExpertTelemetry t;
  t.hybrid = true;
  t.gpu_gbps = 1000, t.pcie_gbps = 10, t.cpu_gbps = 5;
  t.decode_tokens = 10;
  t.decode = {40, 30, 10};  // per token: 4 resident, 3 streamed, 1 on the CPU
  return t;
}

TEST(DecodeFloor, FromTelemetryPerDecodeToken) {
  // GPU (1 MB dense + 4 MB) / 1000 GB/s = 5 us; 3 MB / 10 GB/s = 300 us; 1 MB / 5 GB/s = 200 us.
  const auto f = telemetry_floor(hybrid_run(), 1e6, 1e6);
  ASSERT_TRUE(f);
  EXPECT_NEAR(f->gpu_s, 5e-6, 1e-15);
  EXPECT_NEAR(f->pcie_s, 300e-6, 1e-15);
  EXPECT_NEAR(f->cpu_s, 200e-6, 1e-15);
  EXPECT_NEAR(f->tokens_per_s(), 1.0 / 300e-6, 1e-6);
  EXPECT_EQ(f->host_s, 0.0) << "no host memory rate in the telemetry: no term";
  // With one: (3 + 1) MB / 8 GB/s = 500 us, above the PCIe term.
  ExpertTelemetry t = hybrid_run();
  t.host_gbps = 8;
  const auto h = telemetry_floor(t, 1e6, 1e6);
  ASSERT_TRUE(h);
  EXPECT_NEAR(h->host_s, 500e-6, 1e-15);
  EXPECT_EQ(h->bound(), "host memory");
  // bench --bandwidth replaces the HBM rate only.
  const auto slow = telemetry_floor(hybrid_run(), 1e6, 1e6, 0.001);
  ASSERT_TRUE(slow);
  EXPECT_NEAR(slow->gpu_s, 5.0, 1e-9);
  EXPECT_EQ(slow->bound(), "hbm");
}

TEST(DecodeFloor, NoneWithoutHybridDecode) {
  ExpertTelemetry all_resident;
  EXPECT_FALSE(telemetry_floor(all_resident, 1e6, 1e6));
  ExpertTelemetry prompt_only = hybrid_run();
  prompt_only.decode_tokens = 0;
  EXPECT_FALSE(telemetry_floor(prompt_only, 1e6, 1e6));
}

TEST(DecodeFloor, MoreResidentNeverLowersIt) {
  // A larger budget moves experts from PCIe to VRAM: the floor can only rise.
  double last = 0;
  for (int resident = 0; resident <= 8; ++resident) {
    const double e = 4e6;
    const double tps = decode_floor({1e8 + resident * e, (8 - resident) * e, 0}, {3000, 50, 80}).tokens_per_s();
    EXPECT_GE(tps, last);
    last = tps;
  }
}

std::vector<BudgetRow> three_budgets() {
  BudgetRow a{"1.5G", 1.5, true, 1400, 56.7, 0.007, 52.7, 0.132, 70, "pcie"};
  BudgetRow b{"8G", 8, true, 2300, 94.9, 0.436, 56.3, 0.074, 160, "pcie"};
  BudgetRow full{"full", 16.1, false, 8850, 337.3, 0, 0, 0, 600, ""};
  return {a, b, full};
}

TEST(BudgetSweep, TableHasOneRowPerBudget) {
  const std::string t = budget_table(three_budgets(), 512, 128);
  EXPECT_EQ(t.rfind("| budget | pp512 t/s | tg128 t/s | hit | H2D GB/s | CPU share | floor tok/s | of floor |\n", 0), 0u);
  EXPECT_EQ(count(t, "\n"), 5u);
  EXPECT_NE(t.find("| 8G | 2300.0 | 94.9 | 43.6% | 56.3 | 7.4% | 160.0 | 59% |"), std::string::npos);
  EXPECT_NE(t.find("| full | 8850.0 | 337.3 | 100% | — | 0% | 600.0 | 56% |"), std::string::npos);
  std::vector<BudgetRow> no_tg = three_budgets();
  no_tg[0].tg_tps = 0;
  EXPECT_NE(budget_table(no_tg, 512, 128).find("| 1.5G | 1400.0 | — |"), std::string::npos);
}

TEST(BudgetSweep, JsonRow) {
  const nlohmann::json j = budget_row_json(three_budgets()[1]);
  EXPECT_EQ(j["vram"], "8G");
  EXPECT_NEAR(j["of_floor"].get<double>(), 94.9 / 160, 1e-12);
  EXPECT_EQ(j["floor_bound"], "pcie");
  EXPECT_FALSE(budget_row_json(three_budgets()[2]).contains("hit_rate"));
  BudgetRow dflt;
  EXPECT_EQ(budget_row_json(dflt)["vram"], "default");
}

TEST(BudgetSweep, SvgHasBothPanelsAndADashedFloorWithOnePointPerBudget) {
  const std::vector<BudgetRow> rows = three_budgets();
  const std::string svg = budget_svg(rows, "Qwen3 <30B>", 512, 128);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  EXPECT_NE(svg.find("Qwen3 &lt;30B&gt;"), std::string::npos);  // title, escaped
  EXPECT_EQ(count(svg, "<polyline"), 3u);                       // tg, floor, pp
  EXPECT_EQ(count(svg, "stroke-dasharray"), 2u);                // the floor's line and its legend
  EXPECT_EQ(count(svg, "<circle"), 3 * rows.size());            // one point per budget and series
  EXPECT_NE(svg.find("decode (tg128) tokens/s"), std::string::npos);
  EXPECT_NE(svg.find("prompt (pp512) tokens/s"), std::string::npos);
  EXPECT_EQ(count(svg, ">8G<"), 2u);  // x ticks at the budgets, named as given, under each panel
  EXPECT_EQ(count(svg, ">full<"), 2u);
  // The dashed polyline carries one point per budget.
  const size_t dashed = svg.find("stroke-dasharray=\"6,4\" points=\"");
  ASSERT_NE(dashed, std::string::npos);
  const std::string pts = svg.substr(dashed, svg.find("\"/>", dashed) - dashed);
  EXPECT_EQ(count(pts, ","), 1 + rows.size());  // "6,4" and one comma per point
  // Each panel's y axis reaches a round number above its data, written in full:
  // 1000 (tg 337, floor 600), 10000 (pp 8850).
  EXPECT_NE(svg.find(">1000<"), std::string::npos);
  EXPECT_NE(svg.find(">10000<"), std::string::npos);
  EXPECT_EQ(svg.find("e+"), std::string::npos);
}

TEST(BudgetSweep, SvgLeavesOutWhatWasNotMeasured) {
  std::vector<BudgetRow> rows = three_budgets();
  for (BudgetRow& r : rows) r.pp_tps = 0;  // -p 0
  const std::string svg = budget_svg(rows, "t", 0, 128);
  EXPECT_EQ(count(svg, "<polyline"), 2u);
  EXPECT_EQ(svg.find("prompt ("), std::string::npos);
}

TEST(SvgPlot, RateChartKeepsItsZeroToOneAxis) {
  const std::string svg = svg_line_chart("t", "x", "hit rate", {PlotSeries{"a", {{0, 0.2}, {1, 0.4}}, false}});
  EXPECT_NE(svg.find(">0.5<"), std::string::npos);
  EXPECT_NE(svg.find(">1<"), std::string::npos);
  EXPECT_NE(svg.find("height=\"460.0\""), std::string::npos);  // one panel: the size sim's charts always had
}

TEST(SplitList, KeepsEmptyItems) {
  EXPECT_EQ(split_list("1.5G,8G,full"), (std::vector<std::string>{"1.5G", "8G", "full"}));
  EXPECT_EQ(split_list("8G"), (std::vector<std::string>{"8G"}));
  EXPECT_EQ(split_list(""), (std::vector<std::string>{""}));
  EXPECT_EQ(split_list("a,,b,"), (std::vector<std::string>{"a", "", "b", ""}));
  EXPECT_EQ(split_list("q4_K/t8", '/'), (std::vector<std::string>{"q4_K", "t8"}));
}

}  // namespace
}  // namespace ms
