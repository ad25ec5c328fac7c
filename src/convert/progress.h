// A progress line for long conversions: bytes done of the total, rate and the
// tensor being written, refreshed at most about once a second (in place on a
// terminal, as plain lines every ~10 s when stderr is a file or pipe).
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace ms {

class ProgressMeter {
 public:
  ProgressMeter(uint64_t total_bytes, bool enabled, std::FILE* out = stderr);
  void set_label(const std::string& label) { label_ = label; }
  void add(uint64_t bytes);  // prints when due
  void finish();             // prints the final line (if enabled) and ends it
  uint64_t done() const { return done_; }

 private:
  void print(bool final_line);
  using Clock = std::chrono::steady_clock;
  uint64_t total_;
  uint64_t done_ = 0;
  bool enabled_;
  bool tty_;
  std::FILE* out_;
  std::string label_;
  Clock::time_point start_, last_;
};

}  // namespace ms
