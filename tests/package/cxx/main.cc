// A separate C++ project built against an installed Shoal's static library and C++ API.
#include <shoal/client.h>
#include <shoal/data.h>
#include <shoal/server.h>
#include <shoal/shoal.h>
#include <shoal/trainer.h>

#include <cstdio>

int main() {
  shoal::BuiltinTrainerOptions options;
  options.dataset = "csv:/nonexistent/consumer.csv";
  auto trainer = shoal::MakeBuiltinTrainer(options);
  if (trainer.ok() || trainer.status().code() != shoal::StatusCode::kNotFound) {
    std::fprintf(stderr, "expected NotFound, got %s\n", trainer.status().ToString().c_str());
    return 1;
  }
  // The aggregator as a library: a missing dataset is one clear error from Create.
  shoal::ServerOptions so;
  so.listen = "tcp://127.0.0.1:0";
  so.dataset = "csv:/nonexistent/consumer.csv";
  auto server = shoal::Server::Create(so);
  if (server.ok() || server.status().code() != shoal::StatusCode::kNotFound) {
    std::fprintf(stderr, "Server::Create: expected NotFound, got %s\n", server.status().ToString().c_str());
    return 1;
  }
  auto part = shoal::data::ParsePartition("1/4");
  if (!part.ok() || part->index != 1 || part->count != 4) return 1;
  std::printf("shoal %s (C++ API, static): ok\n", shoal_version());
  return 0;
}
