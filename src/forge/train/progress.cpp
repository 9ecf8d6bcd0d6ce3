#include "forge/train/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

namespace forge {

Progress::Progress(int64_t total, int64_t start, bool enabled)
    : total_(total),
      start_(start),
      done_(start),
      tty_(enabled && isatty(fileno(stderr))),
      t0_(std::chrono::steady_clock::now()),
      last_draw_(t0_) {}

void Progress::draw() {
  if (!tty_ || finished_ || total_ <= 0) return;
  const double frac = static_cast<double>(done_) / total_;
  const int width = 30, filled = static_cast<int>(frac * width);
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  const double rate = done_ > start_ ? elapsed / (done_ - start_) : 0;
  const int eta = static_cast<int>(rate * (total_ - done_));
  fmt::print(stderr, "\r[{}{}] {}/{} loss {:.4f} eta {}m{:02d}s \033[K", std::string(filled, '#'),
             std::string(width - filled, '.'), done_, total_, value_, eta / 60, eta % 60);
  std::fflush(stderr);
}

void Progress::update(int64_t done, double value) {
  done_ = done;
  value_ = value;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ > std::chrono::milliseconds(100) || done_ == total_) {
    last_draw_ = now;
    draw();
  }
}

void Progress::message(const std::string& line) {
  if (tty_) fmt::print(stderr, "\r\033[K");
  fmt::print("{}\n", line);
  std::fflush(stdout);
  draw();
}

void Progress::finish() {
  if (tty_ && !finished_) fmt::print(stderr, "\r\033[K");
  finished_ = true;  // lines printed after the bar (the last validation, the summary) stay bare
}

}  // namespace forge
