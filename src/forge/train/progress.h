// Progress shown on long work: a bar on stderr that redraws in place when stderr is a
// terminal, and plain log lines on stdout that scroll above it.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace forge {

class Progress {
 public:
  // total units of work, start = units already done (a resumed run), enabled = may draw.
  Progress(int64_t total, int64_t start, bool enabled);
  void update(int64_t done, double value);  // value shown beside the bar (e.g. the loss)
  void message(const std::string& line);    // one line on stdout, bar redrawn below
  void finish();                            // clears the bar; it is not drawn again

 private:
  void draw();
  int64_t total_, start_, done_;
  double value_ = 0;
  bool tty_, finished_ = false;
  std::chrono::steady_clock::time_point t0_, last_draw_;
};

}  // namespace forge
