/* C11 test of the sluicegate C ABI: every algorithm's admitted count against its
 * quota (exact, at caller-supplied times), compound limits, keyed and striped
 * limiters, the rate-string parser, versioned structs, and every bad input ->
 * its status code. Built with -std=c11 -Wall -Wextra -Werror -pedantic under
 * -fsanitize=address,undefined by scripts/test-ffi. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "expect.h"
#include "sluicegate.h"

/* Admits at a fixed time until denied; returns how many were admitted. */
static uint64_t drain(const sluicegate_limiter *l, uint64_t now) {
    sluicegate_decision d;
    uint64_t admitted = 0;
    for (int i = 0; i < 10000; ++i) {
        if (sluicegate_limiter_check_at(l, now, &d) != SLUICEGATE_OK || !d.allowed) break;
        ++admitted;
    }
    return admitted;
}

static void test_every_algorithm_admits_its_quota(void) {
    const uint32_t algs[] = {SLUICEGATE_TOKEN_BUCKET, SLUICEGATE_LEAKY_BUCKET, SLUICEGATE_SHAPER,
                             SLUICEGATE_FIXED_WINDOW, SLUICEGATE_SLIDING_WINDOW,
                             SLUICEGATE_SLIDING_LOG};
    for (size_t i = 0; i < sizeof algs / sizeof algs[0]; ++i) {
        sluicegate_config c = cfg(algs[i], 10, SEC, 0);
        sluicegate_limiter *l = NULL;
        EXPECT_STATUS(sluicegate_limiter_new(&c, 1, &l), SLUICEGATE_OK);
        EXPECT(l != NULL);
        const uint64_t t0 = 5 * SEC; /* aligned to a window start */
        EXPECT(drain(l, t0) == 10);
        sluicegate_decision d;
        EXPECT_STATUS(sluicegate_limiter_check_at(l, t0, &d), SLUICEGATE_OK);
        EXPECT(!d.allowed && d.remaining == 0 && d.limit == 10 && d.retry_after_ns > 0);
        /* A peek charges nothing. */
        EXPECT_STATUS(sluicegate_limiter_peek_at(l, t0, &d), SLUICEGATE_OK);
        EXPECT(!d.allowed);
        /* Two periods later the whole quota is back (the sliding window still
         * weighs the previous window at the very start of the next). */
        EXPECT(drain(l, t0 + 2 * SEC) == 10);
        /* n above the capacity can never succeed: a status, not a denial. */
        EXPECT_STATUS(sluicegate_limiter_check_n_at(l, 11, t0 + 10 * SEC, &d),
                      SLUICEGATE_ERR_INSUFFICIENT_CAPACITY);
        EXPECT(!d.allowed && d.limit == 10 && d.retry_after_ns == UINT64_MAX);
        EXPECT_STATUS(sluicegate_limiter_check_n_at(l, UINT64_MAX, t0 + 10 * SEC, &d),
                      SLUICEGATE_ERR_INSUFFICIENT_CAPACITY);
        /* n = 0 is a peek; n = capacity fits exactly once. */
        EXPECT_STATUS(sluicegate_limiter_check_n_at(l, 0, t0 + 10 * SEC, &d), SLUICEGATE_OK);
        EXPECT(d.allowed && d.remaining == 10);
        EXPECT_STATUS(sluicegate_limiter_check_n_at(l, 10, t0 + 10 * SEC, &d), SLUICEGATE_OK);
        EXPECT(d.allowed && d.remaining == 0);
        /* The library clock: the plain calls work too. */
        EXPECT_STATUS(sluicegate_limiter_check(l, &d), SLUICEGATE_OK);
        EXPECT_STATUS(sluicegate_limiter_check_n(l, 1, &d), SLUICEGATE_OK);
        EXPECT_STATUS(sluicegate_limiter_peek(l, &d), SLUICEGATE_OK);
        EXPECT_STATUS(sluicegate_limiter_peek_n(l, 2, &d), SLUICEGATE_OK);
        EXPECT_STATUS(sluicegate_limiter_peek_n_at(l, 2, t0, &d), SLUICEGATE_OK);
        sluicegate_limiter_free(l);
    }
}

static void test_token_bucket_details(void) {
    sluicegate_config c = cfg(SLUICEGATE_TOKEN_BUCKET, 100, SEC, 20);
    sluicegate_limiter *l = NULL;
    EXPECT_STATUS(sluicegate_limiter_new(&c, 1, &l), SLUICEGATE_OK);
    sluicegate_decision d;
    EXPECT_STATUS(sluicegate_limiter_check_at(l, 0, &d), SLUICEGATE_OK);
    EXPECT(d.allowed && d.remaining == 19 && d.limit == 20 && d.retry_after_ns == 0);
    EXPECT(d.reset_after_ns == 10000000); /* one token: 10 ms */
    EXPECT(drain(l, 0) == 19);
    EXPECT_STATUS(sluicegate_limiter_check_at(l, 0, &d), SLUICEGATE_OK);
    EXPECT(!d.allowed && d.retry_after_ns == 10000000 && d.reset_after_ns == 200000000);
    /* Time going backwards is no time passing. */
    EXPECT_STATUS(sluicegate_limiter_check_at(l, 0, &d), SLUICEGATE_OK);
    EXPECT(!d.allowed);
    EXPECT(drain(l, 10000000) == 1);
    /* Reconfigure: a bigger bucket has room at once; a bad config changes nothing. */
    sluicegate_config bigger = cfg(SLUICEGATE_TOKEN_BUCKET, 100, SEC, 40);
    EXPECT_STATUS(sluicegate_limiter_set_config(l, 0, &bigger), SLUICEGATE_OK);
    EXPECT(drain(l, 10000000) == 20);
    sluicegate_config zero = cfg(SLUICEGATE_TOKEN_BUCKET, 0, SEC, 0);
    EXPECT_STATUS(sluicegate_limiter_set_config(l, 0, &zero), SLUICEGATE_ERR_CONFIG_ZERO);
    EXPECT_STATUS(sluicegate_limiter_set_config(l, 1, &bigger), SLUICEGATE_ERR_INDEX);
    sluicegate_config other = cfg(SLUICEGATE_FIXED_WINDOW, 100, SEC, 0);
    EXPECT_STATUS(sluicegate_limiter_set_config(l, 0, &other), SLUICEGATE_ERR_CONFIG_IMMUTABLE);
    EXPECT_STATUS(sluicegate_limiter_reset(l), SLUICEGATE_OK);
    EXPECT(drain(l, 10000000) == 40);
    sluicegate_limiter_free(l);
}

static void test_shaper_delays(void) {
    sluicegate_config c = cfg(SLUICEGATE_SHAPER, 100, SEC, 1);
    c.max_delay_ns = 50000000; /* 50 ms of queue */
    sluicegate_limiter *l = NULL;
    EXPECT_STATUS(sluicegate_limiter_new(&c, 1, &l), SLUICEGATE_OK);
    sluicegate_decision d;
    for (uint64_t i = 0; i <= 5; ++i) {
        EXPECT_STATUS(sluicegate_limiter_check_at(l, 0, &d), SLUICEGATE_OK);
        EXPECT(d.allowed && d.delay_ns == i * 10000000);
    }
    EXPECT_STATUS(sluicegate_limiter_check_at(l, 0, &d), SLUICEGATE_OK);
    EXPECT(!d.allowed && d.delay_ns == 0);
    /* The max delay cannot change on a live shaper. */
    sluicegate_config c2 = c;
    c2.max_delay_ns = 1;
    EXPECT_STATUS(sluicegate_limiter_set_config(l, 0, &c2), SLUICEGATE_ERR_CONFIG_IMMUTABLE);
    sluicegate_limiter_free(l);
}

static void test_compound(void) {
    /* 2 per second and 3 per minute, all-or-nothing. */
    sluicegate_config cs[SLUICEGATE_MAX_LIMITS] = {
        cfg(SLUICEGATE_TOKEN_BUCKET, 2, SEC, 0), cfg(SLUICEGATE_TOKEN_BUCKET, 3, 60 * SEC, 0)};
    sluicegate_limiter *l = NULL;
    EXPECT_STATUS(sluicegate_limiter_new(cs, 2, &l), SLUICEGATE_OK);
    EXPECT(drain(l, 0) == 2);
    sluicegate_decision d;
    EXPECT(drain(l, SEC) == 1);
    EXPECT_STATUS(sluicegate_limiter_check_at(l, SEC, &d), SLUICEGATE_OK);
    EXPECT(!d.allowed && d.limit == 3); /* the per-minute limit binds */
    EXPECT_STATUS(sluicegate_limiter_reset(l), SLUICEGATE_ERR_UNSUPPORTED);
    sluicegate_config wider = cfg(SLUICEGATE_TOKEN_BUCKET, 10, 60 * SEC, 0);
    EXPECT_STATUS(sluicegate_limiter_set_config(l, 1, &wider), SLUICEGATE_OK);
    EXPECT_STATUS(sluicegate_limiter_set_config(l, 2, &wider), SLUICEGATE_ERR_INDEX);
    /* The bucket's time-until-full carries over: full again at 60 s, when the
     * per-second limit binds. */
    EXPECT(drain(l, 60 * SEC) == 2);
    sluicegate_limiter_free(l);

    /* Four limits of every window kind. */
    const uint32_t algs[] = {SLUICEGATE_LEAKY_BUCKET, SLUICEGATE_FIXED_WINDOW,
                             SLUICEGATE_SLIDING_WINDOW};
    for (size_t i = 0; i < 3; ++i) {
        sluicegate_config four[4] = {cfg(algs[i], 5, SEC, 0), cfg(algs[i], 7, 60 * SEC, 0),
                                     cfg(algs[i], 9, 3600 * SEC, 0),
                                     cfg(algs[i], 11, 86400 * SEC, 0)};
        EXPECT_STATUS(sluicegate_limiter_new(four, 4, &l), SLUICEGATE_OK);
        EXPECT(drain(l, 0) == 5);
        EXPECT(drain(l, 2 * SEC) == 2); /* the per-minute limit binds */
        sluicegate_limiter_free(l);
        EXPECT_STATUS(sluicegate_limiter_new(four, 3, &l), SLUICEGATE_OK);
        sluicegate_limiter_free(l);
    }
    /* Bad compounds. */
    sluicegate_config five[5];
    for (int i = 0; i < 5; ++i) five[i] = cfg(SLUICEGATE_TOKEN_BUCKET, 1, SEC, 0);
    l = NULL;
    EXPECT_STATUS(sluicegate_limiter_new(five, 5, &l), SLUICEGATE_ERR_LIMIT_COUNT);
    EXPECT_STATUS(sluicegate_limiter_new(five, 0, &l), SLUICEGATE_ERR_LIMIT_COUNT);
    five[1].algorithm = SLUICEGATE_FIXED_WINDOW;
    EXPECT_STATUS(sluicegate_limiter_new(five, 2, &l), SLUICEGATE_ERR_MIXED_ALGORITHMS);
    five[1].algorithm = 77;
    EXPECT_STATUS(sluicegate_limiter_new(five, 2, &l), SLUICEGATE_ERR_BAD_ALGORITHM);
    five[1].algorithm = SLUICEGATE_TOKEN_BUCKET;
    five[1].struct_size = 8;
    EXPECT_STATUS(sluicegate_limiter_new(five, 2, &l), SLUICEGATE_ERR_STRUCT_SIZE);
    sluicegate_config shapers[2] = {cfg(SLUICEGATE_SHAPER, 1, SEC, 0), cfg(SLUICEGATE_SHAPER, 2, SEC, 0)};
    EXPECT_STATUS(sluicegate_limiter_new(shapers, 2, &l), SLUICEGATE_ERR_UNSUPPORTED);
    sluicegate_config logs[2] = {cfg(SLUICEGATE_SLIDING_LOG, 1, SEC, 0), cfg(SLUICEGATE_SLIDING_LOG, 2, SEC, 0)};
    EXPECT_STATUS(sluicegate_limiter_new(logs, 2, &l), SLUICEGATE_ERR_UNSUPPORTED);
    EXPECT(l == NULL); /* never written on error */
}

static void test_keyed(void) {
    sluicegate_config c = cfg(SLUICEGATE_TOKEN_BUCKET, 3, SEC, 0);
    sluicegate_keyed *k = NULL;
    EXPECT_STATUS(sluicegate_keyed_new(&c, 1000, SLUICEGATE_EVICT_STALEST, &k), SLUICEGATE_OK);
    sluicegate_decision d;
    const char *a = "10.0.0.1", *b = "10.0.0.2";
    for (int i = 0; i < 3; ++i) {
        EXPECT_STATUS(sluicegate_keyed_check_at(k, (const uint8_t *)a, strlen(a), 0, &d), SLUICEGATE_OK);
        EXPECT(d.allowed && d.remaining == (uint64_t)(2 - i));
    }
    EXPECT_STATUS(sluicegate_keyed_check_at(k, (const uint8_t *)a, strlen(a), 0, &d), SLUICEGATE_OK);
    EXPECT(!d.allowed && d.retry_after_ns == SEC / 3 + 1);
    EXPECT_STATUS(sluicegate_keyed_peek_at(k, (const uint8_t *)b, strlen(b), 0, &d), SLUICEGATE_OK);
    EXPECT(d.allowed && d.remaining == 2);
    EXPECT_STATUS(sluicegate_keyed_check_n_at(k, (const uint8_t *)b, strlen(b), 3, 0, &d), SLUICEGATE_OK);
    EXPECT(d.allowed && d.remaining == 0);
    EXPECT_STATUS(sluicegate_keyed_check_n_at(k, (const uint8_t *)b, strlen(b), 4, 0, &d),
                  SLUICEGATE_ERR_INSUFFICIENT_CAPACITY);
    EXPECT_STATUS(sluicegate_keyed_peek_n_at(k, (const uint8_t *)b, strlen(b), 1, 0, &d), SLUICEGATE_OK);
    EXPECT(!d.allowed);
    EXPECT_STATUS(sluicegate_keyed_check(k, (const uint8_t *)"c", 1, &d), SLUICEGATE_OK);
    EXPECT_STATUS(sluicegate_keyed_check_n(k, (const uint8_t *)"c", 1, 1, &d), SLUICEGATE_OK);
    EXPECT_STATUS(sluicegate_keyed_peek(k, (const uint8_t *)"c", 1, &d), SLUICEGATE_OK);
    EXPECT_STATUS(sluicegate_keyed_peek_n(k, (const uint8_t *)"c", 1, 1, &d), SLUICEGATE_OK);
    sluicegate_keyed_stats st;
    EXPECT_STATUS(sluicegate_keyed_get_stats(k, &st), SLUICEGATE_OK);
    EXPECT(st.capacity == 1000 && st.inserted == 3 && st.evicted == 0);
    uint64_t live = 0;
    EXPECT_STATUS(sluicegate_keyed_len_at(k, 0, &live), SLUICEGATE_OK);
    EXPECT(live == 2 || live == 3);
    /* "c" was checked on the library clock: look past it. */
    EXPECT_STATUS(sluicegate_keyed_len_at(k, sluicegate_now_ns() + 100 * SEC, &live), SLUICEGATE_OK);
    EXPECT(live == 0);
    sluicegate_config more = cfg(SLUICEGATE_TOKEN_BUCKET, 3, SEC, 6);
    EXPECT_STATUS(sluicegate_keyed_set_config(k, &more), SLUICEGATE_OK);
    EXPECT_STATUS(sluicegate_keyed_check_n_at(k, (const uint8_t *)a, strlen(a), 3, 0, &d), SLUICEGATE_OK);
    EXPECT(d.allowed);
    sluicegate_config window = cfg(SLUICEGATE_FIXED_WINDOW, 3, SEC, 0);
    EXPECT_STATUS(sluicegate_keyed_set_config(k, &window), SLUICEGATE_ERR_CONFIG_IMMUTABLE);
    EXPECT_STATUS(sluicegate_keyed_clear(k), SLUICEGATE_OK);
    EXPECT_STATUS(sluicegate_keyed_check_n_at(k, (const uint8_t *)a, strlen(a), 6, 0, &d), SLUICEGATE_OK);
    EXPECT(d.allowed);

    /* Bad keyed input. */
    EXPECT_STATUS(sluicegate_keyed_check_at(k, (const uint8_t *)a, 0, 0, &d), SLUICEGATE_ERR_EMPTY_KEY);
    EXPECT_STATUS(sluicegate_keyed_check_at(k, NULL, 4, 0, &d), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_keyed_check_at(k, NULL, 0, 0, &d), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_keyed_check_at(k, (const uint8_t *)a, 1, 0, NULL), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_keyed_check_at(NULL, (const uint8_t *)a, 1, 0, &d), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_keyed_get_stats(k, NULL), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_keyed_len_at(k, 0, NULL), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_keyed_get_stats(NULL, &st), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_keyed_clear(NULL), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_keyed_set_config(k, NULL), SLUICEGATE_ERR_NULL);
    sluicegate_keyed_free(k);

    sluicegate_keyed *k2 = NULL;
    EXPECT_STATUS(sluicegate_keyed_new(&c, 16, 3, &k2), SLUICEGATE_ERR_BAD_POLICY);
    EXPECT_STATUS(sluicegate_keyed_new(&c, 16, UINT32_MAX, &k2), SLUICEGATE_ERR_BAD_POLICY);
    EXPECT_STATUS(sluicegate_keyed_new(&c, 0, 0, &k2), SLUICEGATE_ERR_CONFIG_ZERO);
    EXPECT_STATUS(sluicegate_keyed_new(&c, UINT64_MAX, 0, &k2), SLUICEGATE_ERR_CONFIG_TOO_LARGE);
    EXPECT_STATUS(sluicegate_keyed_new(&c, SLUICEGATE_KEYED_MAX_CAPACITY + 1ull, 0, &k2),
                  SLUICEGATE_ERR_CONFIG_TOO_LARGE);
    EXPECT_STATUS(sluicegate_keyed_new(&c, 16, 0, NULL), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_keyed_new(NULL, 16, 0, &k2), SLUICEGATE_ERR_NULL);
    sluicegate_config log = cfg(SLUICEGATE_SLIDING_LOG, 3, SEC, 0);
    EXPECT_STATUS(sluicegate_keyed_new(&log, 16, 0, &k2), SLUICEGATE_ERR_UNSUPPORTED);
    sluicegate_config zero = cfg(SLUICEGATE_FIXED_WINDOW, 0, SEC, 0);
    EXPECT_STATUS(sluicegate_keyed_new(&zero, 16, 0, &k2), SLUICEGATE_ERR_CONFIG_ZERO);
    EXPECT(k2 == NULL);

    /* Full-table policy: REJECT on a table of 8 keys. */
    EXPECT_STATUS(sluicegate_keyed_new(&c, 8, SLUICEGATE_REJECT, &k2), SLUICEGATE_OK);
    char key[16];
    uint64_t denied = 0;
    for (int i = 0; i < 9; ++i) {
        int n = snprintf(key, sizeof key, "client-%d", i);
        EXPECT_STATUS(sluicegate_keyed_check_at(k2, (const uint8_t *)key, (size_t)n, 0, &d), SLUICEGATE_OK);
        if (!d.allowed) ++denied;
    }
    EXPECT_STATUS(sluicegate_keyed_get_stats(k2, &st), SLUICEGATE_OK);
    EXPECT(denied == 1 && st.rejected == 1 && st.inserted == 8);
    sluicegate_keyed_free(k2);

    /* A keyed shaper reports delays. */
    sluicegate_config sh = cfg(SLUICEGATE_SHAPER, 10, SEC, 1);
    sh.max_delay_ns = SEC;
    EXPECT_STATUS(sluicegate_keyed_new(&sh, 8, 0, &k2), SLUICEGATE_OK);
    EXPECT_STATUS(sluicegate_keyed_check_at(k2, (const uint8_t *)"job", 3, 0, &d), SLUICEGATE_OK);
    EXPECT(d.allowed && d.delay_ns == 0);
    EXPECT_STATUS(sluicegate_keyed_check_at(k2, (const uint8_t *)"job", 3, 0, &d), SLUICEGATE_OK);
    EXPECT(d.allowed && d.delay_ns == SEC / 10);
    sluicegate_keyed_free(k2);
}

static void test_striped(void) {
    sluicegate_config c = cfg(SLUICEGATE_TOKEN_BUCKET, 1000, SEC, 64);
    const uint32_t counts[] = {0, 1, 2, 4, 8, 16};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; ++i) {
        sluicegate_striped *s = NULL;
        EXPECT_STATUS(sluicegate_striped_new(&c, counts[i], &s), SLUICEGATE_OK);
        sluicegate_decision d;
        uint64_t admitted = 0;
        for (int j = 0; j < 200; ++j) {
            EXPECT_STATUS(sluicegate_striped_check_n_at_stripe(s, (size_t)j, 1, 0, &d), SLUICEGATE_OK);
            if (d.allowed) ++admitted;
        }
        EXPECT(admitted == 64);
        EXPECT_STATUS(sluicegate_striped_check_n_at(s, 65, 0, &d), SLUICEGATE_ERR_INSUFFICIENT_CAPACITY);
        EXPECT_STATUS(sluicegate_striped_check_n_at(s, 64, 10 * SEC, &d), SLUICEGATE_OK);
        EXPECT(d.allowed); /* gathered from every stripe */
        EXPECT_STATUS(sluicegate_striped_check_at(s, 20 * SEC, &d), SLUICEGATE_OK);
        EXPECT(d.allowed);
        EXPECT_STATUS(sluicegate_striped_check(s, &d), SLUICEGATE_OK);
        EXPECT_STATUS(sluicegate_striped_check_n(s, 1, &d), SLUICEGATE_OK);
        EXPECT_STATUS(sluicegate_striped_set_config(s, &c), SLUICEGATE_OK);
        sluicegate_striped_free(s);
    }
    sluicegate_striped *s = NULL;
    EXPECT_STATUS(sluicegate_striped_new(&c, 3, &s), SLUICEGATE_ERR_BAD_STRIPES);
    EXPECT_STATUS(sluicegate_striped_new(&c, 32, &s), SLUICEGATE_ERR_BAD_STRIPES);
    sluicegate_config small = cfg(SLUICEGATE_TOKEN_BUCKET, 1000, SEC, 4);
    EXPECT_STATUS(sluicegate_striped_new(&small, 8, &s), SLUICEGATE_ERR_CONFIG_TOO_LARGE);
    sluicegate_config fw = cfg(SLUICEGATE_FIXED_WINDOW, 1000, SEC, 0);
    EXPECT_STATUS(sluicegate_striped_new(&fw, 8, &s), SLUICEGATE_ERR_UNSUPPORTED);
    EXPECT_STATUS(sluicegate_striped_new(NULL, 8, &s), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_striped_new(&c, 8, NULL), SLUICEGATE_ERR_NULL);
    EXPECT(s == NULL);
    sluicegate_decision d;
    EXPECT_STATUS(sluicegate_striped_check(NULL, &d), SLUICEGATE_ERR_NULL);
}

static void test_parse(void) {
    sluicegate_config c = cfg(SLUICEGATE_TOKEN_BUCKET, 0, 0, 0);
    sluicegate_parse_error e;
    const char *s = "100/s burst 20";
    EXPECT_STATUS(sluicegate_config_parse(s, strlen(s), &c, &e), SLUICEGATE_OK);
    EXPECT(c.amount == 100 && c.period_ns == SEC && c.burst == 20 && e.message == NULL);
    EXPECT(c.algorithm == SLUICEGATE_TOKEN_BUCKET && c.struct_size == sizeof c);
    s = "10 per 2 hours";
    EXPECT_STATUS(sluicegate_config_parse(s, strlen(s), &c, NULL), SLUICEGATE_OK);
    EXPECT(c.amount == 10 && c.period_ns == 7200 * SEC && c.burst == 10);
    /* Not NUL-terminated: exactly len bytes are read. */
    const char buf[5] = {'5', '/', 'm', 'x', 'x'};
    EXPECT_STATUS(sluicegate_config_parse(buf, 3, &c, NULL), SLUICEGATE_OK);
    EXPECT(c.amount == 5 && c.period_ns == 60 * SEC);

    s = "1000/month";
    EXPECT_STATUS(sluicegate_config_parse(s, strlen(s), &c, &e), SLUICEGATE_ERR_PARSE);
    EXPECT(e.position == 5 && e.message != NULL && strstr(e.message, "ambiguous") != NULL);
    EXPECT(c.amount == 5); /* unchanged */
    s = "100/fortnight";
    EXPECT_STATUS(sluicegate_config_parse(s, strlen(s), &c, &e), SLUICEGATE_ERR_PARSE);
    EXPECT(e.position == 4 && strstr(e.message, "unknown time unit") != NULL);
    const char bad_utf8[] = {'1', '/', (char)0xff};
    EXPECT_STATUS(sluicegate_config_parse(bad_utf8, 3, &c, &e), SLUICEGATE_ERR_PARSE);
    EXPECT(e.position == 2);
    EXPECT_STATUS(sluicegate_config_parse("", 0, &c, &e), SLUICEGATE_ERR_PARSE);
    EXPECT_STATUS(sluicegate_config_parse(NULL, 0, &c, &e), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_config_parse("1/s", 3, NULL, &e), SLUICEGATE_ERR_NULL);
    s = "1/s; 2/m";
    EXPECT_STATUS(sluicegate_config_parse(s, strlen(s), &c, &e), SLUICEGATE_ERR_PARSE);
    EXPECT(e.position == 3);
    sluicegate_config unsized = c;
    unsized.struct_size = 0;
    EXPECT_STATUS(sluicegate_config_parse("1/s", 3, &unsized, &e), SLUICEGATE_ERR_STRUCT_SIZE);

    /* A list for a compound limiter. */
    sluicegate_config list[SLUICEGATE_MAX_LIMITS];
    for (int i = 0; i < SLUICEGATE_MAX_LIMITS; ++i) list[i] = cfg(SLUICEGATE_FIXED_WINDOW, 0, 0, 0);
    size_t n = 99;
    s = "1/second; 100/hour";
    EXPECT_STATUS(sluicegate_config_parse_list(s, strlen(s), list, SLUICEGATE_MAX_LIMITS, &n, &e), SLUICEGATE_OK);
    EXPECT(n == 2 && list[0].amount == 1 && list[0].period_ns == SEC);
    EXPECT(list[1].amount == 100 && list[1].period_ns == 3600 * SEC);
    sluicegate_limiter *l = NULL;
    EXPECT_STATUS(sluicegate_limiter_new(list, n, &l), SLUICEGATE_OK);
    EXPECT(drain(l, 0) == 1);
    sluicegate_limiter_free(l);
    s = "1/s; 2/m; 3/h";
    EXPECT_STATUS(sluicegate_config_parse_list(s, strlen(s), list, 2, &n, &e), SLUICEGATE_ERR_BUFFER_TOO_SMALL);
    EXPECT(n == 3 && e.position == 10); /* how many it holds */
    /* Counting first (the snprintf convention): NULL with capacity 0. */
    n = 99;
    EXPECT_STATUS(sluicegate_config_parse_list(s, strlen(s), NULL, 0, &n, &e), SLUICEGATE_OK);
    EXPECT(n == 3 && e.message == NULL);
    s = "5 per minute";
    EXPECT_STATUS(sluicegate_config_parse_list(s, strlen(s), NULL, 0, &n, &e), SLUICEGATE_OK);
    EXPECT(n == 1);
    /* ... and the whole string is still validated. */
    s = "1/s; 2/m; 3/fortnight";
    EXPECT_STATUS(sluicegate_config_parse_list(s, strlen(s), NULL, 0, &n, &e), SLUICEGATE_ERR_PARSE);
    EXPECT(n == 0 && e.position == 12 && e.message != NULL);
    EXPECT_STATUS(sluicegate_config_parse_list(s, strlen(s), list, 1, &n, &e), SLUICEGATE_ERR_PARSE);
    EXPECT(n == 0 && e.position == 12);
    EXPECT_STATUS(sluicegate_config_parse_list("", 0, NULL, 0, &n, &e), SLUICEGATE_ERR_PARSE);
    EXPECT(n == 0);
    EXPECT_STATUS(sluicegate_config_parse_list("1/s", 3, NULL, 0, NULL, &e), SLUICEGATE_ERR_NULL);
    /* A non-NULL array of capacity 0 is too small, and says how many. */
    s = "1/s; 2/m";
    EXPECT_STATUS(sluicegate_config_parse_list(s, strlen(s), list, 0, &n, &e), SLUICEGATE_ERR_BUFFER_TOO_SMALL);
    EXPECT(n == 2 && e.position == 0);
    s = "1/s; 2/year";
    EXPECT_STATUS(sluicegate_config_parse_list(s, strlen(s), list, 4, &n, &e), SLUICEGATE_ERR_PARSE);
    EXPECT(n == 0 && e.position == 7);
    EXPECT_STATUS(sluicegate_config_parse_list(s, strlen(s), NULL, 4, &n, &e), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_config_parse_list(s, strlen(s), list, 4, NULL, &e), SLUICEGATE_ERR_NULL);
    list[1].struct_size = 16;
    s = "1/s; 2/m";
    EXPECT_STATUS(sluicegate_config_parse_list(s, strlen(s), list, 4, &n, &e), SLUICEGATE_ERR_STRUCT_SIZE);
}

/* A caller built against a newer header passes a bigger struct. */
struct future_config {
    sluicegate_config v1;
    uint64_t new_field;
};

static void test_bad_configs_and_struct_sizes(void) {
    sluicegate_limiter *l = NULL;
    sluicegate_config c = cfg(SLUICEGATE_TOKEN_BUCKET, 10, SEC, 0);
    EXPECT_STATUS(sluicegate_limiter_new(NULL, 1, &l), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_limiter_new(&c, 1, NULL), SLUICEGATE_ERR_NULL);
    c.struct_size = 0;
    EXPECT_STATUS(sluicegate_limiter_new(&c, 1, &l), SLUICEGATE_ERR_STRUCT_SIZE);
    c.struct_size = sizeof c - 8;
    EXPECT_STATUS(sluicegate_limiter_new(&c, 1, &l), SLUICEGATE_ERR_STRUCT_SIZE);
    c.struct_size = UINT32_MAX;
    EXPECT_STATUS(sluicegate_limiter_new(&c, 1, &l), SLUICEGATE_ERR_STRUCT_SIZE);
    struct future_config f;
    memset(&f, 0, sizeof f);
    f.v1 = cfg(SLUICEGATE_TOKEN_BUCKET, 10, SEC, 0);
    f.v1.struct_size = sizeof f;
    EXPECT_STATUS(sluicegate_limiter_new(&f.v1, 1, &l), SLUICEGATE_OK); /* unknown bytes are 0 */
    sluicegate_limiter_free(l);
    l = NULL;
    f.new_field = 1;
    EXPECT_STATUS(sluicegate_limiter_new(&f.v1, 1, &l), SLUICEGATE_ERR_STRUCT_SIZE);

    struct {
        sluicegate_config c;
        sluicegate_status want;
    } bad[] = {
        {cfg(6, 10, SEC, 0), SLUICEGATE_ERR_BAD_ALGORITHM},
        {cfg(UINT32_MAX, 10, SEC, 0), SLUICEGATE_ERR_BAD_ALGORITHM},
        {cfg(SLUICEGATE_TOKEN_BUCKET, 0, SEC, 0), SLUICEGATE_ERR_CONFIG_ZERO},
        {cfg(SLUICEGATE_TOKEN_BUCKET, 10, 0, 0), SLUICEGATE_ERR_CONFIG_ZERO},
        {cfg(SLUICEGATE_TOKEN_BUCKET, 2, 1, 0), SLUICEGATE_ERR_CONFIG_TOO_FAST},
        {cfg(SLUICEGATE_TOKEN_BUCKET, 1, 86400 * SEC, 1000000), SLUICEGATE_ERR_CONFIG_TOO_LARGE},
        {cfg(SLUICEGATE_TOKEN_BUCKET, 10, UINT64_MAX, UINT64_MAX), SLUICEGATE_ERR_CONFIG_TOO_LARGE},
        {cfg(SLUICEGATE_FIXED_WINDOW, 0, SEC, 0), SLUICEGATE_ERR_CONFIG_ZERO},
        {cfg(SLUICEGATE_FIXED_WINDOW, 10, SEC, 20), SLUICEGATE_ERR_CONFIG_INVALID},
        {cfg(SLUICEGATE_FIXED_WINDOW, UINT64_MAX, SEC, 0), SLUICEGATE_ERR_CONFIG_TOO_LARGE},
        {cfg(SLUICEGATE_SLIDING_WINDOW, UINT64_MAX, SEC, 0), SLUICEGATE_ERR_CONFIG_TOO_LARGE},
        {cfg(SLUICEGATE_SLIDING_LOG, 2000000, SEC, 0), SLUICEGATE_ERR_CONFIG_TOO_LARGE},
        {cfg(SLUICEGATE_SLIDING_LOG, 0, SEC, 0), SLUICEGATE_ERR_CONFIG_ZERO},
        {cfg(SLUICEGATE_SHAPER, 10, 0, 0), SLUICEGATE_ERR_CONFIG_ZERO},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        l = NULL;
        EXPECT_STATUS(sluicegate_limiter_new(&bad[i].c, 1, &l), bad[i].want);
        if (l != NULL) fprintf(stderr, "bad config %zu was accepted\n", i);
        EXPECT(l == NULL);
        sluicegate_limiter_free(l);
        EXPECT_STATUS(sluicegate_config_validate(&bad[i].c, NULL, 0), bad[i].want);
    }
    /* Fields an algorithm does not use must be zero. */
    sluicegate_config delay = cfg(SLUICEGATE_TOKEN_BUCKET, 10, SEC, 0);
    delay.max_delay_ns = 5;
    EXPECT_STATUS(sluicegate_limiter_new(&delay, 1, &l), SLUICEGATE_ERR_CONFIG_INVALID);
    sluicegate_config cap = cfg(SLUICEGATE_FIXED_WINDOW, 10, SEC, 0);
    cap.log_capacity = 5;
    EXPECT_STATUS(sluicegate_limiter_new(&cap, 1, &l), SLUICEGATE_ERR_CONFIG_INVALID);

    /* validate explains, with the bound. */
    char msg[128];
    sluicegate_config big = cfg(SLUICEGATE_TOKEN_BUCKET, 1, 86400 * SEC, 1000000);
    EXPECT_STATUS(sluicegate_config_validate(&big, msg, sizeof msg), SLUICEGATE_ERR_CONFIG_TOO_LARGE);
    EXPECT(strcmp(msg, "burst is too large for this limiter: the maximum is 213503") == 0);
    char tiny[6];
    EXPECT_STATUS(sluicegate_config_validate(&big, tiny, sizeof tiny), SLUICEGATE_ERR_CONFIG_TOO_LARGE);
    EXPECT(strcmp(tiny, "burst") == 0); /* truncated, NUL-terminated */
    sluicegate_config ok = cfg(SLUICEGATE_SLIDING_LOG, 10, SEC, 0);
    EXPECT_STATUS(sluicegate_config_validate(&ok, msg, sizeof msg), SLUICEGATE_OK);
    EXPECT(strcmp(msg, "ok") == 0);
    sluicegate_config alg = cfg(9, 10, SEC, 0);
    EXPECT_STATUS(sluicegate_config_validate(&alg, msg, sizeof msg), SLUICEGATE_ERR_BAD_ALGORITHM);
    EXPECT(strcmp(msg, sluicegate_status_str(SLUICEGATE_ERR_BAD_ALGORITHM)) == 0);
    EXPECT_STATUS(sluicegate_config_validate(NULL, msg, sizeof msg), SLUICEGATE_ERR_NULL);

    /* NULL handles and outputs. */
    sluicegate_decision d;
    c = cfg(SLUICEGATE_TOKEN_BUCKET, 10, SEC, 0);
    EXPECT_STATUS(sluicegate_limiter_new(&c, 1, &l), SLUICEGATE_OK);
    EXPECT_STATUS(sluicegate_limiter_check(NULL, &d), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_limiter_check(l, NULL), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_limiter_check_n_at(NULL, 1, 0, &d), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_limiter_peek_at(l, 0, NULL), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_limiter_set_config(NULL, 0, &c), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_limiter_set_config(l, 0, NULL), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_limiter_reset(NULL), SLUICEGATE_ERR_NULL);
    sluicegate_limiter_free(l);
    sluicegate_limiter_free(NULL);
    sluicegate_keyed_free(NULL);
    sluicegate_striped_free(NULL);
}

static void test_status_strings_and_version(void) {
    const uint32_t codes[] = {
        SLUICEGATE_OK, SLUICEGATE_ERR_NULL, SLUICEGATE_ERR_STRUCT_SIZE, SLUICEGATE_ERR_BAD_ALGORITHM,
        SLUICEGATE_ERR_BAD_POLICY, SLUICEGATE_ERR_EMPTY_KEY, SLUICEGATE_ERR_LIMIT_COUNT,
        SLUICEGATE_ERR_MIXED_ALGORITHMS, SLUICEGATE_ERR_INDEX, SLUICEGATE_ERR_BUFFER_TOO_SMALL,
        SLUICEGATE_ERR_UNSUPPORTED, SLUICEGATE_ERR_BAD_STRIPES, SLUICEGATE_ERR_CONFIG_ZERO,
        SLUICEGATE_ERR_CONFIG_TOO_LARGE, SLUICEGATE_ERR_CONFIG_TOO_FAST,
        SLUICEGATE_ERR_CONFIG_IMMUTABLE, SLUICEGATE_ERR_CONFIG_INVALID, SLUICEGATE_ERR_PARSE,
        SLUICEGATE_ERR_INSUFFICIENT_CAPACITY, SLUICEGATE_ERR_ALLOC, SLUICEGATE_ERR_PANIC,
        SLUICEGATE_ERR_NOT_UTF8, SLUICEGATE_ERR_BAD_FAILURE_POLICY, SLUICEGATE_ERR_BAD_URL,
        SLUICEGATE_ERR_CONFIG_RESOLUTION, SLUICEGATE_ERR_SYSTEM};
    const char *unknown = sluicegate_status_str(4242);
    EXPECT(unknown != NULL && strcmp(unknown, "unknown status") == 0);
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; ++i) {
        const char *m = sluicegate_status_str(codes[i]);
        EXPECT(m != NULL && strlen(m) > 0 && strcmp(m, unknown) != 0);
        for (size_t j = 0; j < i; ++j) EXPECT(strcmp(m, sluicegate_status_str(codes[j])) != 0);
    }
    EXPECT(strcmp(sluicegate_status_str(SLUICEGATE_OK), "ok") == 0);
    EXPECT(sluicegate_status_str(UINT32_MAX) == unknown || strcmp(sluicegate_status_str(UINT32_MAX), unknown) == 0);
    const char *v = sluicegate_version();
    EXPECT(v != NULL && v[0] >= '0' && v[0] <= '9' && strchr(v, '.') != NULL);
    uint64_t a = sluicegate_now_ns(), b = sluicegate_now_ns();
    EXPECT(b >= a);
}

int main(void) {
    test_every_algorithm_admits_its_quota();
    test_token_bucket_details();
    test_shaper_delays();
    test_compound();
    test_keyed();
    test_striped();
    test_parse();
    test_bad_configs_and_struct_sizes();
    test_status_strings_and_version();
    printf("abi_test (C11, sluicegate %s): %d passed, %d failed\n", sluicegate_version(),
           checks - failures, failures);
    return failures == 0 ? 0 : 1;
}
