// Shoal's log lines in a process that uses the C ABI: to stderr (spdlog's usual format) or to
// the application's callback (shoal_set_log_callback). One sink for the process's lifetime,
// installed as spdlog's default logger once; shoal_set_log_callback only swaps (fn, user)
// under the sink's mutex, which every line holds while it is written, so once the swap
// returns the old callback is never called again, and no logger is ever freed under a thread
// that is logging.
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <mutex>
#include <string>

#include "capi/capi.h"

namespace shoal::capi {
namespace {

class RoutingSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  RoutingSink()
      : stderr_(std::make_shared<spdlog::sinks::stderr_color_sink_mt>()),
        plain_(std::make_unique<spdlog::pattern_formatter>("%v")) {}
  void Route(shoal_log_fn fn, void* user) {
    std::lock_guard<std::mutex> lock(mutex_);
    fn_ = fn;
    user_ = user;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (!fn_) {
      stderr_->log(msg);
      return;
    }
    spdlog::memory_buf_t line;
    plain_->format(msg, line);
    std::string text(line.data(), line.size());
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    fn_(user_, static_cast<int>(msg.level), text.c_str());
  }
  void flush_() override {
    if (!fn_) stderr_->flush();
  }

 private:
  std::shared_ptr<spdlog::sinks::sink> stderr_;
  std::unique_ptr<spdlog::formatter> plain_;
  shoal_log_fn fn_ = nullptr;
  void* user_ = nullptr;
};

struct Routing {
  std::shared_ptr<RoutingSink> sink;
  std::shared_ptr<spdlog::logger> logger;
};

Routing& LogRouting() {
  static Routing routing = [] {
    Routing r;
    r.sink = std::make_shared<RoutingSink>();
    r.logger = std::make_shared<spdlog::logger>("", r.sink);
    const spdlog::logger* old = spdlog::default_logger_raw();
    r.logger->set_level(old ? old->level() : spdlog::level::info);
    spdlog::set_default_logger(r.logger);
    return r;
  }();
  return routing;
}

}  // namespace

void InitLogRouting() { LogRouting(); }

}  // namespace shoal::capi

extern "C" {

shoal_status shoal_set_log_callback(shoal_log_fn fn, void* user, int min_level) {
  using namespace shoal::capi;
  return Guard([&]() -> shoal_status {
    if (min_level < SHOAL_LOG_TRACE || min_level > SHOAL_LOG_OFF)
      return Fail(shoal::StatusCode::kInvalidArgument, "min_level " + std::to_string(min_level) + " is outside " +
                                                           std::to_string(SHOAL_LOG_TRACE) + ".." +
                                                           std::to_string(SHOAL_LOG_OFF));
    Routing& routing = LogRouting();
    routing.sink->Route(fn, user);
    routing.logger->set_level(static_cast<spdlog::level::level_enum>(min_level));
    return SHOAL_OK;
  });
}

}  // extern "C"
