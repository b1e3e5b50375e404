/* C11 test of the policy API (sluicegate_policy_*): exact decisions at
 * caller-supplied times, all-or-nothing across rules, shadow rules, per-rule
 * answers and RateLimit fields, reload (a bad one keeps the old policy and its
 * state), files, metrics text, and every bad input -> its status code. Built with
 * -std=c11 -Wall -Wextra -Werror -pedantic under -fsanitize=address,undefined by
 * scripts/test-ffi, which passes a scratch directory as argv[1]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expect.h"
#include "sluicegate.h"

#define SEC UINT64_C(1000000000)

static sluicegate_attr attr(const char *name, const char *value) {
    sluicegate_attr a = {name, strlen(name), value, strlen(value)};
    return a;
}

static sluicegate_policy *make(const char *text) {
    sluicegate_policy *p = NULL;
    char err[512];
    sluicegate_status s = sluicegate_policy_new(text, strlen(text), err, sizeof err, &p);
    if (s != SLUICEGATE_OK) fprintf(stderr, "policy rejected: %s\n", err);
    EXPECT_STATUS(s, SLUICEGATE_OK);
    EXPECT(strcmp(err, "") == 0); /* no warnings */
    return p;
}

/* Checks one request of cost 1 from `ip` at `now`; returns whether admitted. */
static int check_ip(const sluicegate_policy *p, const char *ip, uint64_t now,
                    sluicegate_policy_decision *d, sluicegate_policy_result *r) {
    sluicegate_attr a[] = {attr("ip", ip), attr("path", "/api/x")};
    EXPECT_STATUS(sluicegate_policy_check_at(p, a, 2, 1, now, d, r), SLUICEGATE_OK);
    return r->allowed;
}

static int name_is(const sluicegate_policy_rule *r, const char *name) {
    return r->name_len == strlen(name) && memcmp(r->name, name, r->name_len) == 0;
}

static const char RULES[] =
    "[defaults]\n"
    "algorithm = \"fixed_window\"\n"
    "\n"
    "[[rule]]\n"
    "name = \"per-ip\"\n"
    "key = [\"ip\"]\n"
    "limit = \"2/minute\"\n"
    "\n"
    "[[rule]]\n"
    "name = \"global\"\n"
    "limit = \"3/second\"\n"
    "\n"
    "[[rule]]\n"
    "name = \"trial\"\n"
    "match = { path = \"/api/*\" }\n"
    "limit = \"1/minute\"\n"
    "mode = \"shadow\"\n";

static void test_all_or_nothing_across_rules(void) {
    sluicegate_policy *p = make(RULES);
    sluicegate_policy_decision *d = NULL;
    EXPECT_STATUS(sluicegate_policy_decision_new(&d), SLUICEGATE_OK);
    sluicegate_policy_result r;
    sluicegate_policy_rule rule;
    const uint64_t t0 = 600 * SEC; /* a window start for both rules */

    EXPECT(check_ip(p, "192.0.2.1", t0, d, &r));
    EXPECT(r.rule_count == 3 && r.denying_rule == SLUICEGATE_POLICY_NO_RULE);
    EXPECT(r.retry_after_ns == 0 && r.delay_ns == 0);
    EXPECT_STATUS(sluicegate_policy_decision_rule(d, 0, &rule), SLUICEGATE_OK);
    EXPECT(name_is(&rule, "per-ip") && rule.allowed && !rule.shadow && rule.remaining == 1 &&
           rule.limit == 2 && rule.window_ns == 60 * SEC);
    EXPECT_STATUS(sluicegate_policy_decision_rule(d, 1, &rule), SLUICEGATE_OK);
    EXPECT(name_is(&rule, "global") && rule.allowed && rule.remaining == 2 && rule.limit == 3);
    EXPECT_STATUS(sluicegate_policy_decision_rule(d, 2, &rule), SLUICEGATE_OK);
    EXPECT(name_is(&rule, "trial") && rule.shadow && rule.allowed && rule.remaining == 0);
    EXPECT_STATUS(sluicegate_policy_decision_rule(d, 3, &rule), SLUICEGATE_ERR_INDEX);
    EXPECT_STATUS(sluicegate_policy_decision_rule(d, UINT32_MAX, &rule), SLUICEGATE_ERR_INDEX);

    /* The shadow rule would deny now, but only counts. */
    EXPECT(check_ip(p, "192.0.2.1", t0, d, &r));
    EXPECT_STATUS(sluicegate_policy_decision_rule(d, 2, &rule), SLUICEGATE_OK);
    EXPECT(rule.shadow && !rule.allowed);
    EXPECT(r.denying_rule == SLUICEGATE_POLICY_NO_RULE);

    /* Denied by per-ip: global is not charged (it still has 1 of 3). */
    EXPECT(!check_ip(p, "192.0.2.1", t0, d, &r));
    EXPECT(r.denying_rule == 0 && r.retry_after_ns == 60 * SEC);
    EXPECT_STATUS(sluicegate_policy_decision_rule(d, r.denying_rule, &rule), SLUICEGATE_OK);
    EXPECT(name_is(&rule, "per-ip") && !rule.allowed && rule.retry_after_ns == 60 * SEC);
    EXPECT(check_ip(p, "192.0.2.2", t0, d, &r)); /* global's third */
    EXPECT_STATUS(sluicegate_policy_decision_rule(d, 1, &rule), SLUICEGATE_OK);
    EXPECT(rule.remaining == 0);

    /* Denied by global: per-ip of .2 is not charged (1 of 2 left), which shows
     * one second later, in global's next window. */
    EXPECT(!check_ip(p, "192.0.2.2", t0, d, &r));
    EXPECT(r.denying_rule == 1 && r.retry_after_ns == SEC);
    EXPECT(check_ip(p, "192.0.2.2", t0 + SEC, d, &r));
    EXPECT_STATUS(sluicegate_policy_decision_rule(d, 0, &rule), SLUICEGATE_OK);
    EXPECT(rule.remaining == 0);
    EXPECT(!check_ip(p, "192.0.2.2", t0 + SEC, d, &r));
    EXPECT(r.denying_rule == 0);

    /* The RateLimit fields, snprintf-style. */
    char buf[256];
    size_t len = 0;
    EXPECT_STATUS(sluicegate_policy_decision_ratelimit_policy(d, buf, sizeof buf, &len), SLUICEGATE_OK);
    EXPECT(strcmp(buf, "\"per-ip\";q=2;w=60, \"global\";q=3;w=1") == 0 && len == strlen(buf));
    EXPECT_STATUS(sluicegate_policy_decision_ratelimit(d, buf, sizeof buf, &len), SLUICEGATE_OK);
    /* global was peeked, not charged: r is what a charge would leave (1 of 2). */
    EXPECT(strcmp(buf, "\"per-ip\";r=0;t=59, \"global\";r=1;t=1") == 0);
    const size_t full = len;
    EXPECT_STATUS(sluicegate_policy_decision_ratelimit(d, NULL, 0, &len), SLUICEGATE_OK);
    EXPECT(len == full);
    char small[9];
    memset(small, 'x', sizeof small);
    EXPECT_STATUS(sluicegate_policy_decision_ratelimit(d, small, sizeof small, &len), SLUICEGATE_OK);
    EXPECT(len == full && strcmp(small, "\"per-ip\"") == 0);
    EXPECT_STATUS(sluicegate_policy_decision_ratelimit(d, small, 1, NULL), SLUICEGATE_OK);
    EXPECT(small[0] == '\0');
    EXPECT_STATUS(sluicegate_policy_decision_ratelimit(d, NULL, 4, &len), SLUICEGATE_ERR_NULL);

    /* Without a decision buffer: the verdict alone. */
    sluicegate_attr a[] = {attr("ip", "192.0.2.3")};
    EXPECT_STATUS(sluicegate_policy_check_at(p, a, 1, 1, t0 + SEC, NULL, &r), SLUICEGATE_OK);
    EXPECT(r.allowed && r.rule_count == 2); /* the shadow rule needs a path */
    /* Cost 0 peeks; a cost above every capacity is a denial that can never pass. */
    EXPECT_STATUS(sluicegate_policy_check_at(p, a, 1, 0, t0 + SEC, d, &r), SLUICEGATE_OK);
    EXPECT(r.allowed);
    EXPECT_STATUS(sluicegate_policy_check_at(p, a, 1, 3, t0 + SEC, d, &r), SLUICEGATE_OK);
    EXPECT(!r.allowed && r.denying_rule == 0 && r.retry_after_ns == UINT64_MAX);

    /* Metrics: exact counters. */
    EXPECT_STATUS(sluicegate_policy_metrics_text_at(p, t0 + SEC, NULL, 0, &len), SLUICEGATE_OK);
    char *text = malloc(len + 1);
    size_t len2 = 0;
    EXPECT_STATUS(sluicegate_policy_metrics_text_at(p, t0 + SEC, text, len + 1, &len2), SLUICEGATE_OK);
    EXPECT(len2 == len && strlen(text) == len);
    const char *want[] = {
        "sluicegate_policy_requests_total{rule=\"per-ip\",outcome=\"allowed\"} 6\n",
        "sluicegate_policy_requests_total{rule=\"per-ip\",outcome=\"denied\"} 3\n",
        "sluicegate_policy_requests_total{rule=\"global\",outcome=\"allowed\"} 6\n",
        "sluicegate_policy_requests_total{rule=\"global\",outcome=\"denied\"} 2\n",
        "sluicegate_policy_requests_total{rule=\"trial\",outcome=\"allowed\"} 1\n",
        "sluicegate_policy_requests_total{rule=\"trial\",outcome=\"shadow_denied\"} 6\n",
        "sluicegate_policy_keys{rule=\"per-ip\"} 3\n",
        "sluicegate_policy_reloads_total{result=\"ok\"} 0\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; ++i) {
        if (!strstr(text, want[i])) fprintf(stderr, "missing %s", want[i]);
        EXPECT(strstr(text, want[i]) != NULL);
    }
    free(text);
    EXPECT_STATUS(sluicegate_policy_metrics_text(p, NULL, 0, &len), SLUICEGATE_OK);
    EXPECT(len > 0);
    EXPECT_STATUS(sluicegate_policy_metrics_text(p, NULL, 1, &len), SLUICEGATE_ERR_NULL);
    /* The library clock (sluicegate_now_ns's). */
    EXPECT_STATUS(sluicegate_policy_check(p, a, 1, 1, d, &r), SLUICEGATE_OK);
    EXPECT(r.rule_count == 2);

    sluicegate_policy_decision_free(d);
    sluicegate_policy_free(p);
}

static void test_errors_name_line_column_and_rule(void) {
    const char *bad = "[[rule]]\nname = \"login\"\nlimit = \"5/fortnight\"\n";
    sluicegate_policy *p = (sluicegate_policy *)&p; /* must stay untouched */
    sluicegate_policy *const before = p;
    char err[512];
    EXPECT_STATUS(sluicegate_policy_new(bad, strlen(bad), err, sizeof err, &p), SLUICEGATE_ERR_POLICY);
    EXPECT(p == before);
    EXPECT(strncmp(err, "<policy>:3:12: error: rule `login`: ", 36) == 0);
    /* Every error, one a line. */
    const char *two = "[[rule]]\nname = \"a\"\nlimit = \"0/s\"\n[[rule]]\nname = \"a\"\nlimit = \"1/s\"\nalgorithm = \"gcra\"\n";
    EXPECT_STATUS(sluicegate_policy_new(two, strlen(two), err, sizeof err, &p), SLUICEGATE_ERR_POLICY);
    EXPECT(strstr(err, "<policy>:3:") == err && strstr(err, "\n<policy>:5:") != NULL);
    EXPECT(strstr(err, "gcra") != NULL);
    /* Truncated to the buffer, NUL-terminated; no buffer at all is fine. */
    char tiny[10];
    EXPECT_STATUS(sluicegate_policy_new(bad, strlen(bad), tiny, sizeof tiny, &p), SLUICEGATE_ERR_POLICY);
    EXPECT(strcmp(tiny, "<policy>:") == 0);
    EXPECT_STATUS(sluicegate_policy_new(bad, strlen(bad), NULL, 0, &p), SLUICEGATE_ERR_POLICY);
    EXPECT_STATUS(sluicegate_policy_new(bad, strlen(bad), NULL, 100, &p), SLUICEGATE_ERR_POLICY);
    tiny[0] = 'x';
    EXPECT_STATUS(sluicegate_policy_new(bad, strlen(bad), tiny, 0, &p), SLUICEGATE_ERR_POLICY);
    EXPECT(tiny[0] == 'x');
    /* A Redis-backed rule is built by the library's Redis factory (its checks
     * are in redis_test.c, against a live server): a URL it cannot use is an
     * error naming the rule, before anything connects. */
    const char *redis = "[redis]\nurl = \"redis://127.0.0.1:notaport\"\n[[rule]]\nname = \"r\"\nlimit = \"1/s\"\nbackend = \"redis\"\n";
    EXPECT_STATUS(sluicegate_policy_new(redis, strlen(redis), err, sizeof err, &p), SLUICEGATE_ERR_POLICY);
    EXPECT(strstr(err, "<policy>:4:") == err && strstr(err, "rule `r`") != NULL && strstr(err, "port") != NULL);
    /* Warnings come back on success. */
    const char *warn = "[[rule]]\nname = \"a\"\nlimit = \"1/s\"\n[[rule]]\nname = \"b\"\nlimit = \"1/s\"\n";
    EXPECT_STATUS(sluicegate_policy_new(warn, strlen(warn), err, sizeof err, &p), SLUICEGATE_OK);
    EXPECT(strstr(err, "warning") != NULL && strstr(err, "rule `b`") != NULL);
    sluicegate_policy_free(p);
    /* Not UTF-8; NULL pointers. */
    const char nonutf8[] = "[[rule]]\nname = \"\xff\"\n";
    p = before;
    EXPECT_STATUS(sluicegate_policy_new(nonutf8, strlen(nonutf8), err, sizeof err, &p), SLUICEGATE_ERR_NOT_UTF8);
    EXPECT(p == before);
    EXPECT_STATUS(sluicegate_policy_new(NULL, 0, err, sizeof err, &p), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_policy_new("", 0, err, sizeof err, NULL), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_policy_new_from_file(NULL, 3, err, sizeof err, &p), SLUICEGATE_ERR_NULL);
    EXPECT(p == before);
    /* The empty policy admits everything. */
    EXPECT_STATUS(sluicegate_policy_new("", 0, NULL, 0, &p), SLUICEGATE_OK);
    sluicegate_policy_result r;
    EXPECT_STATUS(sluicegate_policy_check_at(p, NULL, 0, 1, 0, NULL, &r), SLUICEGATE_OK);
    EXPECT(r.allowed && r.rule_count == 0);
    sluicegate_policy_free(p);
    sluicegate_policy_free(NULL);
    sluicegate_policy_decision_free(NULL);
}

static void test_bad_check_inputs(void) {
    sluicegate_policy *p = make("[[rule]]\nname = \"k\"\nkey = [\"user\"]\nlimit = \"1/minute\"\n");
    sluicegate_policy_decision *d = NULL;
    EXPECT_STATUS(sluicegate_policy_decision_new(&d), SLUICEGATE_OK);
    EXPECT_STATUS(sluicegate_policy_decision_new(NULL), SLUICEGATE_ERR_NULL);
    sluicegate_policy_result r;
    sluicegate_attr good = attr("user", "alice");
    EXPECT_STATUS(sluicegate_policy_check_at(NULL, &good, 1, 1, 0, d, &r), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_policy_check_at(p, &good, 1, 1, 0, d, NULL), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_policy_check_at(p, NULL, 1, 1, 0, d, &r), SLUICEGATE_ERR_NULL);
    sluicegate_attr a = good;
    a.name = NULL;
    EXPECT_STATUS(sluicegate_policy_check_at(p, &a, 1, 1, 0, d, &r), SLUICEGATE_ERR_NULL);
    a = good;
    a.value = NULL;
    a.value_len = 0;
    EXPECT_STATUS(sluicegate_policy_check_at(p, &a, 1, 1, 0, d, &r), SLUICEGATE_ERR_NULL);
    a = good;
    a.value = "\xc3\x28";
    a.value_len = 2;
    EXPECT_STATUS(sluicegate_policy_check_at(p, &a, 1, 1, 0, d, &r), SLUICEGATE_ERR_NOT_UTF8);
    a = good;
    a.name = "us\xff";
    EXPECT_STATUS(sluicegate_policy_check_at(p, &a, 1, 1, 0, d, &r), SLUICEGATE_ERR_NOT_UTF8);
    static sluicegate_attr many[SLUICEGATE_POLICY_MAX_ATTRS + 1];
    for (size_t i = 0; i < SLUICEGATE_POLICY_MAX_ATTRS + 1; ++i) many[i] = attr("x", "y");
    many[SLUICEGATE_POLICY_MAX_ATTRS] = good;
    EXPECT_STATUS(sluicegate_policy_check_at(p, many, SLUICEGATE_POLICY_MAX_ATTRS + 1, 1, 0, d, &r),
                  SLUICEGATE_ERR_TOO_MANY_ATTRS);
    EXPECT_STATUS(sluicegate_policy_check_at(p, many, SLUICEGATE_POLICY_MAX_ATTRS + 1, 1, 0, d, &r),
                  SLUICEGATE_ERR_TOO_MANY_ATTRS);
    /* Nothing above charged alice; the first value of a repeated name counts. */
    sluicegate_attr two[] = {good, attr("user", "bob")};
    EXPECT_STATUS(sluicegate_policy_check_at(p, two, 2, 1, 0, d, &r), SLUICEGATE_OK);
    EXPECT(r.allowed);
    EXPECT_STATUS(sluicegate_policy_check_at(p, &good, 1, 1, 0, d, &r), SLUICEGATE_OK);
    EXPECT(!r.allowed);
    /* An empty value is a value; a missing key attribute is a key of its own. */
    sluicegate_attr empty = attr("user", "");
    EXPECT_STATUS(sluicegate_policy_check_at(p, &empty, 1, 1, 0, d, &r), SLUICEGATE_OK);
    EXPECT(r.allowed);
    EXPECT_STATUS(sluicegate_policy_check_at(p, many, SLUICEGATE_POLICY_MAX_ATTRS, 1, 0, d, &r), SLUICEGATE_OK);
    EXPECT(r.allowed);
    /* Accessors: NULL handles and outputs. */
    sluicegate_policy_rule rule;
    size_t len;
    EXPECT_STATUS(sluicegate_policy_decision_rule(NULL, 0, &rule), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_policy_decision_rule(d, 0, NULL), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_policy_decision_ratelimit(NULL, NULL, 0, &len), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_policy_decision_ratelimit_policy(NULL, NULL, 0, &len), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_policy_metrics_text(NULL, NULL, 0, &len), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_policy_reload(NULL, "", 0, NULL, 0), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_policy_reload(p, NULL, 0, NULL, 0), SLUICEGATE_ERR_NULL);
    EXPECT_STATUS(sluicegate_policy_reload_from_file(p, NULL, 0, NULL, 0), SLUICEGATE_ERR_NULL);
    /* A fresh decision has no rules. */
    sluicegate_policy_decision *fresh = NULL;
    EXPECT_STATUS(sluicegate_policy_decision_new(&fresh), SLUICEGATE_OK);
    EXPECT_STATUS(sluicegate_policy_decision_rule(fresh, 0, &rule), SLUICEGATE_ERR_INDEX);
    EXPECT_STATUS(sluicegate_policy_decision_ratelimit(fresh, NULL, 0, &len), SLUICEGATE_OK);
    EXPECT(len == 0);
    sluicegate_policy_decision_free(fresh);
    sluicegate_policy_decision_free(d);
    sluicegate_policy_free(p);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    EXPECT(f != NULL);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static void test_reload_and_files(const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/rules.toml", dir);
    write_file(path, "[[rule]]\nname = \"api\"\nkey = [\"ip\"]\nlimit = \"2/minute\"\nalgorithm = \"fixed_window\"\n");
    sluicegate_policy *p = NULL;
    char err[512];
    EXPECT_STATUS(sluicegate_policy_new_from_file(path, strlen(path), err, sizeof err, &p), SLUICEGATE_OK);
    sluicegate_policy_result r;
    EXPECT(check_ip(p, "198.51.100.1", 0, NULL, &r));
    EXPECT(check_ip(p, "198.51.100.1", 0, NULL, &r));
    EXPECT(!check_ip(p, "198.51.100.1", 0, NULL, &r));

    /* An invalid reload keeps the old policy, with its state. */
    const char *bad = "[[rule]]\nname = \"api\"\nkey = [\"ip\"]\nlimit = \"oops\"\n";
    EXPECT_STATUS(sluicegate_policy_reload(p, bad, strlen(bad), err, sizeof err), SLUICEGATE_ERR_POLICY);
    EXPECT(strncmp(err, "<policy>:4:", 11) == 0 && strstr(err, "rule `api`") != NULL);
    EXPECT(!check_ip(p, "198.51.100.1", 0, NULL, &r));
    EXPECT(check_ip(p, "198.51.100.2", 0, NULL, &r));
    write_file(path, "[[rule]]\nname = \"api\"\nkey = [\"ip\"]\nlimit = \"2/minute\"\nmatch = { ip = \"10.0.0.300\" }\n");
    EXPECT_STATUS(sluicegate_policy_reload_from_file(p, path, strlen(path), err, sizeof err), SLUICEGATE_ERR_POLICY);
    char where[1100];
    snprintf(where, sizeof where, "%s:5:", path);
    EXPECT(strncmp(err, where, strlen(where)) == 0);
    char missing[1100];
    snprintf(missing, sizeof missing, "%s/none.toml", dir);
    EXPECT_STATUS(sluicegate_policy_reload_from_file(p, missing, strlen(missing), err, sizeof err), SLUICEGATE_ERR_IO);
    EXPECT(strstr(err, "none.toml") != NULL);
    EXPECT(!check_ip(p, "198.51.100.1", 0, NULL, &r));

    /* A valid reload: the same limits keep their state; a raised limit applies. */
    write_file(path, "[[rule]]\nname = \"api\"\nkey = [\"ip\"]\nlimit = \"2/minute\"\nalgorithm = \"fixed_window\"\n");
    EXPECT_STATUS(sluicegate_policy_reload_from_file(p, path, strlen(path), err, sizeof err), SLUICEGATE_OK);
    EXPECT(strcmp(err, "") == 0);
    EXPECT(!check_ip(p, "198.51.100.1", 0, NULL, &r));
    const char *raised = "[[rule]]\nname = \"api\"\nkey = [\"ip\"]\nlimit = \"3/minute\"\nalgorithm = \"fixed_window\"\n";
    EXPECT_STATUS(sluicegate_policy_reload(p, raised, strlen(raised), NULL, 0), SLUICEGATE_OK);
    EXPECT(check_ip(p, "198.51.100.1", 0, NULL, &r));
    EXPECT(!check_ip(p, "198.51.100.1", 0, NULL, &r));

    /* The reloads are counted. */
    char text[8192];
    size_t len = 0;
    EXPECT_STATUS(sluicegate_policy_metrics_text_at(p, 0, text, sizeof text, &len), SLUICEGATE_OK);
    EXPECT(len < sizeof text);
    EXPECT(strstr(text, "sluicegate_policy_reloads_total{result=\"ok\"} 2\n") != NULL);
    EXPECT(strstr(text, "sluicegate_policy_reloads_total{result=\"error\"} 3\n") != NULL);
    EXPECT(strstr(text, "sluicegate_policy_last_reload_error{message=\"\"} 0\n") != NULL);
    sluicegate_policy_free(p);

    /* Creating from a missing file, or a file with an error. */
    p = NULL;
    EXPECT_STATUS(sluicegate_policy_new_from_file(missing, strlen(missing), err, sizeof err, &p), SLUICEGATE_ERR_IO);
    EXPECT(p == NULL && strstr(err, "cannot read") != NULL);
    write_file(path, "[[rule]]\nname = \"a\"\nlimit = \"5/fortnight\"\n");
    EXPECT_STATUS(sluicegate_policy_new_from_file(path, strlen(path), err, sizeof err, &p), SLUICEGATE_ERR_POLICY);
    snprintf(where, sizeof where, "%s:3:12: error: rule `a`: ", path);
    EXPECT(p == NULL && strncmp(err, where, strlen(where)) == 0);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: policy_test SCRATCH_DIR\n");
        return 2;
    }
    test_all_or_nothing_across_rules();
    test_errors_name_line_column_and_rule();
    test_bad_check_inputs();
    test_reload_and_files(argv[1]);
    EXPECT(strcmp(sluicegate_status_str(SLUICEGATE_ERR_POLICY), "unknown status") != 0);
    EXPECT(strcmp(sluicegate_status_str(SLUICEGATE_ERR_IO), "unknown status") != 0);
    EXPECT(strcmp(sluicegate_status_str(SLUICEGATE_ERR_TOO_MANY_ATTRS), "unknown status") != 0);
    printf("policy_test (C11, sluicegate %s): %d passed, %d failed\n", sluicegate_version(),
           checks - failures, failures);
    return failures == 0 ? 0 : 1;
}
