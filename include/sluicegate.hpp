// sluicegate.hpp: a header-only C++17 wrapper over the sluicegate C ABI
// (sluicegate.h). Hand-written; link with libsluicegate as for C.
//
// Design:
//  * RAII, move-only handles: sluicegate::limiter, keyed_limiter (local, or
//    in a shared-memory region: open_shared),
//    striped_limiter, redis_limiter, policy and policy_decision own their C
//    handle (std::unique_ptr with the matching *_free) and cannot be copied.
//  * redis_limiter's calls BLOCK for a network round trip (bounded by its
//    timeouts); the others never block. Against a library built without the
//    `redis` feature, only a program that uses redis_limiter fails to link.
//  * Errors are EXCEPTIONS: every non-OK status (a bad config, a NULL key, a
//    cost above the capacity, ...) throws sluicegate::error, which carries the
//    sluicegate_status and its message (and, for a bad rate string, the byte
//    position). A denial is not an error: check() returns a decision whose
//    operator bool is false.
//  * Keys are std::string_view (any bytes); an empty key throws.
//  * Times are std::chrono: durations in decisions, and the `_at` calls take
//    the current time as std::chrono::nanoseconds on the library clock
//    (sluicegate::now()) or on any one monotonic clock used consistently.
//  * Shared memory: limiter::open_shared and keyed_limiter::open_shared make
//    handles whose state lives in a region every worker process of a host
//    maps (one limit across a pre-fork server's workers); sluicegate::shared
//    holds the region's options, clock and unlink. A program that uses them
//    needs the library's `shared` feature (on by default) to link.
//
//   sluicegate::limiter api(sluicegate::config::parse("100/s burst 20"));
//   if (auto d = api.check(); !d) reply_429(d.retry_after_seconds());
#ifndef SLUICEGATE_HPP
#define SLUICEGATE_HPP

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "sluicegate.h"

namespace sluicegate {

using std::chrono::nanoseconds;

/// Every failure: the C status, its message, and for parse errors the position.
class error : public std::runtime_error {
public:
    explicit error(sluicegate_status status, std::string detail = {}, std::size_t position = 0)
        : std::runtime_error(detail.empty() ? std::string(sluicegate_status_str(status))
                                            : std::string(sluicegate_status_str(status)) + ": " +
                                                  detail),
          status_(status), position_(position) {}
    sluicegate_status status() const noexcept { return status_; }
    /// For SLUICEGATE_ERR_PARSE: the byte offset in the string.
    std::size_t position() const noexcept { return position_; }

private:
    sluicegate_status status_;
    std::size_t position_;
};

namespace detail {
inline void check(sluicegate_status s) {
    if (s != SLUICEGATE_OK) throw error(s);
}
inline const std::uint8_t *key_bytes(std::string_view key) {
    if (key.empty()) throw error(SLUICEGATE_ERR_EMPTY_KEY);
    return reinterpret_cast<const std::uint8_t *>(key.data());
}
inline std::uint64_t ticks(nanoseconds t) {
    return t.count() < 0 ? 0 : static_cast<std::uint64_t>(t.count());
}
inline nanoseconds dur(std::uint64_t ns) {
    const auto max = static_cast<std::uint64_t>(nanoseconds::max().count());
    return nanoseconds(static_cast<nanoseconds::rep>(ns > max ? max : ns));
}
/// Never NULL, even for an empty view (the C calls tell a NULL pointer from an
/// empty string).
inline const char *bytes(std::string_view s) noexcept { return s.data() ? s.data() : ""; }
/// Runs a call that writes its error's full text to a buffer (the shared
/// region calls: the text names the file); throws it with the status.
template <class F>
inline void with_message(F f) {
    // Room for a path of SLUICEGATE_SHARED_MAX_NAME bytes and the reason.
    std::string msg(SLUICEGATE_SHARED_MAX_NAME + 512, '\0');
    const sluicegate_status s = f(msg.data(), msg.size());
    if (s != SLUICEGATE_OK) {
        msg.resize(std::char_traits<char>::length(msg.c_str()));
        throw error(s, msg);
    }
}
}  // namespace detail

enum class algorithm : std::uint32_t {
    token_bucket = SLUICEGATE_TOKEN_BUCKET,
    leaky_bucket = SLUICEGATE_LEAKY_BUCKET,
    shaper = SLUICEGATE_SHAPER,
    fixed_window = SLUICEGATE_FIXED_WINDOW,
    sliding_window = SLUICEGATE_SLIDING_WINDOW,
    sliding_log = SLUICEGATE_SLIDING_LOG,
};

enum class full_policy : std::uint32_t {
    evict_stalest = SLUICEGATE_EVICT_STALEST,
    reject = SLUICEGATE_REJECT,
    allow_unlimited = SLUICEGATE_ALLOW_UNLIMITED,
};

/// The library clock's time (the time base of calls without `_at`).
inline nanoseconds now() noexcept { return detail::dur(sluicegate_now_ns()); }

/// The library version, e.g. "0.1.0".
inline std::string_view version() noexcept { return sluicegate_version(); }

/// Shared-memory regions: one limit across the worker processes of a host.
/// A region is a file every process maps: a bare name without '/' is
/// /dev/shm/sluicegate-<name>, anything else a path. The handles are
/// limiter::open_shared and keyed_limiter::open_shared.
namespace shared {

/// How to create a region that does not exist yet, and what to accept when
/// opening one. Every setting left alone is the default.
///
///   auto o = sluicegate::shared::options().memory(64u << 20).mode(0660);
class options {
public:
    options() noexcept : c_{} { c_.struct_size = sizeof(sluicegate_shared_options); }
    /// Bytes for keys (16 each) and their eviction sketch (default 16 MiB,
    /// about 120,000 keys; Docker's default /dev/shm is 64 MB). A region that
    /// exists with another size throws SLUICEGATE_ERR_SHARED_MISMATCH.
    options &memory(std::uint64_t bytes) noexcept { c_.memory = bytes; return *this; }
    /// How many limits the region can register (each quota of each limiter is
    /// one), 1 to 65,535 (default 1,024).
    options &limits(std::uint32_t n) noexcept { c_.limits = n; return *this; }
    /// The file's permission bits when this call creates it (default 0600;
    /// 0660 lets a group of worker users share it; above 0777 throws
    /// SLUICEGATE_ERR_SHARED_OPTIONS).
    options &mode(std::uint32_t bits) noexcept { c_.mode = bits; return *this; }
    /// Accept a region another user owns (a root master that made it for its
    /// workers); refused by default (SLUICEGATE_ERR_SHARED_OTHER_OWNER).
    options &allow_other_owner(bool allow = true) noexcept {
        c_.allow_other_owner = allow ? 1 : 0;
        return *this;
    }
    const sluicegate_shared_options &raw() const noexcept { return c_; }

private:
    sluicegate_shared_options c_;
};

/// The regions' time base (CLOCK_MONOTONIC, the same in every process): the
/// `now` to give the `_at` calls of shared handles (not sluicegate::now()).
inline nanoseconds now() noexcept { return detail::dur(sluicegate_shared_now_ns()); }

/// Removes region `name`. Handles that have it mapped keep their mapping; the
/// next open makes a new region. A region that does not exist is not an
/// error; a failure throws sluicegate::error naming the file.
inline void unlink(std::string_view name) {
    detail::with_message([&](char *err, std::size_t cap) {
        return sluicegate_shared_unlink(detail::bytes(name), name.size(), err, cap);
    });
}

}  // namespace shared

/// A decision; true when admitted.
struct decision {
    bool allowed = false;
    std::uint64_t remaining = 0;
    nanoseconds retry_after{0};
    nanoseconds reset_after{0};
    std::uint64_t limit = 0;
    nanoseconds delay{0};  // the shaper's wait before running

    explicit operator bool() const noexcept { return allowed; }
    /// Whole seconds for a Retry-After header, rounded up.
    std::uint64_t retry_after_seconds() const noexcept { return ceil_seconds(retry_after); }
    /// Whole seconds until full again, rounded up (RateLimit's `t`).
    std::uint64_t reset_after_seconds() const noexcept { return ceil_seconds(reset_after); }

    static decision from(const sluicegate_decision &d) noexcept {
        return decision{d.allowed, d.remaining, detail::dur(d.retry_after_ns),
                        detail::dur(d.reset_after_ns), d.limit, detail::dur(d.delay_ns)};
    }

private:
    static std::uint64_t ceil_seconds(nanoseconds t) noexcept {
        const auto ns = static_cast<std::uint64_t>(t.count());
        return ns / 1000000000u + (ns % 1000000000u != 0);
    }
};

/// One limit: algorithm, amount per period, burst and the per-algorithm extras.
class config {
public:
    config(algorithm alg, std::uint64_t amount, nanoseconds period, std::uint64_t burst = 0)
        : c_{} {
        c_.struct_size = sizeof(sluicegate_config);
        c_.algorithm = static_cast<std::uint32_t>(alg);
        c_.amount = amount;
        c_.period_ns = detail::ticks(period);
        c_.burst = burst;
    }

    /// One limit from a rate string: "100/s", "10 per 2 hours", "100/s burst 20".
    static config parse(std::string_view rate, algorithm alg = algorithm::token_bucket) {
        config c(alg, 0, nanoseconds(0));
        sluicegate_parse_error e{};
        const auto s = sluicegate_config_parse(rate.data(), rate.size(), &c.c_, &e);
        if (s != SLUICEGATE_OK) throw error(s, e.message ? e.message : "", e.position);
        return c;
    }

    /// Several limits from "1/second; 100/hour", for a compound limiter.
    static std::vector<config> parse_list(std::string_view rates,
                                          algorithm alg = algorithm::token_bucket) {
        std::vector<sluicegate_config> raw(SLUICEGATE_MAX_LIMITS,
                                           config(alg, 0, nanoseconds(0)).c_);
        std::size_t n = 0;
        sluicegate_parse_error e{};
        const auto s = sluicegate_config_parse_list(rates.data(), rates.size(), raw.data(),
                                                    raw.size(), &n, &e);
        if (s != SLUICEGATE_OK) throw error(s, e.message ? e.message : "", e.position);
        std::vector<config> out;
        for (std::size_t i = 0; i < n; ++i) out.push_back(config(raw[i]));
        return out;
    }

    config &burst(std::uint64_t b) noexcept { c_.burst = b; return *this; }
    config &max_delay(nanoseconds d) noexcept { c_.max_delay_ns = detail::ticks(d); return *this; }
    config &log_capacity(std::uint64_t slots) noexcept { c_.log_capacity = slots; return *this; }

    /// Throws if a limiter could not be built from this config, with the reason
    /// (e.g. "burst is too large for this limiter: the maximum is 213503").
    void validate() const {
        char msg[160];
        const auto s = sluicegate_config_validate(&c_, msg, sizeof msg);
        if (s != SLUICEGATE_OK) throw error(s, msg);
    }

    const sluicegate_config &raw() const noexcept { return c_; }

private:
    explicit config(const sluicegate_config &c) : c_(c) {}
    sluicegate_config c_;
};

/// One limiter, or a compound of up to SLUICEGATE_MAX_LIMITS limits of one
/// algorithm admitted all-or-nothing. Thread-safe; move-only.
class limiter {
public:
    explicit limiter(const config &c) : limiter(std::vector<config>{c}) {}
    explicit limiter(const std::vector<config> &limits) {
        if (limits.empty()) throw error(SLUICEGATE_ERR_LIMIT_COUNT);
        std::vector<sluicegate_config> raw;
        for (const auto &c : limits) raw.push_back(c.raw());
        sluicegate_limiter *h = nullptr;
        detail::check(sluicegate_limiter_new(raw.data(), raw.size(), &h));
        h_.reset(h);
    }
    /// "100/minute" or "1/second; 100/hour".
    static limiter from_string(std::string_view rates, algorithm alg = algorithm::token_bucket) {
        return limiter(config::parse_list(rates, alg));
    }

    /// A limiter in the shared-memory region `name` (created with `options`
    /// if it does not exist): every process that opens the same config there
    /// checks one state. check() and peek() read the region's clock; the
    /// `_at` calls take shared::now(). set_config() and reset() throw
    /// SLUICEGATE_ERR_SHARED_FIXED; the sliding log has no shared form
    /// (SLUICEGATE_ERR_UNSUPPORTED). A region that cannot be opened throws
    /// sluicegate::error with its status (SLUICEGATE_ERR_SHARED_*) and a
    /// message naming the file and what is wrong.
    ///
    ///   auto global = sluicegate::limiter::open_shared("api",
    ///                                                  sluicegate::config::parse("1000/s"));
    static limiter open_shared(std::string_view name, const config &c,
                               const shared::options &options = shared::options()) {
        return open_shared(name, std::vector<config>{c}, options);
    }
    /// A compound of up to SLUICEGATE_MAX_LIMITS limits of one algorithm in the
    /// region `name`, admitted all-or-nothing.
    static limiter open_shared(std::string_view name, const std::vector<config> &limits,
                               const shared::options &options = shared::options()) {
        if (limits.empty()) throw error(SLUICEGATE_ERR_LIMIT_COUNT);
        std::vector<sluicegate_config> raw;
        for (const auto &c : limits) raw.push_back(c.raw());
        sluicegate_limiter *h = nullptr;
        detail::with_message([&](char *err, std::size_t cap) {
            return sluicegate_limiter_open_shared(detail::bytes(name), name.size(),
                                                  &options.raw(), raw.data(), raw.size(), err,
                                                  cap, &h);
        });
        return limiter(h);
    }

    decision check(std::uint64_t n = 1) const {
        sluicegate_decision d{};
        detail::check(sluicegate_limiter_check_n(get(), n, &d));
        return decision::from(d);
    }
    decision check_at(nanoseconds now, std::uint64_t n = 1) const {
        sluicegate_decision d{};
        detail::check(sluicegate_limiter_check_n_at(get(), n, detail::ticks(now), &d));
        return decision::from(d);
    }
    decision peek(std::uint64_t n = 1) const {
        sluicegate_decision d{};
        detail::check(sluicegate_limiter_peek_n(get(), n, &d));
        return decision::from(d);
    }
    decision peek_at(nanoseconds now, std::uint64_t n = 1) const {
        sluicegate_decision d{};
        detail::check(sluicegate_limiter_peek_n_at(get(), n, detail::ticks(now), &d));
        return decision::from(d);
    }
    void set_config(const config &c, std::size_t index = 0) const {
        detail::check(sluicegate_limiter_set_config(get(), index, &c.raw()));
    }
    void reset() const { detail::check(sluicegate_limiter_reset(get())); }

    const sluicegate_limiter *get() const noexcept { return h_.get(); }

private:
    explicit limiter(sluicegate_limiter *h) noexcept : h_(h) {}
    struct deleter {
        void operator()(sluicegate_limiter *p) const noexcept { sluicegate_limiter_free(p); }
    };
    std::unique_ptr<sluicegate_limiter, deleter> h_;
};

/// Table statistics.
struct keyed_stats {
    std::uint64_t capacity, inserted, reused, evicted, rejected, unlimited;
};

/// One state per key (any bytes), all under one quota, in a table of fixed
/// capacity allocated once. Thread-safe; move-only.
class keyed_limiter {
public:
    keyed_limiter(const config &c, std::uint64_t capacity,
                  full_policy policy = full_policy::evict_stalest) {
        sluicegate_keyed *h = nullptr;
        detail::check(sluicegate_keyed_new(&c.raw(), capacity,
                                           static_cast<std::uint32_t>(policy), &h));
        h_.reset(h);
    }

    /// A keyed limiter in the shared-memory region `name` (created with
    /// `options` if it does not exist): every process that opens the same
    /// config and `max_keys` there checks one state per key. `policy` is this
    /// process's choice for a new key that finds no room. check() and peek()
    /// read the region's clock, the `_at` calls take shared::now(); stats(),
    /// live_keys_at() and clear() act on every process's keys; set_config()
    /// throws SLUICEGATE_ERR_SHARED_FIXED. A region that cannot be opened
    /// throws sluicegate::error with its status (SLUICEGATE_ERR_SHARED_*) and a
    /// message naming the file and what is wrong.
    ///
    ///   auto per_ip = sluicegate::keyed_limiter::open_shared(
    ///       "api", sluicegate::config::parse("10/minute"), 100000);
    static keyed_limiter open_shared(std::string_view name, const config &c,
                                     std::uint64_t max_keys,
                                     const shared::options &options = shared::options(),
                                     full_policy policy = full_policy::evict_stalest) {
        sluicegate_keyed *h = nullptr;
        detail::with_message([&](char *err, std::size_t cap) {
            return sluicegate_keyed_open_shared(detail::bytes(name), name.size(),
                                                &options.raw(), &c.raw(), max_keys,
                                                static_cast<std::uint32_t>(policy), err, cap, &h);
        });
        return keyed_limiter(h);
    }

    decision check(std::string_view key, std::uint64_t n = 1) const {
        sluicegate_decision d{};
        const auto k = detail::key_bytes(key);
        detail::check(sluicegate_keyed_check_n(get(), k, key.size(), n, &d));
        return decision::from(d);
    }
    decision check_at(std::string_view key, nanoseconds now, std::uint64_t n = 1) const {
        sluicegate_decision d{};
        const auto k = detail::key_bytes(key);
        detail::check(sluicegate_keyed_check_n_at(get(), k, key.size(), n, detail::ticks(now), &d));
        return decision::from(d);
    }
    decision peek(std::string_view key, std::uint64_t n = 1) const {
        sluicegate_decision d{};
        const auto k = detail::key_bytes(key);
        detail::check(sluicegate_keyed_peek_n(get(), k, key.size(), n, &d));
        return decision::from(d);
    }
    decision peek_at(std::string_view key, nanoseconds now, std::uint64_t n = 1) const {
        sluicegate_decision d{};
        const auto k = detail::key_bytes(key);
        detail::check(sluicegate_keyed_peek_n_at(get(), k, key.size(), n, detail::ticks(now), &d));
        return decision::from(d);
    }
    void set_config(const config &c) const {
        detail::check(sluicegate_keyed_set_config(get(), &c.raw()));
    }
    void clear() const { detail::check(sluicegate_keyed_clear(get())); }
    keyed_stats stats() const {
        sluicegate_keyed_stats s{};
        detail::check(sluicegate_keyed_get_stats(get(), &s));
        return keyed_stats{s.capacity, s.inserted, s.reused, s.evicted, s.rejected, s.unlimited};
    }
    /// Live keys at `now` (a scan of the whole table).
    std::uint64_t live_keys_at(nanoseconds now) const {
        std::uint64_t n = 0;
        detail::check(sluicegate_keyed_len_at(get(), detail::ticks(now), &n));
        return n;
    }

    const sluicegate_keyed *get() const noexcept { return h_.get(); }

private:
    explicit keyed_limiter(sluicegate_keyed *h) noexcept : h_(h) {}
    struct deleter {
        void operator()(sluicegate_keyed *p) const noexcept { sluicegate_keyed_free(p); }
    };
    std::unique_ptr<sluicegate_keyed, deleter> h_;
};

/// A token bucket split over cache-padded stripes, for one hot limit checked by
/// many threads. Thread-safe; move-only.
class striped_limiter {
public:
    explicit striped_limiter(const config &c, std::uint32_t stripes = SLUICEGATE_DEFAULT_STRIPES) {
        sluicegate_striped *h = nullptr;
        detail::check(sluicegate_striped_new(&c.raw(), stripes, &h));
        h_.reset(h);
    }
    decision check(std::uint64_t n = 1) const {
        sluicegate_decision d{};
        detail::check(sluicegate_striped_check_n(get(), n, &d));
        return decision::from(d);
    }
    decision check_at(nanoseconds now, std::uint64_t n = 1) const {
        sluicegate_decision d{};
        detail::check(sluicegate_striped_check_n_at(get(), n, detail::ticks(now), &d));
        return decision::from(d);
    }
    void set_config(const config &c) const {
        detail::check(sluicegate_striped_set_config(get(), &c.raw()));
    }
    const sluicegate_striped *get() const noexcept { return h_.get(); }

private:
    struct deleter {
        void operator()(sluicegate_striped *p) const noexcept { sluicegate_striped_free(p); }
    };
    std::unique_ptr<sluicegate_striped, deleter> h_;
};

enum class failure_policy : std::uint32_t {
    local = SLUICEGATE_FAIL_LOCAL,
    open = SLUICEGATE_FAIL_OPEN,
    closed = SLUICEGATE_FAIL_CLOSED,
};

/// Who decided a Redis check.
enum class source : std::uint32_t {
    redis = SLUICEGATE_SOURCE_REDIS,
    fail_open = SLUICEGATE_SOURCE_FAIL_OPEN,
    fail_closed = SLUICEGATE_SOURCE_FAIL_CLOSED,
    local_fallback = SLUICEGATE_SOURCE_LOCAL_FALLBACK,
    lease = SLUICEGATE_SOURCE_LEASE,
    local_denial = SLUICEGATE_SOURCE_LOCAL_DENIAL,
};

/// A Redis decision: a decision (true when admitted) and who made it.
struct redis_decision : decision {
    sluicegate::source source = sluicegate::source::redis;
    /// Whether Redis decided (not a failure policy).
    bool authoritative() const noexcept { return source == sluicegate::source::redis; }
};

/// How a redis_limiter talks to Redis and what it answers without it. Every
/// setting left alone is the library default (SLUICEGATE_REDIS_DEFAULT_*).
class redis_options {
public:
    redis_options() : c_{} { c_.struct_size = sizeof(sluicegate_redis_config); }

    /// Put before every key (default "sluicegate:"); must not contain '{'.
    redis_options &prefix(std::string p) { prefix_ = std::move(p); has_prefix_ = true; return *this; }
    /// The longest one call may take (default 25 ms).
    redis_options &timeout(nanoseconds t) noexcept { c_.timeout_ns = positive(t); return *this; }
    /// The longest (re)connecting may take (default 50 ms).
    redis_options &connect_timeout(nanoseconds t) noexcept { c_.connect_timeout_ns = positive(t); return *this; }
    /// Admit everything while Redis is unavailable.
    redis_options &fail_open() noexcept { return policy(SLUICEGATE_FAIL_OPEN, 0, 0); }
    /// Deny everything while Redis is unavailable.
    redis_options &fail_closed() noexcept { return policy(SLUICEGATE_FAIL_CLOSED, 0, 0); }
    /// Decide locally at `share_percent`% of the quota (1-100; default 10) over a
    /// table of `keys` keys (default 10000) while Redis is unavailable.
    redis_options &fail_local(std::uint32_t share_percent = 0, std::uint64_t keys = 0) noexcept {
        return policy(SLUICEGATE_FAIL_LOCAL, share_percent, keys);
    }
    /// Open the breaker after `failures` consecutive failures (default 3) for
    /// `cooldown` (default 500 ms).
    redis_options &breaker(std::uint32_t failures, nanoseconds cooldown) noexcept {
        c_.breaker_failure_threshold = failures;
        c_.breaker_cooldown_ns = positive(cooldown);
        return *this;
    }

    /// The C struct; its `prefix` points into this object.
    sluicegate_redis_config raw() const {
        if (has_prefix_ && prefix_.find('\0') != std::string::npos)
            throw error(SLUICEGATE_ERR_CONFIG_INVALID, "the prefix contains a NUL");
        sluicegate_redis_config c = c_;
        c.prefix = has_prefix_ ? prefix_.c_str() : nullptr;
        return c;
    }

private:
    // 0 means "the default" in the C struct: a zero or negative duration keeps it.
    static std::uint64_t positive(nanoseconds t) noexcept { return detail::ticks(t); }
    redis_options &policy(std::uint32_t p, std::uint32_t share, std::uint64_t keys) noexcept {
        c_.failure_policy = p;
        c_.local_share_percent = share;
        c_.fallback_keys = keys;
        return *this;
    }
    sluicegate_redis_config c_;
    std::string prefix_;
    bool has_prefix_ = false;
};

/// One limit shared through Redis by every process of the same server, prefix
/// and name; keys are UTF-8 text. Thread-safe; move-only. Its calls BLOCK for a
/// round trip (at most the timeout, plus the connect timeout to reconnect);
/// with Redis unavailable the failure policy answers (see redis_decision::source).
///
///   sluicegate::redis_limiter rl("redis://127.0.0.1:6379", "api",
///                                sluicegate::config::parse("100/minute"),
///                                sluicegate::redis_options().fail_closed());
///   if (auto d = rl.check(user_id); !d) reply_429(d.retry_after_seconds());
class redis_limiter {
public:
    redis_limiter(const std::string &url, const std::string &name, const config &limit,
                  const redis_options &options = redis_options()) {
        if (url.find('\0') != std::string::npos) throw error(SLUICEGATE_ERR_BAD_URL, "the URL contains a NUL");
        if (name.find('\0') != std::string::npos)
            throw error(SLUICEGATE_ERR_CONFIG_INVALID, "the name contains a NUL");
        const sluicegate_redis_config c = options.raw();
        sluicegate_redis *h = nullptr;
        detail::check(sluicegate_redis_new(url.c_str(), name.c_str(), &limit.raw(), &c, &h));
        h_.reset(h);
    }

    /// Checks and (if admitted) charges `n` units for `key` (UTF-8; not empty).
    redis_decision check(std::string_view key, std::uint64_t n = 1) const {
        return call(sluicegate_redis_check, key, n);
    }
    /// What check() would answer, charging nothing.
    redis_decision peek(std::string_view key, std::uint64_t n = 1) const {
        return call(sluicegate_redis_peek, key, n);
    }
    /// Whether a circuit breaker is open (checks answered by the policy).
    bool circuit_open() const {
        bool open = false;
        detail::check(sluicegate_redis_circuit_open(get(), &open));
        return open;
    }

    const sluicegate_redis *get() const noexcept { return h_.get(); }

private:
    using fn = sluicegate_status (*)(const sluicegate_redis *, const std::uint8_t *, std::size_t,
                                     std::uint64_t, sluicegate_decision *, std::uint32_t *);
    redis_decision call(fn f, std::string_view key, std::uint64_t n) const {
        sluicegate_decision d{};
        std::uint32_t src = SLUICEGATE_SOURCE_REDIS;
        const auto k = detail::key_bytes(key);
        detail::check(f(get(), k, key.size(), n, &d, &src));
        redis_decision r;
        static_cast<decision &>(r) = decision::from(d);
        r.source = static_cast<sluicegate::source>(src);
        return r;
    }
    struct deleter {
        void operator()(sluicegate_redis *p) const noexcept { sluicegate_redis_free(p); }
    };
    std::unique_ptr<sluicegate_redis, deleter> h_;
};

/// One request attribute for a policy check: `ip`, `path`, `method`, `host`,
/// `header:<lower-case name>` or any the application adds. Both UTF-8.
struct attr {
    std::string_view name;
    std::string_view value;
};

/// One matching rule's answer. `name` points into the policy_decision it came
/// from: valid until that decision's next check or its destruction.
struct policy_rule {
    std::string_view name;
    bool shadow = false;  ///< counted, never denies
    bool allowed = false;
    bool backend_error = false;
    std::uint64_t remaining = 0;
    std::uint64_t limit = 0;
    nanoseconds window{0};
    nanoseconds retry_after{0};
    nanoseconds reset_after{0};
    nanoseconds delay{0};
};

/// A policy check's answer, and the buffer the next check reuses (no allocation
/// once it has grown). Used by one thread at a time; move-only.
class policy_decision {
public:
    policy_decision() {
        sluicegate_policy_decision *h = nullptr;
        detail::check(sluicegate_policy_decision_new(&h));
        h_.reset(h);
    }
    /// Admitted: every enforcing rule that matched admitted it.
    explicit operator bool() const noexcept { return r_.allowed; }
    bool allowed() const noexcept { return r_.allowed; }
    /// Until a retry could pass every denying rule; zero when admitted.
    nanoseconds retry_after() const noexcept { return detail::dur(r_.retry_after_ns); }
    /// retry_after() in whole seconds, rounded up (for Retry-After).
    std::uint64_t retry_after_seconds() const noexcept {
        return r_.retry_after_ns / 1000000000u + (r_.retry_after_ns % 1000000000u != 0);
    }
    /// The longest shaper wait among the enforcing rules.
    nanoseconds delay() const noexcept { return detail::dur(r_.delay_ns); }
    /// Rules that matched (enforcing and shadow), in file order.
    std::size_t size() const noexcept { return r_.rule_count; }
    /// Matching rule number i (0 to size() - 1).
    policy_rule rule(std::size_t i) const {
        if (i >= size()) throw error(SLUICEGATE_ERR_INDEX);
        sluicegate_policy_rule r{};
        detail::check(sluicegate_policy_decision_rule(h_.get(), static_cast<std::uint32_t>(i), &r));
        policy_rule out;
        out.name = std::string_view(r.name, r.name_len);
        out.shadow = r.shadow;
        out.allowed = r.allowed;
        out.backend_error = r.backend_error;
        out.remaining = r.remaining;
        out.limit = r.limit;
        out.window = detail::dur(r.window_ns);
        out.retry_after = detail::dur(r.retry_after_ns);
        out.reset_after = detail::dur(r.reset_after_ns);
        out.delay = detail::dur(r.delay_ns);
        return out;
    }
    /// The first enforcing rule that denied, if any.
    std::optional<policy_rule> denying() const {
        if (r_.denying_rule == SLUICEGATE_POLICY_NO_RULE) return std::nullopt;
        return rule(r_.denying_rule);
    }
    /// The RateLimit field value: one item per enforcing rule that matched.
    std::string ratelimit() const { return text(sluicegate_policy_decision_ratelimit); }
    /// The RateLimit-Policy field value.
    std::string ratelimit_policy() const {
        return text(sluicegate_policy_decision_ratelimit_policy);
    }
    const sluicegate_policy_result &result() const noexcept { return r_; }
    sluicegate_policy_decision *get() const noexcept { return h_.get(); }

private:
    friend class policy;
    using text_fn = sluicegate_status (*)(const sluicegate_policy_decision *, char *, std::size_t,
                                          std::size_t *);
    std::string text(text_fn f) const {
        std::size_t len = 0;
        detail::check(f(h_.get(), nullptr, 0, &len));
        std::string out(len, '\0');
        detail::check(f(h_.get(), out.data(), len + 1, &len));
        out.resize(len);
        return out;
    }
    struct deleter {
        void operator()(sluicegate_policy_decision *p) const noexcept {
            sluicegate_policy_decision_free(p);
        }
    };
    sluicegate_policy_result r_{true, 0, 0, 0, SLUICEGATE_POLICY_NO_RULE};
    std::unique_ptr<sluicegate_policy_decision, deleter> h_;
};

/// A rate-limit policy: the rules of a TOML rule file, checked all-or-nothing
/// across rules, reloadable while it runs. Thread-safe (checks and reloads from
/// any threads); move-only. A rejected rule file throws sluicegate::error whose
/// what() lists every error with its file, line, column and rule.
class policy {
public:
    /// The policy in rule-file text.
    static policy from_string(std::string_view toml) {
        return policy(sluicegate_policy_new, toml);
    }
    /// The policy in the rule file at `path`.
    static policy from_file(std::string_view path) {
        return policy(sluicegate_policy_new_from_file, path);
    }
    /// The rule file's warnings, one a line ("" without any).
    const std::string &warnings() const noexcept { return warnings_; }

    /// Checks a request of cost n now (the library clock).
    policy_decision check(std::initializer_list<attr> attrs, std::uint64_t n = 1) const {
        policy_decision d;
        check_into(d, attrs.begin(), attrs.size(), n);
        return d;
    }
    /// Checks a request of cost n at `now` (one monotonic clock per policy).
    policy_decision check_at(std::initializer_list<attr> attrs, nanoseconds now,
                             std::uint64_t n = 1) const {
        policy_decision d;
        check_at_into(d, attrs.begin(), attrs.size(), now, n);
        return d;
    }
    /// check() into a decision the caller reuses.
    void check_into(policy_decision &d, const attr *attrs, std::size_t count,
                    std::uint64_t n = 1) const {
        auto raw = convert(attrs, count);
        detail::check(sluicegate_policy_check(get(), raw.data(), raw.size(), n, d.get(), &d.r_));
    }
    /// check_at() into a decision the caller reuses.
    void check_at_into(policy_decision &d, const attr *attrs, std::size_t count, nanoseconds now,
                       std::uint64_t n = 1) const {
        auto raw = convert(attrs, count);
        detail::check(sluicegate_policy_check_at(get(), raw.data(), raw.size(), n,
                                                 detail::ticks(now), d.get(), &d.r_));
    }
    /// Replaces the rules with those in `toml` if valid; on error (thrown) the
    /// policy in force keeps running with its state. Returns the warnings.
    std::string reload(std::string_view toml) const {
        return reload_with(sluicegate_policy_reload, toml);
    }
    /// reload() from the rule file at `path`.
    std::string reload_from_file(std::string_view path) const {
        return reload_with(sluicegate_policy_reload_from_file, path);
    }
    /// The Prometheus text of every rule's counters and the reload history.
    std::string metrics_text() const {
        std::string out(4096, '\0');
        for (;;) {
            std::size_t len = 0;
            detail::check(sluicegate_policy_metrics_text(get(), out.data(), out.size() + 1, &len));
            if (len <= out.size()) {
                out.resize(len);
                return out;
            }
            out.assign(len + len / 2, '\0');
        }
    }

    const sluicegate_policy *get() const noexcept { return h_.get(); }

private:
    // Messages: rule files with many errors are truncated at 16 KiB.
    static constexpr std::size_t message_cap = 16384;
    using new_fn = sluicegate_status (*)(const char *, std::size_t, char *, std::size_t,
                                         sluicegate_policy **);
    using reload_fn = sluicegate_status (*)(const sluicegate_policy *, const char *, std::size_t,
                                            char *, std::size_t);
    policy(new_fn f, std::string_view src) {
        std::string msg(message_cap, '\0');
        sluicegate_policy *h = nullptr;
        const auto s = f(detail::bytes(src), src.size(), msg.data(), msg.size(), &h);
        msg.resize(std::char_traits<char>::length(msg.c_str()));
        if (s != SLUICEGATE_OK) throw error(s, msg);
        h_.reset(h);
        warnings_ = std::move(msg);
    }
    std::string reload_with(reload_fn f, std::string_view src) const {
        std::string msg(message_cap, '\0');
        const auto s = f(get(), detail::bytes(src), src.size(), msg.data(), msg.size());
        msg.resize(std::char_traits<char>::length(msg.c_str()));
        if (s != SLUICEGATE_OK) throw error(s, msg);
        return msg;
    }
    static std::vector<sluicegate_attr> convert(const attr *attrs, std::size_t count) {
        std::vector<sluicegate_attr> raw;
        raw.reserve(count);
        for (std::size_t i = 0; i < count; ++i)
            raw.push_back({detail::bytes(attrs[i].name), attrs[i].name.size(),
                           detail::bytes(attrs[i].value), attrs[i].value.size()});
        return raw;
    }
    struct deleter {
        void operator()(sluicegate_policy *p) const noexcept { sluicegate_policy_free(p); }
    };
    std::unique_ptr<sluicegate_policy, deleter> h_;
    std::string warnings_;
};

}  // namespace sluicegate

#endif  // SLUICEGATE_HPP
