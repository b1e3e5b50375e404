// The C++ tests' expectations: EXPECT(cond) counts passes and failures and
// reports a failure with its file and line; throws(f) runs f and returns the
// status of the sluicegate::error it threw (SLUICEGATE_OK if none). One test
// program per file, so the counters are static here.
#ifndef SLUICEGATE_TEST_EXPECT_HPP
#define SLUICEGATE_TEST_EXPECT_HPP

#include <cstdio>

#include "sluicegate.hpp"

static int passed = 0, failed = 0;
#define EXPECT(cond)                                                                \
    do {                                                                            \
        if (cond) ++passed;                                                         \
        else { ++failed; std::fprintf(stderr, "%s:%d: FAILED: %s\n", __FILE__, __LINE__, #cond); } \
    } while (0)

template <class F>
static sluicegate_status throws(F f) {
    try {
        f();
    } catch (const sluicegate::error &e) {
        return e.status();
    }
    return SLUICEGATE_OK;
}

#endif
