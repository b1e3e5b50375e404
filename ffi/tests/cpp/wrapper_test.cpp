// C++17 test of include/sluicegate.hpp: RAII and move-only handles, exceptions
// for every error, std::string_view keys, std::chrono durations. Built with
// -std=c++17 -Wall -Wextra -Werror -pedantic under -fsanitize=address,undefined.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>

#include "expect.hpp"
#include "sluicegate.hpp"

using namespace std::chrono_literals;
namespace sg = sluicegate;

static_assert(is_handle_v<sg::limiter> && is_handle_v<sg::keyed_limiter> &&
                  is_handle_v<sg::striped_limiter>,
              "handles are move-only and their moves never throw");

int main() {
    // A token bucket from a rate string.
    sg::limiter api(sg::config::parse("100/s burst 20"));
    auto t0 = 10s;
    auto d = api.check_at(t0);
    EXPECT(d && d.remaining == 19 && d.limit == 20 && d.reset_after == 10ms);
    for (int i = 0; i < 19; ++i) EXPECT(api.check_at(t0));
    d = api.check_at(t0);
    EXPECT(!d && d.retry_after == 10ms && d.retry_after_seconds() == 1);
    EXPECT(api.peek_at(t0 + 10ms));
    EXPECT(throws([&] { api.check_at(t0, 21); }) == SLUICEGATE_ERR_INSUFFICIENT_CAPACITY);
    EXPECT(api.check().allowed);  // the library clock

    // Move-only ownership.
    sg::limiter moved = std::move(api);
    EXPECT(moved.get() != nullptr && api.get() == nullptr);

    // A compound from a list: all-or-nothing.
    auto both = sg::limiter::from_string("2/second; 3/minute", sg::algorithm::fixed_window);
    EXPECT(both.check_at(0s) && both.check_at(0s) && !both.check_at(0s));
    EXPECT(both.check_at(1s) && !both.check_at(1s));
    EXPECT(throws([&] { both.reset(); }) == SLUICEGATE_ERR_UNSUPPORTED);

    // Keyed by string_view (any bytes, including NULs).
    sg::keyed_limiter per_ip(sg::config(sg::algorithm::sliding_window, 3, 1min), 1024);
    std::string v6("\x20\x01\x0d\xb8\x00\x00", 6);
    for (int i = 0; i < 3; ++i) EXPECT(per_ip.check_at(v6, 0s));
    EXPECT(!per_ip.check_at(v6, 0s));
    EXPECT(per_ip.check_at("198.51.100.7", 0s).remaining == 2);
    EXPECT(per_ip.peek_at(std::string_view("198.51.100.7"), 0s).remaining == 1);
    EXPECT(per_ip.stats().inserted == 2 && per_ip.stats().capacity == 1024);
    EXPECT(per_ip.live_keys_at(0s) == 2);
    EXPECT(throws([&] { per_ip.check(""); }) == SLUICEGATE_ERR_EMPTY_KEY);
    EXPECT(throws([&] { per_ip.set_config(sg::config(sg::algorithm::token_bucket, 3, 1min)); }) ==
           SLUICEGATE_ERR_CONFIG_IMMUTABLE);
    per_ip.clear();
    EXPECT(per_ip.check_at(v6, 0s));

    // A shaper reports its delay as a duration.
    sg::limiter shaper(sg::config(sg::algorithm::shaper, 10, 1s, 1).max_delay(1s));
    EXPECT(shaper.check_at(0s).delay == 0ns);
    EXPECT(shaper.check_at(0s).delay == 100ms);

    // Striped.
    sg::striped_limiter hot(sg::config(sg::algorithm::token_bucket, 1000, 1s, 64), 8);
    int admitted = 0;
    for (int i = 0; i < 100; ++i) admitted += hot.check_at(5s) ? 1 : 0;
    EXPECT(admitted == 64);

    // Errors carry the status, the message and the parse position.
    try {
        sg::config::parse("1000/month");
        EXPECT(false);
    } catch (const sg::error &e) {
        EXPECT(e.status() == SLUICEGATE_ERR_PARSE && e.position() == 5);
        EXPECT(std::strstr(e.what(), "ambiguous") != nullptr);
    }
    try {
        sg::config(sg::algorithm::token_bucket, 1, 24h, 1000000).validate();
        EXPECT(false);
    } catch (const sg::error &e) {
        EXPECT(e.status() == SLUICEGATE_ERR_CONFIG_TOO_LARGE);
        EXPECT(std::strstr(e.what(), "the maximum is 213503") != nullptr);
    }
    EXPECT(throws([] { sg::limiter(sg::config(sg::algorithm::token_bucket, 0, 1s)); }) ==
           SLUICEGATE_ERR_CONFIG_ZERO);
    EXPECT(throws([] { sg::limiter(sg::config(static_cast<sg::algorithm>(99), 1, 1s)); }) ==
           SLUICEGATE_ERR_BAD_ALGORITHM);
    EXPECT(throws([] { sg::limiter(std::vector<sg::config>{}); }) == SLUICEGATE_ERR_LIMIT_COUNT);
    EXPECT(throws([] { sg::limiter::from_string("1/s;2/s;3/s;4/s;5/s"); }) ==
           SLUICEGATE_ERR_BUFFER_TOO_SMALL);
    EXPECT(throws([] {
               sg::keyed_limiter(sg::config(sg::algorithm::token_bucket, 1, 1s), 8,
                                 static_cast<sg::full_policy>(7));
           }) == SLUICEGATE_ERR_BAD_POLICY);
    EXPECT(throws([] { sg::striped_limiter(sg::config(sg::algorithm::token_bucket, 1, 1s, 8), 3); }) ==
           SLUICEGATE_ERR_BAD_STRIPES);
    EXPECT(sg::now() > 0ns && !sg::version().empty());

    std::printf("wrapper_test (C++17, sluicegate %s): %d passed, %d failed\n",
                std::string(sg::version()).c_str(), passed, failed);
    return failed == 0 ? 0 : 1;
}
