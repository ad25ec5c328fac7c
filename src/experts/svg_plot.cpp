#include "experts/svg_plot.h"

#include <algorithm>
#include <cstdio>

// GCC 12 warns falsely on "literal" + std::string chains (GCC bug 105329).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wrestrict"
#endif

namespace ms {
namespace {

std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

std::string label(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", v);
  return b;
}

}  // namespace

std::string svg_line_chart(const std::string& title, const std::string& x_label, const std::string& y_label,
                           const std::vector<PlotSeries>& series) {
  const double W = 720, H = 460, left = 70, right = 200, top = 40, bottom = 60;
  const double pw = W - left - right, ph = H - top - bottom;
  double xmin = 1e300, xmax = -1e300;
  for (const auto& s : series)
    for (const auto& [x, y] : s.points) xmin = std::min(xmin, x), xmax = std::max(xmax, x);
  if (xmin > xmax) xmin = 0, xmax = 1;
  if (xmin == xmax) xmin -= 0.5, xmax += 0.5;
  const auto X = [&](double x) { return left + (x - xmin) / (xmax - xmin) * pw; };
  const auto Y = [&](double y) { return top + (1 - std::clamp(y, 0.0, 1.0)) * ph; };
  static const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                                 "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"};
  std::string o = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(W) + "\" height=\"" + num(H) +
                  "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  o += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o += "<text x=\"" + num(W / 2 - right / 2) + "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">" + escape(title) + "</text>\n";
  // Grid and ticks.
  for (int i = 0; i <= 10; ++i) {
    const double y = i / 10.0;
    o += "<line x1=\"" + num(left) + "\" x2=\"" + num(left + pw) + "\" y1=\"" + num(Y(y)) + "\" y2=\"" + num(Y(y)) +
         "\" stroke=\"#e0e0e0\"/>\n";
    o += "<text x=\"" + num(left - 6) + "\" y=\"" + num(Y(y) + 4) + "\" text-anchor=\"end\">" + label(y) + "</text>\n";
  }
  for (int i = 0; i <= 5; ++i) {
    const double x = xmin + (xmax - xmin) * i / 5;
    o += "<line x1=\"" + num(X(x)) + "\" x2=\"" + num(X(x)) + "\" y1=\"" + num(top + ph) + "\" y2=\"" + num(top + ph + 5) +
         "\" stroke=\"black\"/>\n";
    o += "<text x=\"" + num(X(x)) + "\" y=\"" + num(top + ph + 18) + "\" text-anchor=\"middle\">" + label(x) + "</text>\n";
  }
  o += "<rect x=\"" + num(left) + "\" y=\"" + num(top) + "\" width=\"" + num(pw) + "\" height=\"" + num(ph) +
       "\" fill=\"none\" stroke=\"black\"/>\n";
  o += "<text x=\"" + num(left + pw / 2) + "\" y=\"" + num(H - 15) + "\" text-anchor=\"middle\">" + escape(x_label) + "</text>\n";
  o += "<text transform=\"translate(18," + num(top + ph / 2) + ") rotate(-90)\" text-anchor=\"middle\">" +
       escape(y_label) + "</text>\n";
  size_t color = 0;
  for (size_t i = 0; i < series.size(); ++i) {
    const PlotSeries& s = series[i];
    const std::string c = s.dashed ? "black" : colors[color++ % 10];
    auto pts = s.points;
    std::sort(pts.begin(), pts.end());
    std::string path;
    for (const auto& [x, y] : pts) path += (path.empty() ? "" : " ") + num(X(x)) + "," + num(Y(y));
    o += "<polyline fill=\"none\" stroke=\"" + c + "\" stroke-width=\"2\"" +
         (s.dashed ? std::string(" stroke-dasharray=\"6,4\"") : std::string()) + " points=\"" + path + "\"/>\n";
    for (const auto& [x, y] : pts)
      o += "<circle cx=\"" + num(X(x)) + "\" cy=\"" + num(Y(y)) + "\" r=\"3\" fill=\"" + c + "\"/>\n";
    const double ly = top + 10 + 18 * double(i);
    o += "<line x1=\"" + num(left + pw + 15) + "\" x2=\"" + num(left + pw + 40) + "\" y1=\"" + num(ly) + "\" y2=\"" +
         num(ly) + "\" stroke=\"" + c + "\" stroke-width=\"2\"" +
         (s.dashed ? std::string(" stroke-dasharray=\"6,4\"") : std::string()) + "/>\n";
    o += "<text x=\"" + num(left + pw + 46) + "\" y=\"" + num(ly + 4) + "\">" + escape(s.name) + "</text>\n";
  }
  o += "</svg>\n";
  return o;
}

}  // namespace ms
