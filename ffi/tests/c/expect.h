/* The C tests' expectations: EXPECT(cond) and EXPECT_STATUS(expr, want) count
 * checks and report failures with their file and line; each test's main prints
 * the counts and exits non-zero on any failure. One test program per file, so
 * the counters are static here. */
#ifndef SLUICEGATE_TEST_EXPECT_H
#define SLUICEGATE_TEST_EXPECT_H

#include <stdio.h>

#include "sluicegate.h"

static int failures = 0;
static int checks = 0;

#define EXPECT(cond)                                                              \
    do {                                                                          \
        ++checks;                                                                 \
        if (!(cond)) {                                                            \
            ++failures;                                                           \
            fprintf(stderr, "%s:%d: FAILED: %s\n", __FILE__, __LINE__, #cond);    \
        }                                                                         \
    } while (0)

#define EXPECT_STATUS(expr, want)                                                 \
    do {                                                                          \
        sluicegate_status got_ = (expr);                                          \
        ++checks;                                                                 \
        if (got_ != (sluicegate_status)(want)) {                                  \
            ++failures;                                                           \
            fprintf(stderr, "%s:%d: FAILED: %s -> %u (%s), want %s\n", __FILE__,  \
                    __LINE__, #expr, (unsigned)got_, sluicegate_status_str(got_), \
                    #want);                                                       \
        }                                                                         \
    } while (0)

#endif
