// The C++ tests' expectations: EXPECT(cond) counts passes and failures and
// reports a failure with its file and line; throws(f) runs f and returns the
// status of the sluicegate::error it threw (SLUICEGATE_OK if none); is_handle_v
// checks a handle type's moves. One test
// program per file, so the counters are static here.
#ifndef SLUICEGATE_TEST_EXPECT_HPP
#define SLUICEGATE_TEST_EXPECT_HPP

#include <cstdio>
#include <type_traits>

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

// A handle type: move-only, and its moves never throw.
template <class T>
inline constexpr bool is_handle_v =
    !std::is_copy_constructible_v<T> && !std::is_copy_assignable_v<T> &&
    std::is_nothrow_move_constructible_v<T> && std::is_nothrow_move_assignable_v<T>;

#endif
