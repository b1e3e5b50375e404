/* C11 test of the Redis handle (sluicegate_redis_*) against a real redis-server:
 * exact decisions from the Lua scripts (a burst, then a denial with its retry
 * time; remaining counting down; a peek charging nothing; the shaper's delay),
 * one handle checked from several threads, the failure policies for a server
 * that is not there (fail closed denies at once, fail open admits, the local
 * fallback decides its share; the source says who decided), bad input, and
 * policies (sluicegate_policy_*) whose `redis` and `hybrid` rules share one
 * count between two handles, with `on_error` answering for a dead server.
 *
 * SLUICEGATE_REDIS_URL: a live server (scripts/test-ffi starts its own);
 * SLUICEGATE_REDIS_CLOSED_URL: a loopback port nobody listens on.
 * Built with -std=c11 -Wall -Wextra -Werror -pedantic under
 * -fsanitize=address,undefined by scripts/test-ffi. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "expect.h"
#include "sluicegate.h"

#define MS UINT64_C(1000000)

static const char *live_url;
static const char *closed_url;
static char run_id[64];

/* One per minute, burst 5: nothing refills during the test. */
static sluicegate_config bucket(void) { return cfg(SLUICEGATE_TOKEN_BUCKET, 1, 60 * SEC, 5); }

static sluicegate_redis_config options(uint32_t policy) {
    sluicegate_redis_config rc;
    memset(&rc, 0, sizeof rc);
    rc.struct_size = sizeof rc;
    rc.failure_policy = policy;
    rc.timeout_ns = 20 * MS;
    rc.connect_timeout_ns = 20 * MS;
    rc.breaker_failure_threshold = 2;
    rc.breaker_cooldown_ns = 2 * SEC;
    return rc;
}

/* A limit name of its own for this run, so reruns against one server agree. */
static const char *name(const char *what, char *buf, size_t len) {
    snprintf(buf, len, "ffi-c-%s-%s", what, run_id);
    return buf;
}

static sluicegate_redis *open_redis(const char *url, const char *n, sluicegate_config limit,
                                    const sluicegate_redis_config *rc) {
    sluicegate_redis *h = NULL;
    EXPECT_STATUS(sluicegate_redis_new(url, n, &limit, rc, &h), SLUICEGATE_OK);
    EXPECT(h != NULL);
    return h;
}

static sluicegate_status check(const sluicegate_redis *h, const char *key, uint64_t n,
                               sluicegate_decision *d, uint32_t *src) {
    return sluicegate_redis_check(h, (const uint8_t *)key, strlen(key), n, d, src);
}

static sluicegate_status peek(const sluicegate_redis *h, const char *key, uint64_t n,
                              sluicegate_decision *d, uint32_t *src) {
    return sluicegate_redis_peek(h, (const uint8_t *)key, strlen(key), n, d, src);
}

static double seconds_since(const struct timespec *t0) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

static void test_exact_decisions(void) {
    char buf[128];
    sluicegate_redis *h = open_redis(live_url, name("bucket", buf, sizeof buf), bucket(), NULL);
    if (h == NULL) return;
    sluicegate_decision d;
    uint32_t src = UINT32_MAX;

    /* A fresh key: a peek says 1 unit would leave 4, and charges nothing. */
    for (int i = 0; i < 3; ++i) {
        EXPECT_STATUS(peek(h, "user:1", 1, &d, &src), SLUICEGATE_OK);
        EXPECT(d.allowed && d.remaining == 4 && d.limit == 5 && d.retry_after_ns == 0);
        EXPECT(src == SLUICEGATE_SOURCE_REDIS);
    }
    /* The burst, remaining counting down. */
    for (uint64_t left = 5; left-- > 0;) {
        src = UINT32_MAX;
        EXPECT_STATUS(check(h, "user:1", 1, &d, &src), SLUICEGATE_OK);
        EXPECT(d.allowed && d.remaining == left && d.retry_after_ns == 0 && d.limit == 5);
        EXPECT(src == SLUICEGATE_SOURCE_REDIS);
        EXPECT(d.delay_ns == 0);
    }
    /* Then a denial: the next unit is (just under) a minute away. */
    EXPECT_STATUS(check(h, "user:1", 1, &d, &src), SLUICEGATE_OK);
    EXPECT(!d.allowed && d.remaining == 0 && d.limit == 5);
    EXPECT(d.retry_after_ns > 55 * SEC && d.retry_after_ns <= 60 * SEC);
    EXPECT(d.reset_after_ns > 4 * 60 * SEC && d.reset_after_ns <= 5 * 60 * SEC);
    EXPECT(src == SLUICEGATE_SOURCE_REDIS);
    /* A denied peek, a denied n = 0 check (a peek) and another denial change nothing. */
    EXPECT_STATUS(peek(h, "user:1", 1, &d, NULL), SLUICEGATE_OK);
    EXPECT(!d.allowed && d.retry_after_ns > 55 * SEC);
    EXPECT_STATUS(check(h, "user:1", 0, &d, NULL), SLUICEGATE_OK);
    EXPECT(d.remaining == 0);

    /* Another key has its own state; costs are all-or-nothing. */
    EXPECT_STATUS(check(h, "user:2", 3, &d, &src), SLUICEGATE_OK);
    EXPECT(d.allowed && d.remaining == 2);
    EXPECT_STATUS(check(h, "user:2", 3, &d, &src), SLUICEGATE_OK);
    EXPECT(!d.allowed && d.remaining == 2 && d.retry_after_ns > 0);
    EXPECT_STATUS(peek(h, "user:2", 2, &d, &src), SLUICEGATE_OK);
    EXPECT(d.allowed && d.remaining == 0);
    EXPECT_STATUS(check(h, "user:2", 2, &d, &src), SLUICEGATE_OK);
    EXPECT(d.allowed && d.remaining == 0);

    /* A cost above the burst can never succeed: a status, with a denial. */
    EXPECT_STATUS(check(h, "user:3", 6, &d, &src), SLUICEGATE_ERR_INSUFFICIENT_CAPACITY);
    EXPECT(!d.allowed && d.limit == 5 && d.retry_after_ns == UINT64_MAX);

    bool open = true;
    EXPECT_STATUS(sluicegate_redis_circuit_open(h, &open), SLUICEGATE_OK);
    EXPECT(!open);
    sluicegate_redis_free(h);
}

static void test_other_algorithms(void) {
    char buf[128];
    sluicegate_decision d;
    uint32_t src;

    /* The shaper's wait is the decision's delay_ns, as for a local shaper. */
    sluicegate_config s = cfg(SLUICEGATE_SHAPER, 10, SEC, 1);
    s.max_delay_ns = SEC;
    sluicegate_redis *h = open_redis(live_url, name("shaper", buf, sizeof buf), s, NULL);
    if (h == NULL) return;
    EXPECT_STATUS(check(h, "k", 1, &d, &src), SLUICEGATE_OK);
    EXPECT(d.allowed && d.delay_ns == 0 && src == SLUICEGATE_SOURCE_REDIS);
    EXPECT_STATUS(check(h, "k", 1, &d, &src), SLUICEGATE_OK);
    EXPECT(d.allowed && d.delay_ns > 0 && d.delay_ns <= 100 * MS);
    sluicegate_redis_free(h);

    /* A fixed window of 3 per hour; a sliding window of 4 per hour. */
    h = open_redis(live_url, name("fixed", buf, sizeof buf), cfg(SLUICEGATE_FIXED_WINDOW, 3, 3600 * SEC, 0), NULL);
    if (h == NULL) return;
    int admitted = 0;
    for (int i = 0; i < 6; ++i) {
        EXPECT_STATUS(check(h, "k", 1, &d, NULL), SLUICEGATE_OK);
        admitted += d.allowed;
    }
    EXPECT(admitted == 3 && !d.allowed && d.limit == 3 && d.retry_after_ns > 0);
    sluicegate_redis_free(h);
    h = open_redis(live_url, name("sliding", buf, sizeof buf), cfg(SLUICEGATE_SLIDING_WINDOW, 4, 3600 * SEC, 0), NULL);
    if (h == NULL) return;
    admitted = 0;
    for (int i = 0; i < 6; ++i) {
        EXPECT_STATUS(check(h, "k", 1, &d, NULL), SLUICEGATE_OK);
        admitted += d.allowed;
    }
    EXPECT(admitted == 4 && !d.allowed && d.limit == 4);
    sluicegate_redis_free(h);
}

struct worker {
    const sluicegate_redis *h;
    int admitted;
    int errors;
};

static void *hammer(void *arg) {
    struct worker *w = arg;
    for (int i = 0; i < 10; ++i) {
        sluicegate_decision d = {0};
        uint32_t src = UINT32_MAX;
        if (check(w->h, "shared", 1, &d, &src) != SLUICEGATE_OK || src != SLUICEGATE_SOURCE_REDIS)
            ++w->errors;
        w->admitted += d.allowed;
    }
    return NULL;
}

static void test_threads(void) {
    char buf[128];
    sluicegate_config c = cfg(SLUICEGATE_TOKEN_BUCKET, 1, 60 * SEC, 8);
    sluicegate_redis *h = open_redis(live_url, name("threads", buf, sizeof buf), c, NULL);
    if (h == NULL) return;
    struct worker w[4];
    pthread_t t[4];
    for (int i = 0; i < 4; ++i) {
        w[i] = (struct worker){h, 0, 0};
        EXPECT(pthread_create(&t[i], NULL, hammer, &w[i]) == 0);
    }
    int admitted = 0, errors = 0;
    for (int i = 0; i < 4; ++i) {
        pthread_join(t[i], NULL);
        admitted += w[i].admitted;
        errors += w[i].errors;
    }
    /* 40 checks from 4 threads on one key: exactly the burst is admitted. */
    EXPECT(admitted == 8 && errors == 0);
    sluicegate_redis_free(h);
}

static void test_server_unreachable(void) {
    char buf[128];
    sluicegate_decision d;
    uint32_t src;
    struct timespec t0;

    /* Fail closed: denied at once, retry after the cooldown; after 2 failures
     * the breaker is open and no call touches the network. */
    sluicegate_redis_config rc = options(SLUICEGATE_FAIL_CLOSED);
    sluicegate_redis *h = open_redis(closed_url, name("closed", buf, sizeof buf), bucket(), &rc);
    if (h == NULL) return;
    bool open = true;
    EXPECT_STATUS(sluicegate_redis_circuit_open(h, &open), SLUICEGATE_OK);
    EXPECT(!open);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < 20; ++i) {
        src = UINT32_MAX;
        EXPECT_STATUS(check(h, "k", 1, &d, &src), SLUICEGATE_OK);
        EXPECT(!d.allowed && d.remaining == 0 && d.limit == 5 && d.retry_after_ns == 2 * SEC);
        EXPECT(src == SLUICEGATE_SOURCE_FAIL_CLOSED);
    }
    EXPECT_STATUS(peek(h, "k", 1, &d, &src), SLUICEGATE_OK);
    EXPECT(!d.allowed && src == SLUICEGATE_SOURCE_FAIL_CLOSED);
    const double took = seconds_since(&t0);
    EXPECT(took < 1.0);
    if (took >= 1.0) fprintf(stderr, "21 fail-closed calls took %.3f s\n", took);
    EXPECT_STATUS(sluicegate_redis_circuit_open(h, &open), SLUICEGATE_OK);
    EXPECT(open);
    sluicegate_redis_free(h);

    /* Fail open: admitted, remaining 0. */
    rc = options(SLUICEGATE_FAIL_OPEN);
    h = open_redis(closed_url, name("open", buf, sizeof buf), bucket(), &rc);
    if (h == NULL) return;
    for (int i = 0; i < 10; ++i) {
        src = UINT32_MAX;
        EXPECT_STATUS(check(h, "k", 1, &d, &src), SLUICEGATE_OK);
        EXPECT(d.allowed && d.remaining == 0 && d.retry_after_ns == 0 && d.limit == 5);
        EXPECT(src == SLUICEGATE_SOURCE_FAIL_OPEN);
    }
    sluicegate_redis_free(h);

    /* The local fallback at 40% of a burst of 5: 2 per key. */
    rc = options(SLUICEGATE_FAIL_LOCAL);
    rc.local_share_percent = 40;
    rc.fallback_keys = 64;
    h = open_redis(closed_url, name("local", buf, sizeof buf), bucket(), &rc);
    if (h == NULL) return;
    EXPECT_STATUS(check(h, "a", 1, &d, &src), SLUICEGATE_OK);
    EXPECT(d.allowed && d.remaining == 1 && d.limit == 2 && src == SLUICEGATE_SOURCE_LOCAL_FALLBACK);
    EXPECT_STATUS(peek(h, "a", 1, &d, &src), SLUICEGATE_OK);
    EXPECT(d.allowed && d.remaining == 0 && src == SLUICEGATE_SOURCE_LOCAL_FALLBACK);
    EXPECT_STATUS(check(h, "a", 1, &d, &src), SLUICEGATE_OK);
    EXPECT(d.allowed && d.remaining == 0);
    EXPECT_STATUS(check(h, "a", 1, &d, &src), SLUICEGATE_OK);
    EXPECT(!d.allowed && d.retry_after_ns > 0 && src == SLUICEGATE_SOURCE_LOCAL_FALLBACK);
    EXPECT_STATUS(check(h, "b", 1, &d, &src), SLUICEGATE_OK);
    EXPECT(d.allowed);
    sluicegate_redis_free(h);
}

/* One policy handle per "process", each with its own Redis limiters. */
static sluicegate_policy *redis_policy(const char *url, const char *prefix) {
    char text[1024], err[512];
    snprintf(text, sizeof text,
             "[redis]\nurl = \"%s\"\nprefix = \"%s\"\n\n"
             "[[rule]]\nname = \"shared\"\nmatch = { tenant = \"*\" }\nkey = [\"tenant\"]\n"
             "limit = \"3/hour\"\nbackend = \"redis\"\non_error = \"closed\"\n\n"
             "[[rule]]\nname = \"leased\"\nmatch = { path = \"/hot\" }\nlimit = \"1000/second\"\n"
             "backend = \"hybrid\"\non_error = \"open\"\n",
             url, prefix);
    sluicegate_policy *p = NULL;
    sluicegate_status s = sluicegate_policy_new(text, strlen(text), err, sizeof err, &p);
    if (s != SLUICEGATE_OK) fprintf(stderr, "policy rejected: %s\n", err);
    EXPECT_STATUS(s, SLUICEGATE_OK);
    return p;
}

static sluicegate_attr attr(const char *n, const char *v) {
    sluicegate_attr a = {n, strlen(n), v, strlen(v)};
    return a;
}

/* Checks one request with the attributes tenant=`tenant` and, when given,
 * path=`path`; returns whether it was admitted. */
static bool policy_check(const sluicegate_policy *p, const char *tenant, const char *path,
                         sluicegate_policy_decision *d, sluicegate_policy_result *r) {
    sluicegate_attr a[2] = {attr("tenant", tenant), attr("path", path ? path : "")};
    EXPECT_STATUS(sluicegate_policy_check(p, a, path ? 2 : 1, 1, d, r), SLUICEGATE_OK);
    return r->allowed;
}

static void test_policy_on_redis(void) {
    char prefix[96];
    snprintf(prefix, sizeof prefix, "ffi-c-policy-%s:", run_id);
    sluicegate_policy *a = redis_policy(live_url, prefix);
    sluicegate_policy *b = redis_policy(live_url, prefix);
    sluicegate_policy_decision *d = NULL;
    EXPECT_STATUS(sluicegate_policy_decision_new(&d), SLUICEGATE_OK);
    if (a == NULL || b == NULL || d == NULL) return;
    sluicegate_policy_result r;
    sluicegate_policy_rule rule;

    /* `shared`, 3 an hour per tenant, counted in Redis: the two handles admit 3
     * between them, then both deny; another tenant has its own count. */
    EXPECT(policy_check(a, "acme", NULL, d, &r));
    EXPECT_STATUS(sluicegate_policy_decision_rule(d, 0, &rule), SLUICEGATE_OK);
    EXPECT(rule.allowed && !rule.backend_error && rule.remaining == 2 && rule.limit == 3);
    EXPECT(policy_check(b, "acme", NULL, d, &r));
    EXPECT_STATUS(sluicegate_policy_decision_rule(d, 0, &rule), SLUICEGATE_OK);
    EXPECT(rule.remaining == 1);
    EXPECT(policy_check(a, "acme", NULL, d, &r));
    EXPECT(!policy_check(b, "acme", NULL, d, &r));
    EXPECT(r.denying_rule == 0 && r.retry_after_ns > 0);
    EXPECT_STATUS(sluicegate_policy_decision_rule(d, 0, &rule), SLUICEGATE_OK);
    EXPECT(!rule.allowed && !rule.backend_error && rule.remaining == 0);
    EXPECT(!policy_check(a, "acme", NULL, d, &r));
    EXPECT(policy_check(b, "globex", NULL, d, &r));

    /* `leased` (hybrid, 1000/s) matches too: all-or-nothing with `shared`, so
     * tenant t2 gets exactly its 3 of 200 however the leases fall. */
    int hot = 0;
    for (int i = 0; i < 200; ++i) hot += policy_check(i % 2 ? b : a, "t2", "/hot", d, &r);
    EXPECT(hot == 3);
    if (hot != 3) fprintf(stderr, "t2 admitted %d of 200, want 3\n", hot);

    /* The metrics name both rules, with no backend errors. */
    char metrics[8192];
    size_t len = 0;
    EXPECT_STATUS(sluicegate_policy_metrics_text(a, metrics, sizeof metrics, &len), SLUICEGATE_OK);
    EXPECT(len < sizeof metrics && strstr(metrics, "rule=\"shared\"") != NULL &&
           strstr(metrics, "rule=\"leased\"") != NULL);
    sluicegate_policy_free(a);
    sluicegate_policy_free(b);

    /* A server that is not there: `shared` (on_error closed) denies, `leased`
     * (open) admits, each flagged as a backend error; nothing blocks long. */
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    sluicegate_policy *dead = redis_policy(closed_url, prefix);
    if (dead == NULL) return;
    EXPECT(!policy_check(dead, "acme", NULL, d, &r));
    EXPECT_STATUS(sluicegate_policy_decision_rule(d, 0, &rule), SLUICEGATE_OK);
    EXPECT(!rule.allowed && rule.backend_error);
    sluicegate_attr hot_only[1] = {attr("path", "/hot")};
    EXPECT_STATUS(sluicegate_policy_check(dead, hot_only, 1, 1, d, &r), SLUICEGATE_OK);
    EXPECT(r.allowed && r.rule_count == 1);
    EXPECT_STATUS(sluicegate_policy_decision_rule(d, 0, &rule), SLUICEGATE_OK);
    EXPECT(rule.allowed && rule.backend_error);
    const double took = seconds_since(&t0);
    EXPECT(took < 10.0);
    sluicegate_policy_free(dead);
    sluicegate_policy_decision_free(d);
}

static void test_bad_input(void) {
    const sluicegate_config good = bucket();
    sluicegate_redis *h = NULL;
    EXPECT_STATUS(sluicegate_redis_new(NULL, "n", &good, NULL, &h), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_redis_new(live_url, NULL, &good, NULL, &h), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_redis_new(live_url, "n", NULL, NULL, &h), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_redis_new(live_url, "n", &good, NULL, NULL), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_redis_new("http://127.0.0.1:6379", "n", &good, NULL, &h),
                  SLUICEGATE_ERR_BAD_URL);
    EXPECT_STATUS(sluicegate_redis_new("redis://127.0.0.1:port", "n", &good, NULL, &h),
                  SLUICEGATE_ERR_BAD_URL);
    EXPECT_STATUS(sluicegate_redis_new("redis://\xff", "n", &good, NULL, &h), SLUICEGATE_ERR_NOT_UTF8);
    EXPECT_STATUS(sluicegate_redis_new(live_url, "a{b", &good, NULL, &h), SLUICEGATE_ERR_CONFIG_INVALID);
    sluicegate_config log = cfg(SLUICEGATE_SLIDING_LOG, 5, SEC, 0);
    EXPECT_STATUS(sluicegate_redis_new(live_url, "n", &log, NULL, &h), SLUICEGATE_ERR_UNSUPPORTED);
    sluicegate_config odd = cfg(SLUICEGATE_FIXED_WINDOW, 5, 1500, 0);
    EXPECT_STATUS(sluicegate_redis_new(live_url, "n", &odd, NULL, &h), SLUICEGATE_ERR_CONFIG_RESOLUTION);
    sluicegate_config alg = good;
    alg.algorithm = 42;
    EXPECT_STATUS(sluicegate_redis_new(live_url, "n", &alg, NULL, &h), SLUICEGATE_ERR_BAD_ALGORITHM);
    sluicegate_redis_config rc = options(7);
    EXPECT_STATUS(sluicegate_redis_new(live_url, "n", &good, &rc, &h), SLUICEGATE_ERR_BAD_FAILURE_POLICY);
    rc = options(SLUICEGATE_FAIL_LOCAL);
    rc.struct_size = 8;
    EXPECT_STATUS(sluicegate_redis_new(live_url, "n", &good, &rc, &h), SLUICEGATE_ERR_STRUCT_SIZE);
    rc = options(SLUICEGATE_FAIL_LOCAL);
    rc.local_share_percent = 250;
    EXPECT_STATUS(sluicegate_redis_new(live_url, "n", &good, &rc, &h), SLUICEGATE_ERR_CONFIG_TOO_LARGE);
    rc = options(SLUICEGATE_FAIL_OPEN);
    rc.prefix = "bad{prefix";
    EXPECT_STATUS(sluicegate_redis_new(live_url, "n", &good, &rc, &h), SLUICEGATE_ERR_CONFIG_INVALID);
    EXPECT(h == NULL);

    rc = options(SLUICEGATE_FAIL_CLOSED);
    rc.prefix = "ffi-test:";
    h = open_redis(live_url, "bad-input", good, &rc);
    if (h == NULL) return;
    sluicegate_decision d;
    uint32_t src = 99;
    EXPECT_STATUS(sluicegate_redis_check(NULL, (const uint8_t *)"k", 1, 1, &d, &src), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_redis_check(h, NULL, 1, 1, &d, &src), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_redis_check(h, (const uint8_t *)"k", 1, 1, NULL, &src), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_redis_peek(NULL, (const uint8_t *)"k", 1, 1, &d, &src), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_redis_check(h, (const uint8_t *)"k", 0, 1, &d, &src), SLUICEGATE_ERR_EMPTY_KEY);
    const uint8_t bad[] = {'u', 0xc3, '('};
    EXPECT_STATUS(sluicegate_redis_check(h, bad, sizeof bad, 1, &d, &src), SLUICEGATE_ERR_NOT_UTF8);
    EXPECT_STATUS(sluicegate_redis_peek(h, bad, sizeof bad, 1, &d, &src), SLUICEGATE_ERR_NOT_UTF8);
    EXPECT(src == 99);
    EXPECT_STATUS(sluicegate_redis_circuit_open(NULL, &(bool){false}), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_redis_circuit_open(h, NULL), SLUICEGATE_ERR_NULL);
    sluicegate_redis_free(h);
    sluicegate_redis_free(NULL);

    const uint32_t codes[] = {SLUICEGATE_ERR_NOT_UTF8, SLUICEGATE_ERR_BAD_FAILURE_POLICY,
                              SLUICEGATE_ERR_BAD_URL, SLUICEGATE_ERR_CONFIG_RESOLUTION,
                              SLUICEGATE_ERR_SYSTEM};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; ++i)
        EXPECT(strcmp(sluicegate_status_str(codes[i]), "unknown status") != 0);
}

int main(void) {
    live_url = getenv("SLUICEGATE_REDIS_URL");
    closed_url = getenv("SLUICEGATE_REDIS_CLOSED_URL");
    if (live_url == NULL || closed_url == NULL) {
        fprintf(stderr, "redis_test: set SLUICEGATE_REDIS_URL and SLUICEGATE_REDIS_CLOSED_URL\n");
        return 2;
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    snprintf(run_id, sizeof run_id, "%ld-%ld-%ld", (long)getpid(), (long)now.tv_sec, (long)now.tv_nsec);

    test_exact_decisions();
    test_other_algorithms();
    test_threads();
    test_server_unreachable();
    test_policy_on_redis();
    test_bad_input();
    printf("redis_test (C11, sluicegate %s, %s): %d passed, %d failed\n", sluicegate_version(),
           live_url, checks - failures, failures);
    return failures == 0 ? 0 : 1;
}
