/* The install test's program: built with nothing but
 *   cc app.c $(pkg-config --cflags --libs sluicegate)
 * against an installed prefix. */
#include <stdio.h>
#include <string.h>

#include <sluicegate.h>

int main(void) {
    sluicegate_config c;
    memset(&c, 0, sizeof c);
    c.struct_size = sizeof c;
    c.algorithm = SLUICEGATE_TOKEN_BUCKET;
    const char *rate = "10/s";
    if (sluicegate_config_parse(rate, strlen(rate), &c, NULL) != SLUICEGATE_OK) return 1;
    sluicegate_limiter *l = NULL;
    sluicegate_status s = sluicegate_limiter_new(&c, 1, &l);
    if (s != SLUICEGATE_OK) {
        fprintf(stderr, "%s\n", sluicegate_status_str(s));
        return 1;
    }
    const uint64_t now = sluicegate_now_ns();
    int admitted = 0;
    for (int i = 0; i < 12; ++i) {
        sluicegate_decision d;
        if (sluicegate_limiter_check_at(l, now, &d) == SLUICEGATE_OK && d.allowed) ++admitted;
    }
    sluicegate_limiter_free(l);
    printf("app: sluicegate %s admitted %d of 12 at %s\n", sluicegate_version(), admitted, rate);
    return admitted == 10 ? 0 : 1;
}
