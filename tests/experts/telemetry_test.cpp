// ExpertTelemetry's prefetch figures: the ratios, the JSON `bench --json`
// writes under experts.prefetch, and the run summary's line.
#include "experts/telemetry.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace ms {
namespace {

TEST(ExpertTelemetry, PrefetchRatiosJsonAndSummary) {
  PrefetchCounts none;
  EXPECT_EQ(none.precision(), 0.0);  // nothing predicted: 0, not a division by zero
  EXPECT_EQ(none.recall(), 0.0);
  EXPECT_EQ(none.staged_precision(), 0.0);
  EXPECT_EQ(none.cold_covered(), 0.0);

  ExpertTelemetry t;
  t.hybrid = true;
  t.prefetch_mode = "auto";
  t.stage_bytes = 3u << 20;
  PrefetchCounts p;
  p.layer_steps = 2;
  p.predicted = 16;
  p.correct = 12;
  p.routed = 16;
  p.staged = 8;
  p.staged_used = 6;
  p.cold = 10;
  t.prefetch = p;
  t.prefetch_layers = {PrefetchCounts{}, p};
  EXPECT_DOUBLE_EQ(p.precision(), 0.75);
  EXPECT_DOUBLE_EQ(p.recall(), 0.75);
  EXPECT_DOUBLE_EQ(p.staged_precision(), 0.75);
  EXPECT_DOUBLE_EQ(p.cold_covered(), 0.6);

  const nlohmann::json j = t.to_json();
  ASSERT_TRUE(j.contains("prefetch"));
  EXPECT_EQ(j["prefetch"]["mode"], "auto");
  EXPECT_EQ(j["prefetch"]["staged"], 8);
  EXPECT_EQ(j["prefetch"]["stage_bytes"], 3u << 20);
  EXPECT_DOUBLE_EQ(j["prefetch"]["precision"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(j["prefetch"]["cold_covered"].get<double>(), 0.6);
  ASSERT_EQ(j["prefetch"]["layers"].size(), 2u);
  EXPECT_EQ(j["prefetch"]["layers"][0]["layer_steps"], 0);
  EXPECT_EQ(j["prefetch"]["layers"][1]["correct"], 12);

  const std::string s = t.summary();
  EXPECT_NE(s.find("prefetch auto: prediction precision 75.0%, recall 75.0%; 8 staged"), std::string::npos) << s;
  EXPECT_NE(s.find("covering 60.0% of cold experts"), std::string::npos) << s;

  ExpertTelemetry off;
  off.hybrid = true;
  off.prefetch_mode = "off";
  EXPECT_NE(off.summary().find("experts: prefetch off\n"), std::string::npos);
  ExpertTelemetry idle = off;
  idle.prefetch_mode = "next";
  EXPECT_NE(idle.summary().find("prefetch next: no predictions made"), std::string::npos);
}

}  // namespace
}  // namespace ms
