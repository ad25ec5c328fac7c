#include "convert/progress.h"

#include <unistd.h>

#include "util/bytes.h"

namespace ms {

ProgressMeter::ProgressMeter(uint64_t total_bytes, bool enabled, std::FILE* out)
    : total_(total_bytes), enabled_(enabled), tty_(isatty(fileno(out)) != 0), out_(out) {
  start_ = last_ = Clock::now();
}

void ProgressMeter::add(uint64_t bytes) {
  done_ += bytes;
  if (!enabled_) return;
  const auto now = Clock::now();
  const auto every = tty_ ? std::chrono::milliseconds(1000) : std::chrono::milliseconds(10000);
  if (now - last_ >= every) {
    last_ = now;
    print(false);
  }
}

void ProgressMeter::finish() {
  if (!enabled_) return;
  print(true);
}

void ProgressMeter::print(bool final_line) {
  const double secs = std::chrono::duration<double>(Clock::now() - start_).count();
  const double pct = total_ ? 100.0 * static_cast<double>(done_) / static_cast<double>(total_) : 100.0;
  const double rate = secs > 0 ? static_cast<double>(done_) / secs : 0.0;
  std::string eta;
  if (!final_line && rate > 0 && done_ < total_)
    eta = ", " + std::to_string(static_cast<long long>(static_cast<double>(total_ - done_) / rate)) + " s left";
  std::fprintf(out_, "%sconvert: %s / %s (%5.1f%%), %s/s%s  %s%s", tty_ ? "\r\033[K" : "",
               format_bytes(done_).c_str(), format_bytes(total_).c_str(), pct,
               format_bytes(static_cast<uint64_t>(rate)).c_str(), eta.c_str(), final_line ? "done" : label_.c_str(),
               (final_line || !tty_) ? "\n" : "");
  std::fflush(out_);
}

}  // namespace ms
