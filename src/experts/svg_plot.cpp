#include "experts/svg_plot.h"

#include <algorithm>
#include <cmath>
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

// Three significant digits, but whole numbers from 1000 up in full: a
// tokens/s axis reads 2000, not 2e+03.
std::string label(double v) {
  char b[32];
  std::snprintf(b, sizeof b, v >= 1000 && v < 1e9 ? "%.0f" : "%.3g", v);
  return b;
}

// The smallest 1, 2 or 5 x 10^k at or above v, so ten grid steps land on
// round numbers.
double round_up(double v) {
  if (!(v > 0)) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= v * (1 - 1e-12)) return m * p;
  return 10 * p;
}

constexpr double kW = 720, kLeft = 70, kRight = 200, kTop = 40, kBottom = 60, kPanelH = 360, kGap = 50;
const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                               "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"};

std::string dash(bool dashed) { return dashed ? " stroke-dasharray=\"6,4\"" : ""; }

// One panel whose plot area starts `top` pixels down: grid, ticks, frame,
// y label, lines with their points, legend.
std::string panel(const PlotPanel& p, double top, double xmin, double xmax, const XTicks& x_ticks) {
  const double pw = kW - kLeft - kRight, ph = kPanelH;
  double ymax = p.y_max;
  if (ymax <= 0) {
    for (const auto& s : p.series)
      for (const auto& pt : s.points) ymax = std::max(ymax, pt.second);
    ymax = round_up(ymax);
  }
  const auto X = [&](double x) { return kLeft + (x - xmin) / (xmax - xmin) * pw; };
  const auto Y = [&](double y) { return top + (1 - std::clamp(y / ymax, 0.0, 1.0)) * ph; };
  std::string o;
  for (int i = 0; i <= 10; ++i) {
    const double y = ymax * i / 10.0;
    o += "<line x1=\"" + num(kLeft) + "\" x2=\"" + num(kLeft + pw) + "\" y1=\"" + num(Y(y)) + "\" y2=\"" + num(Y(y)) +
         "\" stroke=\"#e0e0e0\"/>\n";
    o += "<text x=\"" + num(kLeft - 6) + "\" y=\"" + num(Y(y) + 4) + "\" text-anchor=\"end\">" + label(y) + "</text>\n";
  }
  XTicks ticks = x_ticks;
  if (ticks.empty())
    for (int i = 0; i <= 5; ++i) ticks.push_back({xmin + (xmax - xmin) * i / 5, label(xmin + (xmax - xmin) * i / 5)});
  for (const auto& [x, text] : ticks) {
    o += "<line x1=\"" + num(X(x)) + "\" x2=\"" + num(X(x)) + "\" y1=\"" + num(top + ph) + "\" y2=\"" +
         num(top + ph + 5) + "\" stroke=\"black\"/>\n";
    o += "<text x=\"" + num(X(x)) + "\" y=\"" + num(top + ph + 18) + "\" text-anchor=\"middle\">" +
         escape(text) + "</text>\n";
  }
  o += "<rect x=\"" + num(kLeft) + "\" y=\"" + num(top) + "\" width=\"" + num(pw) + "\" height=\"" + num(ph) +
       "\" fill=\"none\" stroke=\"black\"/>\n";
  o += "<text transform=\"translate(18," + num(top + ph / 2) + ") rotate(-90)\" text-anchor=\"middle\">" +
       escape(p.y_label) + "</text>\n";
  size_t color = 0;
  for (size_t i = 0; i < p.series.size(); ++i) {
    const PlotSeries& s = p.series[i];
    const std::string c = s.dashed ? "black" : kColors[color++ % 10];
    auto pts = s.points;
    std::sort(pts.begin(), pts.end());
    std::string path;
    for (const auto& [x, y] : pts) path += (path.empty() ? "" : " ") + num(X(x)) + "," + num(Y(y));
    o += "<polyline fill=\"none\" stroke=\"" + c + "\" stroke-width=\"2\"" + dash(s.dashed) + " points=\"" + path +
         "\"/>\n";
    for (const auto& [x, y] : pts)
      o += "<circle cx=\"" + num(X(x)) + "\" cy=\"" + num(Y(y)) + "\" r=\"3\" fill=\"" + c + "\"/>\n";
    const double ly = top + 10 + 18 * double(i);
    o += "<line x1=\"" + num(kLeft + pw + 15) + "\" x2=\"" + num(kLeft + pw + 40) + "\" y1=\"" + num(ly) +
         "\" y2=\"" + num(ly) + "\" stroke=\"" + c + "\" stroke-width=\"2\"" + dash(s.dashed) + "/>\n";
    o += "<text x=\"" + num(kLeft + pw + 46) + "\" y=\"" + num(ly + 4) + "\">" + escape(s.name) + "</text>\n";
  }
  return o;
}

}  // namespace

std::string svg_line_chart(const std::string& title, const std::string& x_label, const std::string& y_label,
                           const std::vector<PlotSeries>& series) {
  return svg_line_panels(title, x_label, {PlotPanel{y_label, series, 1}});
}

std::string svg_line_panels(const std::string& title, const std::string& x_label,
                            const std::vector<PlotPanel>& panels, const XTicks& x_ticks) {
  const double n = double(std::max<size_t>(panels.size(), 1));
  const double H = kTop + n * kPanelH + (n - 1) * kGap + kBottom;
  double xmin = 1e300, xmax = -1e300;
  for (const auto& p : panels)
    for (const auto& s : p.series)
      for (const auto& pt : s.points) xmin = std::min(xmin, pt.first), xmax = std::max(xmax, pt.first);
  if (xmin > xmax) xmin = 0, xmax = 1;
  if (xmin == xmax) xmin -= 0.5, xmax += 0.5;
  std::string o = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(kW) + "\" height=\"" + num(H) +
                  "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  o += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o += "<text x=\"" + num(kW / 2 - kRight / 2) + "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">" +
       escape(title) + "</text>\n";
  for (size_t i = 0; i < panels.size(); ++i) o += panel(panels[i], kTop + double(i) * (kPanelH + kGap), xmin, xmax, x_ticks);
  o += "<text x=\"" + num(kLeft + (kW - kLeft - kRight) / 2) + "\" y=\"" + num(H - 15) +
       "\" text-anchor=\"middle\">" + escape(x_label) + "</text>\n";
  o += "</svg>\n";
  return o;
}

}  // namespace ms
