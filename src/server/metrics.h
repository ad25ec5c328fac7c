// Counters the server exports at GET /metrics (Prometheus text format):
// requests by endpoint and status, prompt/completion/cached tokens,
// generated tokens/s over the last 10 s, queue depth and active slots, and
// the expert telemetry of the backend.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "experts/telemetry.h"

namespace ms::server {

// The expert telemetry /metrics exports: where routed experts ran, for
// backends that tier them (the CUDA backend with a --vram budget below the
// model). Backends that do not (the CPU backend, an all-resident GPU) leave
// `available` false and the numbers 0.
struct ExpertMetrics {
  bool available = false;
  double hit_rate = 0;           // routed (token, expert) pairs found resident in VRAM / all routed
  uint64_t h2d_bytes = 0;        // expert bytes copied host -> device so far
  double cpu_expert_share = 0;   // routed pairs computed on the CPU / all routed
};

// The backend's telemetry (Backend::expert_telemetry) as /metrics reports it.
ExpertMetrics expert_metrics(const ExpertTelemetry& t);

class Metrics {
 public:
  using Clock = std::chrono::steady_clock;

  void request(const std::string& endpoint, int status);
  void tokens(int prompt, int cached, int completion);
  // A request that ended before its answer was complete (client gone, shutdown).
  void cancelled();
  void generated_token(Clock::time_point t = Clock::now());
  void set_queue(size_t queued, int active);
  // The HTTP side's connections: served now, and refused so far.
  void set_connections(size_t open, uint64_t refused);
  // A snapshot of the backend's expert telemetry. The backend may only be
  // asked on the thread that runs its forward passes, so the scheduler's
  // worker sets this after its passes and a scrape reads the copy.
  void set_experts(const ExpertMetrics& e);

  // One decode step of the scheduler over `batch` sequences (the batch size histogram).
  void decode_step(size_t batch);
  // The prompt tokens one scheduler step carried (its prompt chunks; 0 for a
  // step of decodes only): the steps counter and the prompt tokens counter.
  void step_prompt_tokens(size_t n);
  // Seconds from a request's arrival to its first sampled token (queue and prefill included).
  void time_to_first_token(double seconds);
  // A slot's decode rate: tokens after the first / seconds since the first,
  // of its running or last request.
  void slot_tokens_per_second(int slot, double rate);

  // Speculative decoding (serve --spec): one slot's verify fed `drafted`
  // drafts; the first `judged` were compared with the sampled tokens (the
  // rest came after a rejection or the job's end), the first `accepted`
  // kept; it emitted `emitted` tokens. Counts by draft position too.
  void spec_verify(size_t drafted, size_t judged, size_t accepted, size_t emitted);
  // A scheduler step with speculation on, carrying `drafts` drafts in all
  // (0: none), took `seconds` (its sampling, drafting and forward).
  void spec_step(size_t drafts, double seconds);

  // Generated tokens per second over the last `window` seconds (all slots).
  double tokens_per_second(double window = 10.0) const;
  // The Prometheus exposition text.
  std::string render() const;

 private:
  mutable std::mutex m_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  uint64_t prompt_tokens_ = 0, cached_tokens_ = 0, completion_tokens_ = 0, cancelled_ = 0;
  size_t queued_ = 0;
  int active_ = 0;
  size_t connections_open_ = 0;
  uint64_t connections_refused_ = 0;
  mutable std::deque<Clock::time_point> recent_;
  Clock::time_point start_ = Clock::now();
  ExpertMetrics experts_;
  // Prometheus histograms: cumulative counts per upper bound (+Inf last), sum, count.
  struct Histogram {
    std::vector<double> bounds;
    std::vector<uint64_t> counts;  // per bound, not cumulative; one more for +Inf
    double sum = 0;
    uint64_t n = 0;
    explicit Histogram(std::vector<double> b) : bounds(std::move(b)), counts(bounds.size() + 1, 0) {}
    void add(double v);
  };
  Histogram batch_{{1, 2, 4, 8, 16, 32, 64, 128}};
  Histogram ttft_{{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}};
  std::map<int, double> slot_rate_;
  uint64_t steps_ = 0, steps_with_prompt_ = 0, step_prompt_tokens_ = 0;
  uint64_t spec_verifies_ = 0, spec_drafted_ = 0, spec_accepted_ = 0, spec_emitted_ = 0;
  std::vector<uint64_t> spec_tried_at_, spec_accepted_at_;  // by draft position
  // Steps by their drafts (the label's bucket: 0, 1, 2-3, 4-7, ... as its
  // lower bound): count and seconds.
  std::map<size_t, std::pair<uint64_t, double>> spec_steps_;
};

}  // namespace ms::server
