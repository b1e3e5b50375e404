/* Allocation failure is a status, never an abort: under an address-space limit
 * (set here with setrlimit, so the test needs no tool), a keyed table too big for
 * it is SLUICEGATE_ERR_ALLOC (not a configuration error), nothing leaks into the
 * next call, and a table that fits is still built. Not run under ASan: the
 * sanitizer reserves terabytes of shadow address space, which RLIMIT_AS forbids.
 * Built with -std=c11 -Wall -Wextra -Werror -pedantic by scripts/test-ffi. */
#define _POSIX_C_SOURCE 200809L
#include <string.h>
#include <sys/resource.h>

#include "expect.h"
#include "sluicegate.h"

int main(void) {
    sluicegate_config c;
    memset(&c, 0, sizeof c);
    c.struct_size = sizeof c;
    c.algorithm = SLUICEGATE_TOKEN_BUCKET;
    EXPECT_STATUS(sluicegate_config_parse("10/s", 4, &c, NULL), SLUICEGATE_OK);

    /* 1 GiB of address space: the largest table (2^28 keys, 4 GiB) cannot fit. */
    struct rlimit lim = {.rlim_cur = (rlim_t)1 << 30, .rlim_max = (rlim_t)1 << 30};
    EXPECT(setrlimit(RLIMIT_AS, &lim) == 0);

    const uint32_t algs[] = {SLUICEGATE_TOKEN_BUCKET, SLUICEGATE_FIXED_WINDOW,
                             SLUICEGATE_SLIDING_WINDOW, SLUICEGATE_SHAPER};
    for (size_t i = 0; i < sizeof algs / sizeof algs[0]; ++i) {
        c.algorithm = algs[i];
        sluicegate_keyed *k = NULL;
        EXPECT_STATUS(sluicegate_keyed_new(&c, SLUICEGATE_KEYED_MAX_CAPACITY, SLUICEGATE_EVICT_STALEST, &k),
                      SLUICEGATE_ERR_ALLOC);
        EXPECT(k == NULL);
        /* Every policy, and a second failure right after the first. */
        EXPECT_STATUS(sluicegate_keyed_new(&c, SLUICEGATE_KEYED_MAX_CAPACITY, SLUICEGATE_REJECT, &k),
                      SLUICEGATE_ERR_ALLOC);
        EXPECT(k == NULL);
        /* The process is fine: a table that fits (1 Mi keys, 16 MiB) is built and works. */
        EXPECT_STATUS(sluicegate_keyed_new(&c, 1u << 20, SLUICEGATE_EVICT_STALEST, &k), SLUICEGATE_OK);
        EXPECT(k != NULL);
        sluicegate_decision d;
        EXPECT_STATUS(sluicegate_keyed_check_at(k, (const uint8_t *)"k", 1, 0, &d), SLUICEGATE_OK);
        EXPECT(d.allowed && d.limit == 10);
        sluicegate_keyed_free(k);
    }
    /* The status has its own message. */
    EXPECT(strcmp(sluicegate_status_str(SLUICEGATE_ERR_ALLOC), "out of memory") == 0);

    printf("alloc_test: %d checks, %d failures\n", checks, failures);
    return failures == 0 ? 0 : 1;
}
