#include "cuda/backend/link_timeline.h"

#include <algorithm>
#include <array>
#include <map>
#include <cstdio>
#include <string>

namespace ms {

void LinkTimeline::begin(cudaStream_t copy) {
  if (level_ <= 0) return;
  marks_.clear();
  compute_marks_.clear();
  start_.record(copy);
  active_ = true;
}

void LinkTimeline::mark(cudaStream_t copy, uint64_t bytes, int layer, bool demand) {
  if (!active_ || bytes == 0) return;
  if (events_.size() <= marks_.size()) events_.push_back(std::make_unique<cuda::Event>(true));
  events_[marks_.size()]->record(copy);
  marks_.push_back({bytes, layer, demand});
}

void LinkTimeline::mark_compute(cudaStream_t compute, int layer, int what) {
  if (!active_) return;
  if (compute_events_.size() <= compute_marks_.size()) compute_events_.push_back(std::make_unique<cuda::Event>(true));
  compute_events_[compute_marks_.size()]->record(compute);
  compute_marks_.push_back({layer, what});
}

void LinkTimeline::report(int n_tokens, double pass_s, double link_gbps) {
  if (!active_) return;
  active_ = false;
  if (marks_.empty() || link_gbps <= 0) return;
  double prev = 0, busy = 0, idle_routes = 0, idle_other = 0, end = 0;
  std::string worst;  // the largest route waits, "layer:ms"
  std::vector<std::pair<double, int>> waits;
  for (size_t i = 0; i < marks_.size(); ++i) {
    events_[i]->synchronize();
    const double t = events_[i]->ms_since(start_);
    const double b = double(marks_[i].bytes) / (link_gbps * 1e6);  // ms
    const double idle = std::max(0.0, (t - prev) - b);
    busy += b;
    const bool first_demand = marks_[i].demand && (i == 0 || !marks_[i - 1].demand || marks_[i - 1].layer != marks_[i].layer);
    if (first_demand) {
      idle_routes += idle;
      waits.push_back({idle, marks_[i].layer});
    } else {
      idle_other += idle;
    }
    prev = t;
    end = t;
  }
  std::sort(waits.rbegin(), waits.rend());
  for (size_t i = 0; i < std::min<size_t>(4, waits.size()); ++i)
    worst += (i ? ", " : "") + std::to_string(waits[i].second) + ":" + std::to_string(waits[i].first).substr(0, 4);
  std::fprintf(stderr,
               "moestream: link timeline, pass of %d tokens: %.1f ms; copies end at %.1f ms, busy %.1f ms at %.1f GB/s; "
               "idle %.1f ms before layers' demand copies (largest, layer:ms: %s), %.1f ms elsewhere\n",
               n_tokens, pass_s * 1e3, end, busy, link_gbps, idle_routes, worst.c_str(), idle_other);
  if (level_ < 2) return;
  // Per layer: when the GPU had its routes, its waves, its combine; when the
  // link started and ended its stage and its demand copies (ms from the start).
  std::map<int, std::array<double, 7>> rows;
  auto row = [&](int l) -> std::array<double, 7>& {
    auto it = rows.find(l);
    if (it == rows.end()) it = rows.emplace(l, std::array<double, 7>{-1, -1, -1, -1, -1, -1, -1}).first;
    return it->second;
  };
  for (size_t i = 0; i < compute_marks_.size(); ++i) {
    compute_events_[i]->synchronize();
    row(compute_marks_[i].layer)[static_cast<size_t>(compute_marks_[i].what)] = compute_events_[i]->ms_since(start_);
  }
  prev = 0;
  for (size_t i = 0; i < marks_.size(); ++i) {
    const double t = events_[i]->ms_since(start_);
    auto& r = row(marks_[i].layer);
    const size_t first = marks_[i].demand ? 5 : 3;
    if (r[first] < 0) r[first] = std::max(prev, t - double(marks_[i].bytes) / (link_gbps * 1e6));
    r[first + 1] = t;
    prev = t;
  }
  for (const auto& [l, r] : rows)
    std::fprintf(stderr, "  layer %2d: routes %7.2f waves %7.2f combine %7.2f | stage %7.2f-%7.2f demand %7.2f-%7.2f\n",
                 l, r[0], r[1], r[2], r[3], r[4], r[5], r[6]);
}

}  // namespace ms
