// C++17 test of sluicegate::redis_limiter (include/sluicegate.hpp) against a
// real redis-server: RAII and move-only, exceptions for bad input, decisions
// with their source, the failure policies for a server that is not there.
// SLUICEGATE_REDIS_URL / SLUICEGATE_REDIS_CLOSED_URL as for redis_test.c.
// Built with -std=c++17 -Wall -Wextra -Werror -pedantic under
// -fsanitize=address,undefined by scripts/test-ffi.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <utility>

#include <unistd.h>

#include "expect.hpp"
#include "sluicegate.hpp"

using namespace std::chrono_literals;
namespace sg = sluicegate;

static_assert(is_handle_v<sg::redis_limiter>, "handles are move-only and their moves never throw");

int main() {
    const char *live = std::getenv("SLUICEGATE_REDIS_URL");
    const char *closed = std::getenv("SLUICEGATE_REDIS_CLOSED_URL");
    if (!live || !closed) {
        std::fprintf(stderr, "redis_test: set SLUICEGATE_REDIS_URL and SLUICEGATE_REDIS_CLOSED_URL\n");
        return 2;
    }
    const std::string name = "ffi-cpp-" + std::to_string(getpid()) + "-" +
                             std::to_string(std::chrono::system_clock::now().time_since_epoch().count());
    const auto limit = sg::config::parse("1/minute burst 3");

    // A burst of 3, then a denial; a peek charges nothing.
    sg::redis_limiter rl(live, name, limit);
    EXPECT(rl.peek("k").remaining == 2);
    for (std::uint64_t left = 3; left-- > 0;) {
        auto d = rl.check("k");
        EXPECT(d && d.remaining == left && d.source == sg::source::redis && d.authoritative());
    }
    auto d = rl.check("k");
    EXPECT(!d && d.limit == 3 && d.retry_after > 55s && d.retry_after <= 60s);
    EXPECT(d.retry_after_seconds() == 60);
    EXPECT(!rl.circuit_open());
    EXPECT(throws([&] { rl.check("k", 4); }) == SLUICEGATE_ERR_INSUFFICIENT_CAPACITY);
    EXPECT(throws([&] { rl.check(""); }) == SLUICEGATE_ERR_EMPTY_KEY);
    EXPECT(throws([&] { rl.check(std::string("\xff\xfe", 2)); }) == SLUICEGATE_ERR_NOT_UTF8);

    // Move-only ownership: the state is in Redis, the handle moves.
    sg::redis_limiter moved = std::move(rl);
    EXPECT(moved.get() != nullptr && rl.get() == nullptr);
    EXPECT(!moved.check("k"));

    // Options: a prefix of its own is a state of its own.
    sg::redis_limiter other(live, name, limit, sg::redis_options().prefix("ffi-cpp:"));
    EXPECT(other.check("k").remaining == 2);

    // Bad input throws with its status.
    EXPECT(throws([&] { sg::redis_limiter("http://x", name, limit); }) == SLUICEGATE_ERR_BAD_URL);
    EXPECT(throws([&] { sg::redis_limiter(std::string("redis://127.0.0.1\0x", 19), name, limit); }) ==
           SLUICEGATE_ERR_BAD_URL);
    EXPECT(throws([&] { sg::redis_limiter(live, "a{b", limit); }) == SLUICEGATE_ERR_CONFIG_INVALID);
    EXPECT(throws([&] { sg::redis_limiter(live, name, limit, sg::redis_options().fail_local(101)); }) ==
           SLUICEGATE_ERR_CONFIG_TOO_LARGE);
    EXPECT(throws([&] {
               sg::redis_limiter(live, name, sg::config(sg::algorithm::sliding_log, 5, 1s));
           }) == SLUICEGATE_ERR_UNSUPPORTED);

    // No server: each policy answers, and says so.
    const auto quick = [] { return sg::redis_options().timeout(20ms).connect_timeout(20ms).breaker(2, 2s); };
    sg::redis_limiter shut(closed, name, limit, quick().fail_closed());
    for (int i = 0; i < 5; ++i) {
        auto v = shut.check("k");
        EXPECT(!v && v.source == sg::source::fail_closed && !v.authoritative() && v.retry_after == 2s);
    }
    EXPECT(shut.circuit_open());
    sg::redis_limiter open(closed, name, limit, quick().fail_open());
    for (int i = 0; i < 5; ++i) {
        auto v = open.check("k");
        EXPECT(v && v.source == sg::source::fail_open && v.remaining == 0);
    }
    sg::redis_limiter local(closed, name, limit, quick().fail_local(100, 64));
    int admitted = 0;
    for (int i = 0; i < 5; ++i) {
        auto v = local.check("k");
        admitted += v.allowed;
        EXPECT(v.source == sg::source::local_fallback);
    }
    EXPECT(admitted == 3);

    std::printf("redis_test (C++17 sluicegate.hpp): %d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
