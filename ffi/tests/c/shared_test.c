/* C11 test of shared-memory regions (sluicegate_*_open_shared,
 * sluicegate_shared_*): handles that share one state within a process (and
 * one mapping: removed and made again, a region is mapped afresh) and
 * across 8 forked processes (the total admitted equals the exact bound, per
 * algorithm, for a keyed table, a single limiter and a policy with a [shared]
 * table), what a shared handle refuses, every bad input and every way opening
 * a region fails -> its status, and a corruption fuzz (random bytes written
 * over a live region through a plain mmap, then every C function called:
 * nothing crashes, hangs or reads out of bounds). Built with -std=c11 -Wall
 * -Wextra -Werror -pedantic under -fsanitize=address,undefined by
 * scripts/test-ffi, which passes a scratch directory as argv[1]. */
#define _DEFAULT_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "expect.h"
#include "sluicegate.h"

#define HOUR (3600 * SEC)
#define PROCS 8

static const char *scratch;
static char path_buf[4096];

/* A region file in the scratch directory. */
static const char *region(const char *name) {
    snprintf(path_buf, sizeof path_buf, "%s/%s", scratch, name);
    return path_buf;
}

static void unlink_region(const char *path);

/* `path` (4096 bytes) set to region file `name`, removed if it was there. */
static void fresh_region(char *path, const char *name) {
    snprintf(path, 4096, "%s", region(name));
    unlink_region(path);
}

static sluicegate_shared_options opts(uint64_t memory) {
    sluicegate_shared_options o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.memory = memory;
    o.limits = 64;
    return o;
}

static sluicegate_status open_keyed(const char *path, const sluicegate_shared_options *o,
                                    const sluicegate_config *c, uint64_t max_keys,
                                    sluicegate_keyed **out) {
    char err[512];
    return sluicegate_keyed_open_shared(path, strlen(path), o, c, max_keys, SLUICEGATE_REJECT,
                                        err, sizeof err, out);
}

static sluicegate_status open_limiter(const char *path, const sluicegate_shared_options *o,
                                      const sluicegate_config *c, size_t count,
                                      sluicegate_limiter **out) {
    char err[512];
    return sluicegate_limiter_open_shared(path, strlen(path), o, c, count, err, sizeof err, out);
}

static void unlink_region(const char *path) {
    EXPECT_STATUS(sluicegate_shared_unlink(path, strlen(path), NULL, 0), SLUICEGATE_OK);
}

/* Writes the little-endian word `v` at byte `at` of the file. */
static void poke(const char *path, off_t at, uint64_t v) {
    int fd = open(path, O_WRONLY);
    unsigned char b[8];
    for (int i = 0; i < 8; ++i) b[i] = (unsigned char)(v >> (8 * i));
    EXPECT(fd >= 0 && pwrite(fd, b, 8, at) == 8);
    if (fd >= 0) close(fd);
}

static const uint8_t *K(const char *s) { return (const uint8_t *)s; }

static void test_handles_share_one_state(void) {
    const char *p = region("basic");
    unlink_region(p);
    sluicegate_shared_options o = opts(1 << 20);
    sluicegate_config c = cfg(SLUICEGATE_TOKEN_BUCKET, 3, HOUR, 0);
    sluicegate_keyed *a = NULL, *b = NULL;
    EXPECT_STATUS(open_keyed(p, &o, &c, 100, &a), SLUICEGATE_OK);
    EXPECT_STATUS(open_keyed(p, &o, &c, 100, &b), SLUICEGATE_OK);
    EXPECT(a && b);
    sluicegate_decision d;
    const uint64_t now = sluicegate_shared_now_ns();
    EXPECT(now > 0 && sluicegate_shared_now_ns() >= now);
    /* Two handles, one state: 3 admissions between them. */
    EXPECT_STATUS(sluicegate_keyed_check(a, K("ann"), 3, &d), SLUICEGATE_OK);
    EXPECT(d.allowed && d.remaining == 2 && d.limit == 3);
    EXPECT_STATUS(sluicegate_keyed_check_n(b, K("ann"), 3, 2, &d), SLUICEGATE_OK);
    EXPECT(d.allowed && d.remaining == 0);
    EXPECT_STATUS(sluicegate_keyed_check(a, K("ann"), 3, &d), SLUICEGATE_OK);
    EXPECT(!d.allowed && d.retry_after_ns > 0);
    EXPECT_STATUS(sluicegate_keyed_peek(b, K("ann"), 3, &d), SLUICEGATE_OK);
    EXPECT(!d.allowed);
    EXPECT_STATUS(sluicegate_keyed_peek_n(b, K("bob"), 3, 3, &d), SLUICEGATE_OK);
    EXPECT(d.allowed && d.remaining == 0);
    /* The _at forms on the region's time base. */
    const uint64_t t = sluicegate_shared_now_ns();
    EXPECT_STATUS(sluicegate_keyed_check_at(b, K("bob"), 3, t, &d), SLUICEGATE_OK);
    EXPECT(d.allowed && d.remaining == 2);
    EXPECT_STATUS(sluicegate_keyed_check_n_at(a, K("bob"), 3, 2, t, &d), SLUICEGATE_OK);
    EXPECT(d.allowed && d.remaining == 0);
    EXPECT_STATUS(sluicegate_keyed_peek_at(a, K("bob"), 3, t, &d), SLUICEGATE_OK);
    EXPECT(!d.allowed);
    EXPECT_STATUS(sluicegate_keyed_peek_n_at(a, K("bob"), 3, 1, t, &d), SLUICEGATE_OK);
    EXPECT(!d.allowed);
    EXPECT_STATUS(sluicegate_keyed_check_n_at(a, K("bob"), 3, 4, t, &d),
                  SLUICEGATE_ERR_INSUFFICIENT_CAPACITY);
    EXPECT(!d.allowed && d.limit == 3);
    EXPECT_STATUS(sluicegate_keyed_check(a, K(""), 0, &d), SLUICEGATE_ERR_EMPTY_KEY);
    EXPECT_STATUS(sluicegate_keyed_check(a, NULL, 1, &d), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_keyed_check(a, K("x"), 1, NULL), SLUICEGATE_ERR_NULL);
    /* Stats, length and clear are the region's: either handle sees both keys. */
    sluicegate_keyed_stats st;
    EXPECT_STATUS(sluicegate_keyed_get_stats(b, &st), SLUICEGATE_OK);
    EXPECT(st.capacity == 100 && st.inserted == 2 && st.rejected == 0);
    uint64_t len = 0;
    EXPECT_STATUS(sluicegate_keyed_len_at(b, sluicegate_shared_now_ns(), &len), SLUICEGATE_OK);
    EXPECT(len == 2);
    EXPECT_STATUS(sluicegate_keyed_clear(b), SLUICEGATE_OK);
    EXPECT_STATUS(sluicegate_keyed_len_at(a, sluicegate_shared_now_ns(), &len), SLUICEGATE_OK);
    EXPECT(len == 0);
    EXPECT_STATUS(sluicegate_keyed_check(a, K("ann"), 3, &d), SLUICEGATE_OK);
    EXPECT(d.allowed && d.remaining == 2);
    /* Parameters are fixed in the region. */
    sluicegate_config c2 = cfg(SLUICEGATE_TOKEN_BUCKET, 5, HOUR, 0);
    EXPECT_STATUS(sluicegate_keyed_set_config(a, &c2), SLUICEGATE_ERR_SHARED_FIXED);
    /* Another spec is another limit, never mixed with the first. */
    sluicegate_keyed *other = NULL;
    EXPECT_STATUS(open_keyed(p, &o, &c2, 100, &other), SLUICEGATE_OK);
    EXPECT_STATUS(sluicegate_keyed_check_n(other, K("ann"), 3, 5, &d), SLUICEGATE_OK);
    EXPECT(d.allowed);
    EXPECT_STATUS(sluicegate_keyed_check_n(a, K("ann"), 3, 2, &d), SLUICEGATE_OK);
    EXPECT(d.allowed);
    /* So is another bound on keys. */
    sluicegate_keyed *wider = NULL;
    EXPECT_STATUS(open_keyed(p, &o, &c, 200, &wider), SLUICEGATE_OK);
    EXPECT_STATUS(sluicegate_keyed_check_n(wider, K("ann"), 3, 3, &d), SLUICEGATE_OK);
    EXPECT(d.allowed);
    sluicegate_keyed_free(a);
    sluicegate_keyed_free(b);
    sluicegate_keyed_free(other);
    sluicegate_keyed_free(wider);

    /* A single limiter: one state for every handle; a compound too. */
    sluicegate_limiter *l1 = NULL, *l2 = NULL;
    sluicegate_config lc = cfg(SLUICEGATE_FIXED_WINDOW, 4, HOUR, 0);
    EXPECT_STATUS(open_limiter(p, &o, &lc, 1, &l1), SLUICEGATE_OK);
    EXPECT_STATUS(open_limiter(p, &o, &lc, 1, &l2), SLUICEGATE_OK);
    const uint64_t w = sluicegate_shared_now_ns();
    EXPECT_STATUS(sluicegate_limiter_check_at(l1, w, &d), SLUICEGATE_OK);
    EXPECT(d.allowed && d.remaining == 3);
    EXPECT_STATUS(sluicegate_limiter_check_n_at(l2, 3, w, &d), SLUICEGATE_OK);
    EXPECT(d.allowed && d.remaining == 0);
    EXPECT_STATUS(sluicegate_limiter_peek_at(l1, w, &d), SLUICEGATE_OK);
    EXPECT(!d.allowed);
    EXPECT_STATUS(sluicegate_limiter_peek_n_at(l1, 1, w, &d), SLUICEGATE_OK);
    EXPECT(!d.allowed);
    EXPECT_STATUS(sluicegate_limiter_check_n_at(l1, 5, w, &d), SLUICEGATE_ERR_INSUFFICIENT_CAPACITY);
    EXPECT_STATUS(sluicegate_limiter_set_config(l1, 0, &lc), SLUICEGATE_ERR_SHARED_FIXED);
    EXPECT_STATUS(sluicegate_limiter_reset(l1), SLUICEGATE_ERR_SHARED_FIXED);
    sluicegate_limiter_free(l1);
    sluicegate_limiter_free(l2);
    sluicegate_limiter *tb = NULL;
    sluicegate_config tc = cfg(SLUICEGATE_TOKEN_BUCKET, 2, HOUR, 0);
    EXPECT_STATUS(open_limiter(p, &o, &tc, 1, &tb), SLUICEGATE_OK);
    EXPECT_STATUS(sluicegate_limiter_check(tb, &d), SLUICEGATE_OK);
    EXPECT(d.allowed && d.remaining == 1);
    EXPECT_STATUS(sluicegate_limiter_check_n(tb, 1, &d), SLUICEGATE_OK);
    EXPECT(d.allowed);
    EXPECT_STATUS(sluicegate_limiter_peek(tb, &d), SLUICEGATE_OK);
    EXPECT(!d.allowed);
    EXPECT_STATUS(sluicegate_limiter_peek_n(tb, 1, &d), SLUICEGATE_OK);
    EXPECT(!d.allowed);
    EXPECT_STATUS(sluicegate_limiter_check(tb, &d), SLUICEGATE_OK);
    EXPECT(!d.allowed);
    sluicegate_limiter_free(tb);
    sluicegate_config pair[2] = {cfg(SLUICEGATE_SLIDING_WINDOW, 2, 60 * SEC, 0),
                                 cfg(SLUICEGATE_SLIDING_WINDOW, 3, HOUR, 0)};
    sluicegate_limiter *comp = NULL;
    EXPECT_STATUS(open_limiter(p, &o, pair, 2, &comp), SLUICEGATE_OK);
    if (comp) {
        EXPECT_STATUS(sluicegate_limiter_check_n_at(comp, 2, w, &d), SLUICEGATE_OK);
        EXPECT(d.allowed);
        EXPECT_STATUS(sluicegate_limiter_check_at(comp, w, &d), SLUICEGATE_OK);
        EXPECT(!d.allowed);
    }
    sluicegate_limiter_free(comp);
    /* The sliding log has no shared form. */
    sluicegate_config log = cfg(SLUICEGATE_SLIDING_LOG, 3, SEC, 0);
    sluicegate_limiter *nl = NULL;
    sluicegate_keyed *nk = NULL;
    EXPECT_STATUS(open_limiter(p, &o, &log, 1, &nl), SLUICEGATE_ERR_UNSUPPORTED);
    EXPECT_STATUS(open_keyed(p, &o, &log, 10, &nk), SLUICEGATE_ERR_UNSUPPORTED);
    EXPECT(nl == NULL && nk == NULL);
    unlink_region(p);

    /* A bare name is /dev/shm/sluicegate-<name>. */
    char name[64];
    snprintf(name, sizeof name, "ctest-%ld", (long)getpid());
    sluicegate_keyed *bare = NULL;
    EXPECT_STATUS(open_keyed(name, &o, &c, 10, &bare), SLUICEGATE_OK);
    char file[128];
    snprintf(file, sizeof file, "/dev/shm/sluicegate-%s", name);
    struct stat sb;
    EXPECT(stat(file, &sb) == 0 && (sb.st_mode & 0777) == 0600);
    sluicegate_keyed_free(bare);
    unlink_region(name);
    EXPECT(stat(file, &sb) != 0);
    unlink_region(name); /* gone already: not an error */
    /* The mode asked for, whatever the umask. */
    o.mode = 0640;
    EXPECT_STATUS(open_keyed(name, &o, &c, 10, &bare), SLUICEGATE_OK);
    EXPECT(stat(file, &sb) == 0 && (sb.st_mode & 0777) == 0640);
    sluicegate_keyed_free(bare);
    unlink_region(name);
}

/* How many of this process's mappings are of `path` (removed or not). */
static int mappings(const char *path) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[8192];
    int n = 0;
    const size_t pl = strlen(path);
    if (!f) return -1;
    while (fgets(line, sizeof line, f)) {
        size_t l = strcspn(line, "\n");
        line[l] = '\0';
        if (l >= 10 && strcmp(line + l - 10, " (deleted)") == 0) line[l -= 10] = '\0';
        if (l >= pl && strcmp(line + l - pl, path) == 0 && (l == pl || line[l - pl - 1] == ' '))
            ++n;
    }
    fclose(f);
    return n;
}

/* Handles of one region in one process share one mapping; every open still
 * checks the options; a region removed and made again is mapped afresh; the
 * last handle unmaps it. */
static void test_one_mapping_per_region(void) {
    char path[4096];
    fresh_region(path, "cache");
    sluicegate_shared_options o = opts(1 << 20);
    enum { N = 20 };
    sluicegate_keyed *k[N];
    sluicegate_limiter *l[N];
    sluicegate_decision d;
    for (int i = 0; i < N; ++i) {
        sluicegate_config c = cfg(SLUICEGATE_TOKEN_BUCKET, 1 + (uint64_t)(i % 5), HOUR, 0);
        EXPECT_STATUS(open_keyed(path, &o, &c, 100, &k[i]), SLUICEGATE_OK);
        EXPECT_STATUS(open_limiter(path, &o, &c, 1, &l[i]), SLUICEGATE_OK);
    }
    EXPECT(mappings(path) == 1);
    /* One state: handles 0 and 5 are the same limit (1/hour). */
    EXPECT_STATUS(sluicegate_keyed_check(k[0], K("a"), 1, &d), SLUICEGATE_OK);
    EXPECT(d.allowed);
    EXPECT_STATUS(sluicegate_keyed_check(k[5], K("a"), 1, &d), SLUICEGATE_OK);
    EXPECT(!d.allowed);
    /* Another size asked for: the same status and text as a first open. */
    sluicegate_shared_options big = opts(2 << 20);
    sluicegate_keyed *x = NULL;
    sluicegate_config c = cfg(SLUICEGATE_TOKEN_BUCKET, 1, HOUR, 0);
    char err[512];
    EXPECT_STATUS(sluicegate_keyed_open_shared(path, strlen(path), &big, &c, 100, 0, err,
                                               sizeof err, &x),
                  SLUICEGATE_ERR_SHARED_MISMATCH);
    EXPECT(x == NULL && strstr(err, path) != NULL && strstr(err, "were asked for") != NULL);
    sluicegate_shared_options fewer = opts(1 << 20);
    fewer.limits = 8;
    EXPECT_STATUS(open_keyed(path, &fewer, &c, 100, &x), SLUICEGATE_ERR_SHARED_MISMATCH);
    /* A newer layout version written in place: the error of a first open; the
     * version put back, the region is served again. */
    uint64_t version = 0;
    int fd = open(path, O_RDONLY);
    EXPECT(fd >= 0 && pread(fd, &version, 8, 8) == 8); /* little-endian, as this host */
    if (fd >= 0) close(fd);
    poke(path, 8, 1000);
    EXPECT_STATUS(open_keyed(path, &o, &c, 100, &x), SLUICEGATE_ERR_SHARED_VERSION);
    poke(path, 8, version);
    EXPECT_STATUS(open_keyed(path, &o, &c, 100, &x), SLUICEGATE_OK);
    sluicegate_keyed_free(x);
    EXPECT(mappings(path) == 1);
    /* Removed and made again: a new open maps the new file, fresh; the old
     * handles keep theirs until freed. */
    unlink_region(path);
    sluicegate_keyed *fresh = NULL;
    EXPECT_STATUS(open_keyed(path, &o, &c, 100, &fresh), SLUICEGATE_OK);
    EXPECT(mappings(path) == 2);
    EXPECT_STATUS(sluicegate_keyed_check(fresh, K("a"), 1, &d), SLUICEGATE_OK);
    EXPECT(d.allowed);
    EXPECT_STATUS(sluicegate_keyed_check(k[0], K("b"), 1, &d), SLUICEGATE_OK);
    EXPECT(d.allowed);
    EXPECT_STATUS(sluicegate_keyed_check(fresh, K("b"), 1, &d), SLUICEGATE_OK);
    EXPECT(d.allowed); /* not the old region's "b" */
    for (int i = 0; i < N; ++i) {
        sluicegate_keyed_free(k[i]);
        sluicegate_limiter_free(l[i]);
    }
    EXPECT(mappings(path) == 1);
    sluicegate_keyed_free(fresh);
    EXPECT(mappings(path) == 0);
    unlink_region(path);
}

static void test_bad_inputs(void) {
    const char *p = region("bad");
    sluicegate_config c = cfg(SLUICEGATE_TOKEN_BUCKET, 3, HOUR, 0);
    sluicegate_shared_options o = opts(1 << 20);
    sluicegate_keyed *k = NULL;
    sluicegate_limiter *l = NULL;
    char err[256];
    /* NULLs. */
    EXPECT_STATUS(sluicegate_keyed_open_shared(NULL, 3, &o, &c, 10, 0, err, sizeof err, &k),
                  SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_keyed_open_shared(p, strlen(p), &o, NULL, 10, 0, err, sizeof err, &k),
                  SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_keyed_open_shared(p, strlen(p), &o, &c, 10, 0, err, sizeof err, NULL),
                  SLUICEGATE_ERR_NULL);
    EXPECT(strcmp(err, "a required pointer argument was NULL") == 0);
    EXPECT_STATUS(sluicegate_limiter_open_shared(p, strlen(p), &o, NULL, 1, NULL, 0, &l),
                  SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_limiter_open_shared(p, strlen(p), &o, &c, 1, NULL, 0, NULL),
                  SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_shared_unlink(NULL, 1, NULL, 0), SLUICEGATE_ERR_NULL);
    /* Names: empty, too long, a NUL inside, not UTF-8. */
    static char longname[SLUICEGATE_SHARED_MAX_NAME + 2];
    memset(longname, 'a', sizeof longname - 1);
    EXPECT_STATUS(sluicegate_keyed_open_shared("", 0, &o, &c, 10, 0, NULL, 0, &k),
                  SLUICEGATE_ERR_BAD_NAME);
    EXPECT_STATUS(sluicegate_keyed_open_shared(longname, SLUICEGATE_SHARED_MAX_NAME + 1, &o, &c,
                                               10, 0, NULL, 0, &k),
                  SLUICEGATE_ERR_BAD_NAME);
    EXPECT_STATUS(sluicegate_limiter_open_shared(longname, SIZE_MAX, &o, &c, 1, NULL, 0, &l),
                  SLUICEGATE_ERR_BAD_NAME);
    EXPECT_STATUS(sluicegate_limiter_open_shared("a\0b", 3, &o, &c, 1, NULL, 0, &l),
                  SLUICEGATE_ERR_BAD_NAME);
    EXPECT_STATUS(sluicegate_keyed_open_shared("a\xff", 2, &o, &c, 10, 0, NULL, 0, &k),
                  SLUICEGATE_ERR_NOT_UTF8);
    EXPECT_STATUS(sluicegate_shared_unlink("", 0, NULL, 0), SLUICEGATE_ERR_BAD_NAME);
    EXPECT_STATUS(sluicegate_shared_unlink("a\xff", 2, NULL, 0), SLUICEGATE_ERR_NOT_UTF8);
    /* Configs: their own statuses, before any file is made. */
    sluicegate_config bad = cfg(SLUICEGATE_TOKEN_BUCKET, 0, HOUR, 0);
    EXPECT_STATUS(sluicegate_keyed_open_shared(p, strlen(p), &o, &bad, 10, 0, NULL, 0, &k),
                  SLUICEGATE_ERR_CONFIG_ZERO);
    EXPECT_STATUS(sluicegate_limiter_open_shared(p, strlen(p), &o, &c, 0, NULL, 0, &l),
                  SLUICEGATE_ERR_LIMIT_COUNT);
    EXPECT_STATUS(sluicegate_keyed_open_shared(p, strlen(p), &o, &c, 0, 0, NULL, 0, &k),
                  SLUICEGATE_ERR_CONFIG_ZERO);
    EXPECT_STATUS(sluicegate_keyed_open_shared(p, strlen(p), &o, &c, SLUICEGATE_KEYED_MAX_CAPACITY + 1,
                                               0, NULL, 0, &k),
                  SLUICEGATE_ERR_CONFIG_TOO_LARGE);
    EXPECT_STATUS(sluicegate_keyed_open_shared(p, strlen(p), &o, &c, 10, 7, NULL, 0, &k),
                  SLUICEGATE_ERR_BAD_POLICY);
    struct stat sb;
    EXPECT(stat(p, &sb) != 0); /* nothing was created */
    /* Options. */
    sluicegate_shared_options bo = o;
    bo.struct_size = 4;
    EXPECT_STATUS(sluicegate_keyed_open_shared(p, strlen(p), &bo, &c, 10, 0, NULL, 0, &k),
                  SLUICEGATE_ERR_STRUCT_SIZE);
    bo = o;
    bo.mode = 01000;
    EXPECT_STATUS(sluicegate_keyed_open_shared(p, strlen(p), &bo, &c, 10, 0, NULL, 0, &k),
                  SLUICEGATE_ERR_SHARED_OPTIONS);
    bo = o;
    bo.allow_other_owner = 2;
    EXPECT_STATUS(sluicegate_keyed_open_shared(p, strlen(p), &bo, &c, 10, 0, NULL, 0, &k),
                  SLUICEGATE_ERR_SHARED_OPTIONS);
    bo = o;
    bo.memory = 8;
    EXPECT_STATUS(sluicegate_keyed_open_shared(p, strlen(p), &bo, &c, 10, 0, err, sizeof err, &k),
                  SLUICEGATE_ERR_SHARED_OPTIONS);
    EXPECT(strstr(err, "group of 8 keys") != NULL);
    bo = o;
    bo.limits = 70000;
    EXPECT_STATUS(sluicegate_keyed_open_shared(p, strlen(p), &bo, &c, 10, 0, NULL, 0, &k),
                  SLUICEGATE_ERR_SHARED_OPTIONS);
    EXPECT(k == NULL && l == NULL);
    /* Every new status has its own message. */
    const sluicegate_status all[] = {
        SLUICEGATE_ERR_BAD_NAME,           SLUICEGATE_ERR_SHARED_NOT_A_FILE,
        SLUICEGATE_ERR_SHARED_OTHER_OWNER, SLUICEGATE_ERR_SHARED_NOT_A_REGION,
        SLUICEGATE_ERR_SHARED_VERSION,     SLUICEGATE_ERR_SHARED_CORRUPT,
        SLUICEGATE_ERR_SHARED_MISMATCH,    SLUICEGATE_ERR_SHARED_NO_SPACE,
        SLUICEGATE_ERR_SHARED_OPTIONS,     SLUICEGATE_ERR_SHARED_NOT_LOCK_FREE,
        SLUICEGATE_ERR_SHARED_ACCESS,      SLUICEGATE_ERR_SHARED_IO,
        SLUICEGATE_ERR_SHARED_FULL,        SLUICEGATE_ERR_SHARED_FIXED};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
        EXPECT(strcmp(sluicegate_status_str(all[i]), "unknown status") != 0);
}

static void test_every_way_opening_fails(void) {
    const char *p = region("damaged");
    char path[4096];
    snprintf(path, sizeof path, "%s", p);
    sluicegate_config c = cfg(SLUICEGATE_TOKEN_BUCKET, 1, HOUR, 0);
    sluicegate_shared_options o = opts(1 << 20);
    sluicegate_keyed *k = NULL;
    sluicegate_decision d;
    char err[512];
#define OPEN_K(status)                                                                          \
    do {                                                                                        \
        k = NULL;                                                                               \
        EXPECT_STATUS(sluicegate_keyed_open_shared(path, strlen(path), &o, &c, 10, 0, err,      \
                                                   sizeof err, &k),                             \
                      status);                                                                  \
        sluicegate_keyed_free(k);                                                               \
    } while (0)
#define FRESH()                  \
    do {                         \
        unlink_region(path);     \
        OPEN_K(SLUICEGATE_OK);   \
    } while (0)
    /* Another size than asked for names both. */
    FRESH();
    sluicegate_shared_options big = opts(2 << 20);
    EXPECT_STATUS(sluicegate_keyed_open_shared(path, strlen(path), &big, &c, 10, 0, err, sizeof err,
                                               &k),
                  SLUICEGATE_ERR_SHARED_MISMATCH);
    EXPECT(strstr(err, path) != NULL && strstr(err, "were asked for") != NULL);
    /* A newer layout version (far above this build's). */
    FRESH();
    poke(path, 8, 1000);
    OPEN_K(SLUICEGATE_ERR_SHARED_VERSION);
    EXPECT(strstr(err, "layout version 1000") != NULL);
    /* Not a region. */
    FRESH();
    poke(path, 0, 0x1234);
    OPEN_K(SLUICEGATE_ERR_SHARED_NOT_A_REGION);
    /* Truncated. */
    FRESH();
    struct stat sb;
    EXPECT(stat(path, &sb) == 0);
    EXPECT(truncate(path, sb.st_size / 2) == 0);
    OPEN_K(SLUICEGATE_ERR_SHARED_CORRUPT);
    EXPECT(strstr(err, "truncated") != NULL);
    EXPECT(truncate(path, 100) == 0);
    OPEN_K(SLUICEGATE_ERR_SHARED_CORRUPT);
    /* A half-made region (its creator died: not ready) is made again, and so is
     * one from another boot: its state is reset, not read against this boot's
     * clock. */
    FRESH();
    sluicegate_keyed *t = NULL;
    EXPECT_STATUS(sluicegate_keyed_open_shared(path, strlen(path), &o, &c, 10, 0, NULL, 0, &t),
                  SLUICEGATE_OK);
    EXPECT_STATUS(sluicegate_keyed_check(t, K("k"), 1, &d), SLUICEGATE_OK);
    EXPECT(d.allowed);
    sluicegate_keyed_free(t);
    poke(path, 48, 0xdead); /* the boot id */
    EXPECT_STATUS(sluicegate_keyed_open_shared(path, strlen(path), &o, &c, 10, 0, NULL, 0, &t),
                  SLUICEGATE_OK);
    EXPECT_STATUS(sluicegate_keyed_check(t, K("k"), 1, &d), SLUICEGATE_OK);
    EXPECT(d.allowed); /* reset */
    sluicegate_keyed_free(t);
    poke(path, 16, 0); /* the ready state */
    EXPECT_STATUS(sluicegate_keyed_open_shared(path, strlen(path), &o, &c, 10, 0, NULL, 0, &t),
                  SLUICEGATE_OK);
    EXPECT_STATUS(sluicegate_keyed_check(t, K("k"), 1, &d), SLUICEGATE_OK);
    EXPECT(d.allowed);
    sluicegate_keyed_free(t);
    /* A full registry: two limits of room, a third is refused, the two work. */
    unlink_region(path);
    sluicegate_shared_options two = opts(1 << 20);
    two.limits = 2;
    sluicegate_keyed *r[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; ++i) {
        sluicegate_config ci = cfg(SLUICEGATE_TOKEN_BUCKET, (uint64_t)i + 1, HOUR, 0);
        EXPECT_STATUS(sluicegate_keyed_open_shared(path, strlen(path), &two, &ci, 10, 0, err,
                                                   sizeof err, &r[i]),
                      i < 2 ? SLUICEGATE_OK : SLUICEGATE_ERR_SHARED_FULL);
    }
    EXPECT_STATUS(sluicegate_keyed_check(r[1], K("k"), 1, &d), SLUICEGATE_OK);
    EXPECT(d.allowed);
    for (int i = 0; i < 3; ++i) sluicegate_keyed_free(r[i]);
    unlink_region(path);
    /* A symbolic link is never followed; a directory is not a region. */
    char target[4200];
    snprintf(target, sizeof target, "%s.target", path);
    FILE *f = fopen(target, "w");
    EXPECT(f != NULL);
    if (f) fclose(f);
    EXPECT(symlink(target, path) == 0);
    OPEN_K(SLUICEGATE_ERR_SHARED_NOT_A_FILE);
    EXPECT(strstr(err, "symbolic links are never followed") != NULL);
    EXPECT(stat(target, &sb) == 0 && sb.st_size == 0); /* the target was not written */
    EXPECT(unlink(path) == 0 && unlink(target) == 0);
    snprintf(path, sizeof path, "%s", scratch);
    OPEN_K(SLUICEGATE_ERR_SHARED_NOT_A_FILE);
    /* A missing directory. */
    snprintf(path, sizeof path, "%s/no/such/dir", scratch);
    OPEN_K(SLUICEGATE_ERR_SHARED_IO);
    EXPECT(strstr(err, "no/such/dir") != NULL);
    /* Another owner, and a read-only file. As root: a file given away is
     * refused unless allowed, and a worker that dropped to another user cannot
     * open a root-owned 0644 region for writing. Elsewhere: chmod 0400. */
    snprintf(path, sizeof path, "/dev/shm/sluicegate-ctest-owner-%ld", (long)getpid());
    FRESH();
    if (geteuid() == 0) {
        EXPECT(chown(path, 65534, 65534) == 0);
        OPEN_K(SLUICEGATE_ERR_SHARED_OTHER_OWNER);
        EXPECT(strstr(err, "owned by uid 65534") != NULL);
        o.allow_other_owner = 1;
        OPEN_K(SLUICEGATE_OK);
        o.allow_other_owner = 0;
        EXPECT(chown(path, 0, 0) == 0 && chmod(path, 0644) == 0);
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
            k = NULL;
            sluicegate_status s = sluicegate_keyed_open_shared(path, strlen(path), &o, &c, 10, 0,
                                                               err, sizeof err, &k);
            _exit(s == SLUICEGATE_ERR_SHARED_ACCESS && k == NULL ? 0 : 1);
        }
        int ws = 0;
        EXPECT(pid > 0 && waitpid(pid, &ws, 0) == pid && WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    } else {
        EXPECT(chmod(path, 0400) == 0);
        OPEN_K(SLUICEGATE_ERR_SHARED_ACCESS);
    }
    unlink_region(path);
#undef OPEN_K
#undef FRESH
}

/* Forks PROCS children, each running `child(i, counts)` to fill `n` counters
 * (at most 64), and sums them into `total`. A child that fails exits non-zero
 * (a failed EXPECT here). */
typedef void (*child_fn)(int i, uint64_t *counts);
static void in_children(child_fn child, uint64_t *total, size_t n) {
    int fds[PROCS][2];
    pid_t pids[PROCS];
    memset(total, 0, n * sizeof *total);
    fflush(NULL);
    for (int i = 0; i < PROCS; ++i) {
        EXPECT(pipe(fds[i]) == 0);
        pids[i] = fork();
        if (pids[i] == 0) {
            uint64_t counts[64];
            memset(counts, 0, sizeof counts);
            close(fds[i][0]);
            child(i, counts);
            const ssize_t bytes = (ssize_t)(n * sizeof counts[0]);
            _exit(write(fds[i][1], counts, (size_t)bytes) == bytes ? 0 : 5);
        }
        close(fds[i][1]);
    }
    for (int i = 0; i < PROCS; ++i) {
        uint64_t counts[64];
        EXPECT(read(fds[i][0], counts, n * sizeof counts[0]) == (ssize_t)(n * sizeof counts[0]));
        close(fds[i][0]);
        int ws = 0;
        EXPECT(waitpid(pids[i], &ws, 0) == pids[i] && WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
        for (size_t c = 0; c < n; ++c) total[c] += counts[c];
    }
}

/* 8 processes on one region: each checks every key of a keyed table and one
 * single limiter, per algorithm, at one instant (per-hour quotas: nothing
 * refills); the parent opened nothing before fork. The totals must be the
 * exact bounds. */
#define KEYS 16
static const uint32_t keyed_algs[] = {SLUICEGATE_TOKEN_BUCKET, SLUICEGATE_LEAKY_BUCKET,
                                      SLUICEGATE_SHAPER, SLUICEGATE_FIXED_WINDOW,
                                      SLUICEGATE_SLIDING_WINDOW};
enum { NALG = sizeof keyed_algs / sizeof keyed_algs[0] };
static const uint64_t key_bound = 7, single_bound = 50;
static char procs_path[4096];
static uint64_t procs_t0;

/* counts[2a]: keyed admissions of algorithm a; counts[2a + 1]: single ones. */
static void check_every_algorithm(int i, uint64_t *counts) {
    sluicegate_shared_options o = opts(1 << 20);
    for (int a = 0; a < NALG; ++a) {
        sluicegate_config kc = cfg(keyed_algs[a], key_bound, HOUR, 0);
        sluicegate_config sc = cfg(keyed_algs[a], single_bound, HOUR, 0);
        sluicegate_keyed *t = NULL;
        sluicegate_limiter *l = NULL;
        if (open_keyed(procs_path, &o, &kc, 1000, &t) != SLUICEGATE_OK ||
            open_limiter(procs_path, &o, &sc, 1, &l) != SLUICEGATE_OK)
            _exit(2);
        sluicegate_decision d;
        char key[16];
        for (int round = 0; round < 12; ++round) {
            for (int k = 0; k < KEYS; ++k) {
                int n = snprintf(key, sizeof key, "user-%d", (k + i) % KEYS);
                if (sluicegate_keyed_check_at(t, K(key), (size_t)n, procs_t0, &d) != SLUICEGATE_OK)
                    _exit(3);
                counts[2 * a] += d.allowed;
            }
            if (sluicegate_limiter_check_at(l, procs_t0, &d) != SLUICEGATE_OK) _exit(4);
            counts[2 * a + 1] += d.allowed;
        }
        sluicegate_keyed_free(t);
        sluicegate_limiter_free(l);
    }
}

static void test_eight_processes_admit_exactly_the_bound(void) {
    snprintf(procs_path, sizeof procs_path, "%s", region("procs"));
    unlink_region(procs_path);
    procs_t0 = sluicegate_shared_now_ns();
    uint64_t total[2 * NALG];
    in_children(check_every_algorithm, total, 2 * NALG);
    for (int a = 0; a < NALG; ++a) {
        if (total[2 * a] != KEYS * key_bound || total[2 * a + 1] != single_bound)
            fprintf(stderr, "algorithm %u: keyed %llu of %llu, single %llu of %llu\n",
                    keyed_algs[a], (unsigned long long)total[2 * a],
                    (unsigned long long)(KEYS * key_bound), (unsigned long long)total[2 * a + 1],
                    (unsigned long long)single_bound);
        EXPECT(total[2 * a] == KEYS * key_bound);
        EXPECT(total[2 * a + 1] == single_bound);
    }
    printf("8 processes: keyed %d keys x %llu and one single limiter of %llu, per algorithm: "
           "exact\n", KEYS, (unsigned long long)key_bound, (unsigned long long)single_bound);
    unlink_region(procs_path);
}

static const sluicegate_policy *shared_policy;

/* counts[0]: admissions of 10 requests from users u0..u3 of one tenant. */
static void check_the_policy(int i, uint64_t *counts) {
    sluicegate_policy_result r;
    for (int round = 0; round < 10; ++round) {
        char user[8];
        snprintf(user, sizeof user, "u%d", (round + i) % 4);
        sluicegate_attr a[] = {{"user", 4, user, strlen(user)}, {"tenant", 6, "acme", 4}};
        if (sluicegate_policy_check(shared_policy, a, 2, 1, NULL, &r) != SLUICEGATE_OK) _exit(3);
        counts[0] += r.allowed;
    }
}

/* A policy with a [shared] table, opened before fork by the parent (its
 * mapping inherited) and checked by 8 processes, all-or-nothing across two
 * keyed rules: per user 5/hour, per tenant 12/hour. */
static void test_a_shared_policy_across_processes(void) {
    char path[4096];
    fresh_region(path, "policy");
    char text[4400];
    snprintf(text, sizeof text,
             "[shared]\npath = \"%s\"\n"
             "[[rule]]\nname = \"user\"\nkey = [\"user\"]\nlimit = \"5/hour\"\n"
             "[[rule]]\nname = \"tenant\"\nkey = [\"tenant\"]\nlimit = \"12/hour\"\n",
             path);
    sluicegate_policy *pol = NULL;
    char err[1024];
    EXPECT_STATUS(sluicegate_policy_new(text, strlen(text), err, sizeof err, &pol), SLUICEGATE_OK);
    if (!pol) {
        fprintf(stderr, "%s\n", err);
        return;
    }
    struct stat sb;
    EXPECT(stat(path, &sb) == 0); /* the region exists */
    shared_policy = pol;
    /* 8 x 10 requests over 4 users (20 wanted): the tenant binds, 12 in all. */
    uint64_t total = 0;
    in_children(check_the_policy, &total, 1);
    EXPECT(total == 12);
    sluicegate_policy_result r;
    /* The tenant is spent for everyone: a new user of it is denied by the
     * tenant rule, and that denial charged the user rule nothing (5 left in
     * another tenant). */
    sluicegate_attr fresh[] = {{"user", 4, "new", 3}, {"tenant", 6, "acme", 4}};
    EXPECT_STATUS(sluicegate_policy_check(pol, fresh, 2, 1, NULL, &r), SLUICEGATE_OK);
    EXPECT(!r.allowed && r.denying_rule == 1);
    sluicegate_attr moved[] = {{"user", 4, "new", 3}, {"tenant", 6, "beta", 4}};
    EXPECT_STATUS(sluicegate_policy_check(pol, moved, 2, 5, NULL, &r), SLUICEGATE_OK);
    EXPECT(r.allowed);
    printf("policy [shared], 8 processes: %llu admitted of the tenant's 12\n",
           (unsigned long long)total);
    sluicegate_policy_free(pol);
    /* A [shared] table naming a symlink: the policy is refused, naming it. */
    char link[4200];
    snprintf(link, sizeof link, "%s.link", path);
    EXPECT(symlink(path, link) == 0);
    snprintf(text, sizeof text,
             "[shared]\npath = \"%s\"\n[[rule]]\nname = \"a\"\nkey = [\"ip\"]\nlimit = \"1/s\"\n",
             link);
    pol = NULL;
    EXPECT_STATUS(sluicegate_policy_new(text, strlen(text), err, sizeof err, &pol),
                  SLUICEGATE_ERR_POLICY);
    EXPECT(pol == NULL && strstr(err, "symbolic links are never followed") != NULL);
    EXPECT(unlink(link) == 0);
    unlink_region(path);
}

static uint64_t rng = 0x9e3779b97f4a7c15u;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Random bytes over random places of a live region (written through a plain
 * mmap of its file, as another process would), then every C function: no
 * crash, no hang (an alarm kills a spin), no out-of-bounds access (ASan). */
static void test_random_bytes_never_crash_or_hang(void) {
    char path[4096];
    fresh_region(path, "fuzz");
    sluicegate_shared_options o = opts(1 << 20);
    const uint32_t *algs = keyed_algs;
    sluicegate_keyed *t[NALG];
    sluicegate_limiter *l[NALG];
    for (int a = 0; a < NALG; ++a) {
        sluicegate_config c = cfg(algs[a], 5, SEC, 0);
        EXPECT_STATUS(open_keyed(path, &o, &c, 100, &t[a]), SLUICEGATE_OK);
        EXPECT_STATUS(open_limiter(path, &o, &c, 1, &l[a]), SLUICEGATE_OK);
    }
    int fd = open(path, O_RDWR);
    struct stat sb;
    EXPECT(fd >= 0 && fstat(fd, &sb) == 0);
    const size_t len = (size_t)sb.st_size;
    unsigned char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    EXPECT(m != MAP_FAILED);
    if (m == MAP_FAILED) return;
    alarm(120);
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    unsigned long calls = 0;
    for (int round = 0; round < 600; ++round) {
        /* 64 random 8-byte words past the header, and some random single bytes. */
        for (int i = 0; i < 64; ++i) {
            size_t at = 4096 + (size_t)(next() % ((len - 4096) / 8)) * 8;
            uint64_t v = next();
            memcpy(m + at, &v, 8);
            m[4096 + next() % (len - 4096)] = (unsigned char)next();
        }
        const uint64_t now = sluicegate_shared_now_ns() + (uint64_t)round * 10000000u;
        sluicegate_decision d;
        sluicegate_keyed_stats st;
        uint64_t n;
        char key[16];
        for (int a = 0; a < NALG; ++a) {
            for (int k = 0; k < 12; ++k) {
                int kl = snprintf(key, sizeof key, "k%d", k);
                (void)sluicegate_keyed_check_at(t[a], K(key), (size_t)kl, now, &d);
                (void)sluicegate_keyed_check_n_at(t[a], K(key), (size_t)kl, 2, now, &d);
                (void)sluicegate_keyed_peek_at(t[a], K(key), (size_t)kl, now, &d);
                (void)sluicegate_keyed_peek_n_at(t[a], K(key), (size_t)kl, 1, now, &d);
                (void)sluicegate_keyed_check(t[a], K(key), (size_t)kl, &d);
                (void)sluicegate_keyed_check_n(t[a], K(key), (size_t)kl, 1, &d);
                (void)sluicegate_keyed_peek(t[a], K(key), (size_t)kl, &d);
                (void)sluicegate_keyed_peek_n(t[a], K(key), (size_t)kl, 1, &d);
                calls += 8;
            }
            EXPECT_STATUS(sluicegate_keyed_get_stats(t[a], &st), SLUICEGATE_OK);
            EXPECT_STATUS(sluicegate_keyed_len_at(t[a], now, &n), SLUICEGATE_OK);
            if (round % 50 == 49) EXPECT_STATUS(sluicegate_keyed_clear(t[a]), SLUICEGATE_OK);
            (void)sluicegate_limiter_check_at(l[a], now, &d);
            (void)sluicegate_limiter_check_n_at(l[a], 2, now, &d);
            (void)sluicegate_limiter_peek_at(l[a], now, &d);
            (void)sluicegate_limiter_peek_n_at(l[a], 1, now, &d);
            (void)sluicegate_limiter_check(l[a], &d);
            (void)sluicegate_limiter_check_n(l[a], 1, &d);
            (void)sluicegate_limiter_peek(l[a], &d);
            (void)sluicegate_limiter_peek_n(l[a], 1, &d);
            calls += 11;
        }
        /* New handles on the damaged region: opened or refused, never a crash. */
        if (round % 10 == 0) {
            for (int a = 0; a < NALG; ++a) {
                sluicegate_config c = cfg(algs[a], 3 + (uint64_t)round, SEC, 0);
                sluicegate_keyed *nk = NULL;
                sluicegate_limiter *nl = NULL;
                (void)open_keyed(path, &o, &c, 50, &nk);
                (void)open_limiter(path, &o, &c, 1, &nl);
                if (nk) (void)sluicegate_keyed_check(nk, K("x"), 1, &d);
                if (nl) (void)sluicegate_limiter_check(nl, &d);
                sluicegate_keyed_free(nk);
                sluicegate_limiter_free(nl);
            }
        }
    }
    /* The header too: each word damaged in turn, then an open (a clear error or
     * a region made again) and checks through the handles already open. */
    for (size_t w = 0; w < 16; ++w) {
        uint64_t v = next();
        memcpy(m + 8 * w, &v, 8);
        sluicegate_config c = cfg(SLUICEGATE_TOKEN_BUCKET, 3, SEC, 0);
        sluicegate_keyed *nk = NULL;
        char err[512];
        (void)sluicegate_keyed_open_shared(path, strlen(path), &o, &c, 50, 0, err, sizeof err, &nk);
        sluicegate_keyed_free(nk);
        sluicegate_decision d;
        (void)sluicegate_keyed_check(t[0], K("h"), 1, &d);
    }
    clock_gettime(CLOCK_MONOTONIC, &end);
    alarm(0);
    const double secs = (double)(end.tv_sec - start.tv_sec) + (double)(end.tv_nsec - start.tv_nsec) / 1e9;
    EXPECT(secs < 60);
    printf("corruption fuzz: 600 rounds of random bytes, %lu checks, %.2f s, no crash or hang\n",
           calls, secs);
    munmap(m, len);
    close(fd);
    for (int a = 0; a < NALG; ++a) {
        sluicegate_keyed_free(t[a]);
        sluicegate_limiter_free(l[a]);
    }
    unlink_region(path);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: shared_test SCRATCH_DIR\n");
        return 2;
    }
    scratch = argv[1];
    test_handles_share_one_state();
    test_one_mapping_per_region();
    test_bad_inputs();
    test_every_way_opening_fails();
    test_eight_processes_admit_exactly_the_bound();
    test_a_shared_policy_across_processes();
    test_random_bytes_never_crash_or_hang();
    printf("shared_test (C11, sluicegate %s): %d passed, %d failed\n", sluicegate_version(),
           checks - failures, failures);
    return failures == 0 ? 0 : 1;
}
