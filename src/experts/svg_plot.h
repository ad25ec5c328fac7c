// A small SVG line chart (hit rate vs capacity), written by hand so the
// simulator needs no plotting library.
#pragma once
#include <string>
#include <vector>

namespace ms {

struct PlotSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in x order
  bool dashed = false;
};

// y from 0 to 1 (a rate); x scaled to the data. Returns the SVG document.
std::string svg_line_chart(const std::string& title, const std::string& x_label, const std::string& y_label,
                           const std::vector<PlotSeries>& series);

}  // namespace ms
