#include "experts/budget_sweep.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "experts/svg_plot.h"

namespace ms {
namespace {

std::string fixed(double v, const char* fmt) {
  char b[64];
  std::snprintf(b, sizeof b, fmt, v);
  return b;
}

// A figure that was not measured (or does not apply) shows as a dash.
std::string figure(double v, const char* fmt, bool shown = true) { return shown && v > 0 ? fixed(v, fmt) : "—"; }

std::string name_of(const BudgetRow& r) { return r.vram.empty() ? "default" : r.vram; }

}  // namespace

std::string budget_table(const std::vector<BudgetRow>& rows, int n_prompt, int n_gen) {
  std::string out = "| budget | pp" + std::to_string(n_prompt) + " t/s | tg" + std::to_string(n_gen) +
                    " t/s | hit | H2D GB/s | CPU share | floor tok/s | of floor |\n"
                    "|---|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const BudgetRow& r : rows) {
    // All-resident rows: every pair a hit, nothing copied or run on the CPU.
    const std::string hit = r.hybrid ? fixed(100 * r.hit_rate, "%.1f%%") : "100%";
    const std::string cpu = r.hybrid ? fixed(100 * r.cpu_share, "%.1f%%") : "0%";
    const bool of = r.tg_tps > 0 && r.floor_tps > 0;
    out += "| " + name_of(r) + " | " + figure(r.pp_tps, "%.1f") + " | " + figure(r.tg_tps, "%.1f") + " | " + hit +
           " | " + figure(r.h2d_gbps, "%.1f", r.hybrid) + " | " + cpu + " | " + figure(r.floor_tps, "%.1f") + " | " +
           (of ? fixed(100 * r.tg_tps / r.floor_tps, "%.0f%%") : "—") + " |\n";
  }
  return out;
}

nlohmann::json budget_row_json(const BudgetRow& r) {
  nlohmann::json j{{"vram", name_of(r)}, {"budget_gib", r.budget_gib}, {"hybrid", r.hybrid},
                   {"pp_tps", r.pp_tps}, {"tg_tps", r.tg_tps},         {"floor_tps", r.floor_tps},
                   {"of_floor", r.floor_tps > 0 ? r.tg_tps / r.floor_tps : 0.0}};
  if (!r.floor_bound.empty()) j["floor_bound"] = r.floor_bound;
  if (r.hybrid) {
    j["hit_rate"] = r.hit_rate;
    j["h2d_gbps"] = r.h2d_gbps;
    j["cpu_share"] = r.cpu_share;
  }
  return j;
}

std::string budget_svg(const std::vector<BudgetRow>& rows, const std::string& title, int n_prompt, int n_gen) {
  const std::string tg = "tg" + std::to_string(n_gen), pp = "pp" + std::to_string(n_prompt);
  PlotSeries tg_line{tg, {}, false}, floor_line{"decode floor", {}, true}, pp_line{pp, {}, false};
  XTicks ticks;  // at each budget, named as given
  for (const BudgetRow& r : rows) {
    ticks.push_back({r.budget_gib, name_of(r)});
    if (r.tg_tps > 0) tg_line.points.push_back({r.budget_gib, r.tg_tps});
    if (r.floor_tps > 0) floor_line.points.push_back({r.budget_gib, r.floor_tps});
    if (r.pp_tps > 0) pp_line.points.push_back({r.budget_gib, r.pp_tps});
  }
  std::vector<PlotPanel> panels;
  PlotPanel decode{"decode (" + tg + ") tokens/s", {}, 0};
  if (!tg_line.points.empty()) decode.series.push_back(tg_line);
  if (!floor_line.points.empty()) decode.series.push_back(floor_line);
  if (!decode.series.empty()) panels.push_back(decode);
  if (!pp_line.points.empty()) panels.push_back(PlotPanel{"prompt (" + pp + ") tokens/s", {pp_line}, 0});
  return svg_line_panels(title, "VRAM budget (GiB; full = the model's size)", panels, ticks);
}

}  // namespace ms
