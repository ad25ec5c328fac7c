// `bench --vram A,B,..`: one row of figures per VRAM budget, and how they are
// shown: a markdown summary table, JSON, and an SVG chart of tokens/s against
// the budget beside the decode floor (experts/floor.h). Plain data in, text
// out; the measuring is bench's.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace ms {

struct BudgetRow {
  std::string vram;       // as given: "8G", "full", "" (the default budget)
  double budget_gib = 0;  // where the row sits on the x axis ("full": the model's size)
  bool hybrid = false;    // false: every expert resident (no hit rate, H2D or CPU share to show)
  double pp_tps = 0, tg_tps = 0;  // 0: not measured (-p 0 / -n 0)
  double hit_rate = 0, h2d_gbps = 0, cpu_share = 0;  // over all (token, expert) pairs of the run
  double floor_tps = 0;   // decode floor at this budget; 0: unknown
  std::string floor_bound;  // "hbm", "pcie", "cpu", "host memory" (or "" where the all-resident floor was used)
};

// `| budget | pp512 t/s | tg128 t/s | hit | H2D GB/s | CPU share | floor tok/s | of floor |`
std::string budget_table(const std::vector<BudgetRow>& rows, int n_prompt, int n_gen);
nlohmann::json budget_row_json(const BudgetRow& r);
// Two panels over the budget in GiB: decode (tg, and the floor dashed) on top,
// prompt (pp) below; a series with no figures (not measured, floor unknown)
// is left out, and so is a panel left empty.
std::string budget_svg(const std::vector<BudgetRow>& rows, const std::string& title, int n_prompt, int n_gen);

}  // namespace ms
