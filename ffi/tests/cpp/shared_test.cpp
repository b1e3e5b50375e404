// C++17 test of sluicegate.hpp's shared-memory handles: limiter::open_shared,
// keyed_limiter::open_shared, sluicegate::shared (options, now, unlink).
// Handles in one process and in 4 forked processes share one limit exactly
// (opened in each child, and opened before fork and inherited), and every way
// opening fails throws sluicegate::error with its status and a message naming
// the file. Built with -std=c++17 -Wall -Wextra -Werror -pedantic under
// -fsanitize=address,undefined by scripts/test-ffi, which passes a scratch
// directory as argv[1].
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "expect.hpp"
#include "sluicegate.hpp"

using namespace std::chrono_literals;
namespace sg = sluicegate;

static std::string scratch;

static std::string region(const char *name) { return scratch + "/" + name; }

static sg::shared::options small() { return sg::shared::options().memory(1 << 20).limits(64); }

// The message of the sluicegate::error f throws ("" if none).
template <class F>
static std::string message(F f) {
    try {
        f();
    } catch (const sg::error &e) {
        return e.what();
    }
    return "";
}

static void handles_in_one_process_share_one_state() {
    const std::string p = region("basic");
    sg::shared::unlink(p);
    const auto hourly = sg::config(sg::algorithm::token_bucket, 3, 1h);
    auto a = sg::keyed_limiter::open_shared(p, hourly, 100, small());
    auto b = sg::keyed_limiter::open_shared(p, hourly, 100, small(), sg::full_policy::reject);
    EXPECT(a.check("ann") && a.check("ann").remaining == 1);
    EXPECT(b.check("ann") && !b.check("ann") && !a.peek("ann"));
    const auto t = sg::shared::now();
    EXPECT(t > 0ns && sg::shared::now() >= t);
    EXPECT(b.check_at("bob", t, 3) && !a.check_at("bob", t) && !a.peek_at("bob", t));
    EXPECT(a.stats().inserted == 2 && b.stats().capacity == 100);
    EXPECT(b.live_keys_at(sg::shared::now()) == 2);
    a.clear();
    EXPECT(b.live_keys_at(sg::shared::now()) == 0 && b.check("ann"));
    EXPECT(throws([&] { a.set_config(hourly); }) == SLUICEGATE_ERR_SHARED_FIXED);
    EXPECT(throws([&] { a.check("bob", 4); }) == SLUICEGATE_ERR_INSUFFICIENT_CAPACITY);
    EXPECT(throws([&] { a.check(""); }) == SLUICEGATE_ERR_EMPTY_KEY);

    // Single limiters, and a compound: one state for every handle.
    const auto window = sg::config(sg::algorithm::fixed_window, 4, 1h);
    auto l1 = sg::limiter::open_shared(p, window, small());
    auto l2 = sg::limiter::open_shared(p, window, small());
    EXPECT(l1.check(3) && l2.check() && !l1.check() && !l2.peek());
    EXPECT(throws([&] { l1.reset(); }) == SLUICEGATE_ERR_SHARED_FIXED);
    EXPECT(throws([&] { l1.set_config(window); }) == SLUICEGATE_ERR_SHARED_FIXED);
    auto both = sg::config::parse_list("2/minute; 3/hour", sg::algorithm::sliding_window);
    auto c1 = sg::limiter::open_shared(p, both, small());
    auto c2 = sg::limiter::open_shared(p, both, small());
    const auto w = sg::shared::now();
    EXPECT(c1.check_at(w, 2) && !c2.check_at(w) && !c2.peek_at(w));

    // Move-only, as every handle.
    auto moved = std::move(a);
    EXPECT(moved.get() != nullptr && a.get() == nullptr && !moved.check("ann", 3));

    // Removed while open: these handles keep the old region; a new open makes a
    // new one, fresh.
    sg::shared::unlink(p);
    struct stat sb;
    EXPECT(stat(p.c_str(), &sb) != 0);
    auto fresh = sg::limiter::open_shared(p, window, small());
    EXPECT(fresh.check(4) && !l1.check());
    sg::shared::unlink(p);
    sg::shared::unlink(p);  // gone already: not an error

    // A bare name is /dev/shm/sluicegate-<name>, made with the mode asked for.
    const std::string name = "cxxtest-" + std::to_string(getpid());
    {
        auto bare = sg::keyed_limiter::open_shared(name, hourly, 10, small().mode(0640));
        EXPECT(bare.check("k"));
        const std::string file = "/dev/shm/sluicegate-" + name;
        EXPECT(stat(file.c_str(), &sb) == 0 && (sb.st_mode & 0777) == 0640);
    }
    sg::shared::unlink(name);
}

// Forks `n` children running `child(i)`, which returns what it admitted (at
// most 255, its exit status); returns the sum, or -1 if a child failed.
static int in_children(int n, const std::function<int(int)> &child) {
    std::fflush(nullptr);
    std::vector<pid_t> pids;
    for (int i = 0; i < n; ++i) {
        const pid_t pid = fork();
        if (pid == 0) {
            int admitted = 255;
            try {
                admitted = child(i);
            } catch (const std::exception &e) {
                std::fprintf(stderr, "child %d: %s\n", i, e.what());
            }
            _exit(admitted);
        }
        pids.push_back(pid);
    }
    int total = 0;
    for (const pid_t pid : pids) {
        int ws = 0;
        if (pid < 0 || waitpid(pid, &ws, 0) != pid || !WIFEXITED(ws) || WEXITSTATUS(ws) == 255)
            total = -1;
        else if (total >= 0)
            total += WEXITSTATUS(ws);
    }
    return total;
}

// 4 processes, each opening its handles after fork; then 4 that inherit
// handles opened before fork (a pre-fork master's): the totals are the bounds.
static void processes_share_one_limit_exactly() {
    const std::string p = region("procs");
    sg::shared::unlink(p);
    const auto per_key = sg::config(sg::algorithm::token_bucket, 5, 1h);
    const auto global = sg::config(sg::algorithm::sliding_window, 30, 1h);
    const auto t0 = sg::shared::now();
    // 4 x 20 checks of 3 keys: 3 x 5 admitted.
    const int keyed = in_children(4, [&](int i) {
        auto t = sg::keyed_limiter::open_shared(p, per_key, 1000, small());
        int admitted = 0;
        for (int r = 0; r < 20; ++r)
            admitted += t.check_at("user-" + std::to_string((r + i) % 3), t0) ? 1 : 0;
        return admitted;
    });
    EXPECT(keyed == 15);
    // 4 x 20 checks of one limiter of 30.
    const int single = in_children(4, [&](int) {
        auto l = sg::limiter::open_shared(p, global, small());
        int admitted = 0;
        for (int r = 0; r < 20; ++r) admitted += l.check_at(t0) ? 1 : 0;
        return admitted;
    });
    EXPECT(single == 30);
    // Opened before fork: the children use the inherited handle and mapping.
    auto inherited =
        sg::limiter::open_shared(p, sg::config(sg::algorithm::fixed_window, 9, 1h), small());
    const int before = in_children(4, [&](int) {
        int admitted = 0;
        for (int r = 0; r < 5; ++r) admitted += inherited.check() ? 1 : 0;
        return admitted;
    });
    EXPECT(before == 9 && !inherited.check());
    std::printf("4 processes: keyed %d of 15, single %d of 30, inherited %d of 9\n", keyed, single,
                before);
    sg::shared::unlink(p);
}

static void opening_errors_throw_their_status() {
    const std::string p = region("errors");
    sg::shared::unlink(p);
    const auto c = sg::config(sg::algorithm::token_bucket, 1, 1h);
    auto held = sg::keyed_limiter::open_shared(p, c, 10, small());
    // Another size than the region's, while this process has it open: the
    // status, and a message naming the file and both sizes.
    const auto bigger = sg::shared::options().memory(2 << 20).limits(64);
    EXPECT(throws([&] { sg::keyed_limiter::open_shared(p, c, 10, bigger); }) ==
           SLUICEGATE_ERR_SHARED_MISMATCH);
    const std::string m = message([&] { sg::limiter::open_shared(p, c, bigger); });
    EXPECT(m.find(p) != std::string::npos && m.find("were asked for") != std::string::npos);
    EXPECT(throws([&] { sg::limiter::open_shared(p, c, small().limits(8)); }) ==
           SLUICEGATE_ERR_SHARED_MISMATCH);
    // A foreign file: not a region.
    const std::string junk = region("junk");
    {
        std::ofstream f(junk, std::ios::binary);
        const std::string bytes(8192, 'x');
        f << bytes;
    }
    EXPECT(throws([&] { sg::keyed_limiter::open_shared(junk, c, 10); }) ==
           SLUICEGATE_ERR_SHARED_NOT_A_REGION);
    EXPECT(message([&] { sg::keyed_limiter::open_shared(junk, c, 10); })
               .find("not a sluicegate shared region") != std::string::npos);
    // A symbolic link is never followed.
    const std::string link = region("link");
    EXPECT(symlink(p.c_str(), link.c_str()) == 0);
    EXPECT(throws([&] { sg::limiter::open_shared(link, c, small()); }) ==
           SLUICEGATE_ERR_SHARED_NOT_A_FILE);
    EXPECT(unlink(link.c_str()) == 0 && unlink(junk.c_str()) == 0);
    // Bad names, options and configs.
    EXPECT(throws([&] { sg::limiter::open_shared("", c); }) == SLUICEGATE_ERR_BAD_NAME);
    EXPECT(throws([&] { sg::limiter::open_shared(std::string_view("a\0b", 3), c); }) ==
           SLUICEGATE_ERR_BAD_NAME);
    EXPECT(throws([&] { sg::shared::unlink(""); }) == SLUICEGATE_ERR_BAD_NAME);
    EXPECT(throws([&] { sg::limiter::open_shared(p, c, small().mode(01000)); }) ==
           SLUICEGATE_ERR_SHARED_OPTIONS);
    EXPECT(throws([&] { sg::limiter::open_shared(p, c, sg::shared::options().memory(8)); }) ==
           SLUICEGATE_ERR_SHARED_OPTIONS);
    EXPECT(throws([&] { sg::limiter::open_shared(p, std::vector<sg::config>{}, small()); }) ==
           SLUICEGATE_ERR_LIMIT_COUNT);
    EXPECT(throws([&] {
               sg::limiter::open_shared(p, sg::config(sg::algorithm::sliding_log, 3, 1s), small());
           }) == SLUICEGATE_ERR_UNSUPPORTED);
    EXPECT(throws([&] {
               sg::keyed_limiter::open_shared(p, sg::config(sg::algorithm::token_bucket, 0, 1s), 10,
                                              small());
           }) == SLUICEGATE_ERR_CONFIG_ZERO);
    EXPECT(throws([&] {
               sg::keyed_limiter::open_shared(p, c, 10, small(), static_cast<sg::full_policy>(7));
           }) == SLUICEGATE_ERR_BAD_POLICY);
    // A full registry: two limits of room.
    const std::string two = region("two");
    sg::shared::unlink(two);
    const auto nth = [&](std::uint64_t n) {
        return sg::keyed_limiter::open_shared(two, sg::config(sg::algorithm::token_bucket, n, 1h),
                                              10, small().limits(2));
    };
    auto r1 = nth(1);
    auto r2 = nth(2);
    EXPECT(throws([&] { nth(3); }) == SLUICEGATE_ERR_SHARED_FULL);
    EXPECT(r1.check("k") && r2.check("k"));
    sg::shared::unlink(two);
    // Nothing above disturbed the region this process holds.
    EXPECT(held.check("k") && !held.check("k"));
    sg::shared::unlink(p);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: shared_test SCRATCH_DIR\n");
        return 2;
    }
    scratch = argv[1];
    handles_in_one_process_share_one_state();
    processes_share_one_limit_exactly();
    opening_errors_throw_their_status();
    std::printf("shared_test (C++17, sluicegate %s): %d passed, %d failed\n",
                std::string(sg::version()).c_str(), passed, failed);
    return failed == 0 ? 0 : 1;
}
