// A small SVG line chart, written by hand so the simulator and bench need no
// plotting library: hit rate vs capacity (`sim`), tokens/s vs VRAM budget
// (`bench --svg`).
#pragma once
#include <string>
#include <vector>

namespace ms {

struct PlotSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in x order
  bool dashed = false;
};

// One plot area with its own y axis, from 0 to y_max.
struct PlotPanel {
  std::string y_label;
  std::vector<PlotSeries> series;
  double y_max = 1;  // <= 0: a round number at or above the largest y
};

// y from 0 to 1 (a rate); x scaled to the data. Returns the SVG document.
std::string svg_line_chart(const std::string& title, const std::string& x_label, const std::string& y_label,
                           const std::vector<PlotSeries>& series);

// Panels stacked top to bottom over one x axis (scaled to all their data),
// so series of different magnitudes each get a readable y axis. `x_ticks`:
// where to mark the x axis and with what ("8G" at 8); empty: six even ticks.
using XTicks = std::vector<std::pair<double, std::string>>;
std::string svg_line_panels(const std::string& title, const std::string& x_label,
                            const std::vector<PlotPanel>& panels, const XTicks& x_ticks = {});

}  // namespace ms
