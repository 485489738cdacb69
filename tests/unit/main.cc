#define CATCH_CONFIG_RUNNER
#include <spdlog/cfg/env.h>
#include <spdlog/spdlog.h>

#include <catch2/catch.hpp>

int main(int argc, char* argv[]) {
  // Quiet by default: the tests assert on messages themselves. SPDLOG_LEVEL=info shows the log.
  spdlog::set_level(spdlog::level::err);
  spdlog::cfg::load_env_levels();
  return Catch::Session().run(argc, argv);
}
