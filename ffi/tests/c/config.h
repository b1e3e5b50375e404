/* The C tests' shorthand for a limit's config: algorithm, amount per period,
 * burst; every other field zero. */
#ifndef SLUICEGATE_TEST_CONFIG_H
#define SLUICEGATE_TEST_CONFIG_H

#include <stdint.h>
#include <string.h>

#include "sluicegate.h"

#define SEC UINT64_C(1000000000)

static inline sluicegate_config cfg(uint32_t alg, uint64_t amount, uint64_t period_ns, uint64_t burst) {
    sluicegate_config c;
    memset(&c, 0, sizeof c);
    c.struct_size = sizeof c;
    c.algorithm = alg;
    c.amount = amount;
    c.period_ns = period_ns;
    c.burst = burst;
    return c;
}

#endif
