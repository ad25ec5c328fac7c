#include "server/metrics.h"

#include <algorithm>
#include <cstdio>

namespace ms::server {

ExpertMetrics expert_metrics(const ExpertTelemetry& t) {
  ExpertMetrics m;
  if (!t.hybrid) return m;  // every expert in one place: nothing to report
  m.available = true;
  const TierCounts all = t.all();
  m.hit_rate = all.hit_rate();
  m.cpu_expert_share = all.total() ? static_cast<double>(all.host) / static_cast<double>(all.total()) : 0.0;
  m.h2d_bytes = t.h2d_bytes;
  return m;
}

void Metrics::request(const std::string& endpoint, int status) {
  std::lock_guard lk(m_);
  ++requests_[{endpoint, status}];
}

void Metrics::tokens(int prompt, int cached, int completion) {
  std::lock_guard lk(m_);
  prompt_tokens_ += static_cast<uint64_t>(std::max(prompt, 0));
  cached_tokens_ += static_cast<uint64_t>(std::max(cached, 0));
  completion_tokens_ += static_cast<uint64_t>(std::max(completion, 0));
}

void Metrics::cancelled() {
  std::lock_guard lk(m_);
  ++cancelled_;
}

void Metrics::generated_token(Clock::time_point t) {
  std::lock_guard lk(m_);
  recent_.push_back(t);
  // Bounded: a minute of tokens at most.
  while (!recent_.empty() && t - recent_.front() > std::chrono::seconds(60)) recent_.pop_front();
}

void Metrics::set_queue(size_t queued, int active) {
  std::lock_guard lk(m_);
  queued_ = queued;
  active_ = active;
}

void Metrics::set_connections(size_t open, uint64_t refused) {
  std::lock_guard lk(m_);
  connections_open_ = open;
  connections_refused_ = refused;
}

void Metrics::set_experts(const ExpertMetrics& e) {
  std::lock_guard lk(m_);
  experts_ = e;
}

void Metrics::Histogram::add(double v) {
  size_t i = 0;
  while (i < bounds.size() && v > bounds[i]) ++i;
  ++counts[i];
  sum += v;
  ++n;
}

void Metrics::decode_step(size_t batch) {
  std::lock_guard lk(m_);
  batch_.add(static_cast<double>(batch));
}

void Metrics::step_prompt_tokens(size_t n) {
  std::lock_guard lk(m_);
  ++steps_;
  if (n > 0) ++steps_with_prompt_;
  step_prompt_tokens_ += n;
}

void Metrics::time_to_first_token(double seconds) {
  std::lock_guard lk(m_);
  ttft_.add(seconds);
}

void Metrics::slot_tokens_per_second(int slot, double rate) {
  std::lock_guard lk(m_);
  slot_rate_[slot] = rate;
}

void Metrics::spec_verify(size_t drafted, size_t judged, size_t accepted, size_t emitted) {
  std::lock_guard lk(m_);
  ++spec_verifies_;
  spec_drafted_ += drafted;
  spec_accepted_ += accepted;
  spec_emitted_ += emitted;
  if (spec_tried_at_.size() < judged) {
    spec_tried_at_.resize(judged, 0);
    spec_accepted_at_.resize(judged, 0);
  }
  for (size_t j = 0; j < judged; ++j) {
    ++spec_tried_at_[j];
    if (j < accepted) ++spec_accepted_at_[j];
  }
}

void Metrics::spec_step(size_t drafts, double seconds) {
  size_t bucket = 0;  // the largest power of two <= drafts (0 for none)
  while (drafts > 0 && bucket * 2 <= drafts) bucket = bucket ? bucket * 2 : 1;
  std::lock_guard lk(m_);
  auto& [n, secs] = spec_steps_[bucket];
  ++n;
  secs += seconds;
}

double Metrics::tokens_per_second(double window) const {
  std::lock_guard lk(m_);
  const auto now = Clock::now();
  const double up = std::chrono::duration<double>(now - start_).count();
  const double w = std::min(window, std::max(up, 1e-3));
  size_t n = 0;
  for (auto it = recent_.rbegin(); it != recent_.rend(); ++it) {
    if (std::chrono::duration<double>(now - *it).count() > w) break;
    ++n;
  }
  return static_cast<double>(n) / w;
}

std::string Metrics::render() const {
  const double tps = tokens_per_second();
  std::lock_guard lk(m_);
  const ExpertMetrics& ex = experts_;
  std::string out;
  char line[256];
  auto metric = [&](const char* name, const char* type, const char* help) {
    std::snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
    out += line;
  };
  auto value = [&](const char* name, double v) {
    std::snprintf(line, sizeof line, "%s %.17g\n", name, v);
    out += line;
  };
  metric("moestream_requests_total", "counter", "HTTP requests by endpoint and status");
  for (const auto& [key, n] : requests_) {
    std::snprintf(line, sizeof line, "moestream_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n",
                  key.first.c_str(), key.second, static_cast<unsigned long long>(n));
    out += line;
  }
  metric("moestream_prompt_tokens_total", "counter", "prompt tokens of finished requests (cached ones included)");
  value("moestream_prompt_tokens_total", static_cast<double>(prompt_tokens_));
  metric("moestream_prompt_cached_tokens_total", "counter", "prompt tokens reused from the prompt cache");
  value("moestream_prompt_cached_tokens_total", static_cast<double>(cached_tokens_));
  metric("moestream_completion_tokens_total", "counter", "generated tokens of finished requests");
  value("moestream_completion_tokens_total", static_cast<double>(completion_tokens_));
  metric("moestream_requests_cancelled_total", "counter",
         "generations stopped before their end (the client went away, or a shutdown)");
  value("moestream_requests_cancelled_total", static_cast<double>(cancelled_));
  metric("moestream_tokens_per_second", "gauge", "generated tokens per second over the last 10 s, all slots");
  value("moestream_tokens_per_second", tps);
  auto histogram = [&](const char* name, const Histogram& h) {
    uint64_t cum = 0;
    for (size_t i = 0; i <= h.bounds.size(); ++i) {
      cum += h.counts[i];
      if (i < h.bounds.size()) std::snprintf(line, sizeof line, "%s_bucket{le=\"%g\"} %llu\n", name, h.bounds[i], static_cast<unsigned long long>(cum));
      else std::snprintf(line, sizeof line, "%s_bucket{le=\"+Inf\"} %llu\n", name, static_cast<unsigned long long>(cum));
      out += line;
    }
    std::snprintf(line, sizeof line, "%s_sum %.17g\n%s_count %llu\n", name, h.sum, name, static_cast<unsigned long long>(h.n));
    out += line;
  };
  metric("moestream_decode_batch_size", "histogram", "sequences decoded together per scheduler step");
  histogram("moestream_decode_batch_size", batch_);
  metric("moestream_steps_total", "counter", "scheduler steps (one backend forward_seqs call each)");
  value("moestream_steps_total", static_cast<double>(steps_));
  metric("moestream_steps_with_prompt_total", "counter", "scheduler steps that carried prompt chunks");
  value("moestream_steps_with_prompt_total", static_cast<double>(steps_with_prompt_));
  metric("moestream_step_prompt_tokens_total", "counter", "prompt tokens read in scheduler steps (chunked prefill)");
  value("moestream_step_prompt_tokens_total", static_cast<double>(step_prompt_tokens_));
  metric("moestream_time_to_first_token_seconds", "histogram",
         "from a request's arrival to its first sampled token (queue wait and prefill included)");
  histogram("moestream_time_to_first_token_seconds", ttft_);
  metric("moestream_slot_tokens_per_second", "gauge",
         "each slot's decode rate over its running or last request (tokens after the first / time since it)");
  for (const auto& [slot, rate] : slot_rate_) {
    std::snprintf(line, sizeof line, "moestream_slot_tokens_per_second{slot=\"%d\"} %.17g\n", slot, rate);
    out += line;
  }
  metric("moestream_spec_verifies_total", "counter",
         "speculative verifies (one slot's token and its drafts in a step)");
  value("moestream_spec_verifies_total", static_cast<double>(spec_verifies_));
  metric("moestream_spec_drafted_tokens_total", "counter", "draft tokens fed to verifies");
  value("moestream_spec_drafted_tokens_total", static_cast<double>(spec_drafted_));
  metric("moestream_spec_accepted_tokens_total", "counter", "draft tokens kept (each was the token sampled there)");
  value("moestream_spec_accepted_tokens_total", static_cast<double>(spec_accepted_));
  metric("moestream_spec_verify_emitted_tokens_total", "counter",
         "tokens emitted from verifies (the kept drafts and one sampled token each)");
  value("moestream_spec_verify_emitted_tokens_total", static_cast<double>(spec_emitted_));
  auto by_pos = [&](const char* name, const std::vector<uint64_t>& v) {
    for (size_t j = 0; j < v.size(); ++j) {
      std::snprintf(line, sizeof line, "%s{pos=\"%zu\"} %llu\n", name, j, static_cast<unsigned long long>(v[j]));
      out += line;
    }
  };
  metric("moestream_spec_position_judged_total", "counter",
         "drafts compared with the sampled token, by draft position (0: the first draft)");
  by_pos("moestream_spec_position_judged_total", spec_tried_at_);
  metric("moestream_spec_position_accepted_total", "counter", "drafts kept, by draft position");
  by_pos("moestream_spec_position_accepted_total", spec_accepted_at_);
  metric("moestream_spec_steps_total", "counter",
         "scheduler steps with speculation on, by their drafts (label: the power-of-two bucket's lower bound)");
  for (const auto& [b, v] : spec_steps_) {
    std::snprintf(line, sizeof line, "moestream_spec_steps_total{drafts=\"%zu\"} %llu\n", b,
                  static_cast<unsigned long long>(v.first));
    out += line;
  }
  metric("moestream_spec_step_seconds_total", "counter", "time of those steps, by the same buckets");
  for (const auto& [b, v] : spec_steps_) {
    std::snprintf(line, sizeof line, "moestream_spec_step_seconds_total{drafts=\"%zu\"} %.17g\n", b, v.second);
    out += line;
  }
  metric("moestream_queue_depth", "gauge", "requests waiting for a slot");
  value("moestream_queue_depth", static_cast<double>(queued_));
  metric("moestream_active_slots", "gauge", "slots generating now");
  value("moestream_active_slots", active_);
  metric("moestream_http_connections_open", "gauge", "HTTP connections being served (--max-connections caps them)");
  value("moestream_http_connections_open", static_cast<double>(connections_open_));
  metric("moestream_http_connections_refused_total", "counter",
         "connections answered 503 at once: past --max-connections and the overflow queue");
  value("moestream_http_connections_refused_total", static_cast<double>(connections_refused_));
  metric("moestream_expert_telemetry_available", "gauge",
         "1 when the backend tiers experts and reports the expert_* values (else they are 0)");
  value("moestream_expert_telemetry_available", ex.available ? 1 : 0);
  metric("moestream_expert_hit_rate", "gauge", "routed experts found resident in VRAM / all routed");
  value("moestream_expert_hit_rate", ex.hit_rate);
  metric("moestream_expert_h2d_bytes_total", "counter", "expert bytes copied host to device");
  value("moestream_expert_h2d_bytes_total", static_cast<double>(ex.h2d_bytes));
  metric("moestream_expert_cpu_share", "gauge", "routed experts computed on the CPU / all routed");
  value("moestream_expert_cpu_share", ex.cpu_expert_share);
  return out;
}

}  // namespace ms::server
