/* Many threads on one limiter, one compound, one striped limiter and one keyed
 * table, at a fixed caller-supplied time: the admitted counts must equal the
 * quotas exactly (no over-admission, no lost update). Built with -std=c11
 * -Wall -Wextra -Werror -pedantic -fsanitize=thread by scripts/test-ffi. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "sluicegate.h"

#define THREADS 4
#define KEYS 64
#define KEY_BURST 100

static sluicegate_limiter *bucket, *window, *compound;
static sluicegate_striped *striped;
static sluicegate_keyed *table;
static atomic_ullong bucket_ok, window_ok, compound_ok, striped_ok, errors;
static atomic_ullong key_ok[KEYS];

static void count(sluicegate_status s, const sluicegate_decision *d, atomic_ullong *ok) {
    if (s != SLUICEGATE_OK) atomic_fetch_add(&errors, 1);
    else if (d->allowed) atomic_fetch_add(ok, 1);
}

static void *worker(void *arg) {
    const uint64_t now = 42 * SEC;
    const unsigned id = (unsigned)(size_t)arg;
    sluicegate_decision d;
    char key[16];
    for (int i = 0; i < 3000; ++i) {
        count(sluicegate_limiter_check_at(bucket, now, &d), &d, &bucket_ok);
        count(sluicegate_limiter_check_n_at(window, 2, now, &d), &d, &window_ok);
        count(sluicegate_limiter_check_at(compound, now, &d), &d, &compound_ok);
        count(sluicegate_striped_check_at(striped, now, &d), &d, &striped_ok);
        unsigned k = (unsigned)(i + id * 7) % KEYS;
        int n = snprintf(key, sizeof key, "user-%u", k);
        count(sluicegate_keyed_check_at(table, (const uint8_t *)key, (size_t)n, now, &d), &d, &key_ok[k]);
    }
    return NULL;
}

int main(void) {
    sluicegate_config b = cfg(SLUICEGATE_TOKEN_BUCKET, 10, 3600 * SEC, 5000);
    sluicegate_config w = cfg(SLUICEGATE_FIXED_WINDOW, 3000, 60 * SEC, 0);
    sluicegate_config c[2] = {cfg(SLUICEGATE_SLIDING_WINDOW, 1000, SEC, 0),
                              cfg(SLUICEGATE_SLIDING_WINDOW, 1500, 60 * SEC, 0)};
    sluicegate_config s = cfg(SLUICEGATE_TOKEN_BUCKET, 1, 3600 * SEC, 4096);
    sluicegate_config k = cfg(SLUICEGATE_TOKEN_BUCKET, 1, 3600 * SEC, KEY_BURST);
    if (sluicegate_limiter_new(&b, 1, &bucket) || sluicegate_limiter_new(&w, 1, &window) ||
        sluicegate_limiter_new(c, 2, &compound) || sluicegate_striped_new(&s, 8, &striped) ||
        sluicegate_keyed_new(&k, 1024, SLUICEGATE_REJECT, &table)) {
        fprintf(stderr, "setup failed\n");
        return 1;
    }
    pthread_t t[THREADS];
    for (size_t i = 0; i < THREADS; ++i) pthread_create(&t[i], NULL, worker, (void *)i);
    for (size_t i = 0; i < THREADS; ++i) pthread_join(t[i], NULL);

    int failed = 0, passed = 0;
#define CHECK(what, got, want)                                                            \
    do {                                                                                  \
        if ((got) != (want)) {                                                            \
            fprintf(stderr, "FAILED: %s admitted %llu, want %llu\n", what,                 \
                    (unsigned long long)(got), (unsigned long long)(want));               \
            ++failed;                                                                     \
        } else {                                                                          \
            ++passed;                                                                     \
        }                                                                                 \
    } while (0)
    CHECK("token bucket (burst 5000)", atomic_load(&bucket_ok), 5000);
    CHECK("fixed window (3000, n=2)", atomic_load(&window_ok), 1500);
    CHECK("compound sliding windows (1000/s; 1500/min)", atomic_load(&compound_ok), 1000);
    CHECK("striped x8 (burst 4096)", atomic_load(&striped_ok), 4096);
    CHECK("errors", atomic_load(&errors), 0);
    unsigned long long total = 0;
    for (int i = 0; i < KEYS; ++i) {
        CHECK("keyed key", atomic_load(&key_ok[i]), KEY_BURST);
        total += atomic_load(&key_ok[i]);
    }
    CHECK("keyed total", total, (unsigned long long)KEYS * KEY_BURST);
    sluicegate_keyed_stats st;
    sluicegate_keyed_get_stats(table, &st);
    CHECK("keyed inserted", st.inserted, KEYS);

    sluicegate_limiter_free(bucket);
    sluicegate_limiter_free(window);
    sluicegate_limiter_free(compound);
    sluicegate_striped_free(striped);
    sluicegate_keyed_free(table);
    printf("threads_test (%d threads): %d passed, %d failed\n", THREADS, passed, failed);
    return failed == 0 ? 0 : 1;
}
