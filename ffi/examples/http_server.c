/* A small HTTP/1.1 server in plain C that rate-limits its clients with
 * sluicegate, over poll(2). It listens on 127.0.0.1 only.
 *
 *   http_server [--port N] [--rate "5 per 10 seconds"] [--lifetime SECONDS]
 *               [--port-file PATH] [--capacity KEYS] [--policy rules.toml]
 *               [--workers N] [--shared NAME_OR_PATH]
 *
 * Pre-fork mode (--workers N, N > 1): the parent binds the listening socket,
 * then forks N workers that all accept on it (as nginx or Apache's prefork
 * do). The parent opens nothing stateful before fork: each worker opens its
 * limiter in a shared-memory region after fork (sluicegate_keyed_open_shared),
 * so the workers share one state per client IP and admit the limit once
 * between them, not once each. The region is --shared (a bare name is
 * /dev/shm/sluicegate-<name>), or by default one named after the parent's pid,
 * removed when the parent exits. With --policy, each worker loads the rule
 * file, which should carry a [shared] table for the same effect. SIGTERM or
 * SIGINT to the parent stops the workers; so does killing the process group.
 * --shared alone (one process) keeps the state in the region too, e.g. to
 * share it with other programs.
 *
 * Without --policy, each client IP gets a keyed limiter at --rate. With
 * --policy, the rule file decides (sluicegate_policy_*): each request's
 * attributes are `ip`, `method`, `path`, `host` and `header:<lower-case name>`
 * for every header; SIGHUP reloads the file (an invalid one is reported and the
 * rules in force keep running), and GET /metrics answers the policy's
 * Prometheus text without being limited.
 *
 * Every response carries the IETF httpapi RateLimit fields, one item per rule:
 *   RateLimit-Policy: "default";q=<limit>;w=<window seconds>
 *   RateLimit: "default";r=<remaining>;t=<seconds until full>
 * and a denied request gets 429 with Retry-After (whole seconds, rounded up).
 *
 * The clock is read once per event-loop turn (sluicegate_now_ns; for a
 * shared region, its own time base, sluicegate_shared_now_ns) and passed to
 * every check of that turn (sluicegate_keyed_check_at): no clock read per
 * request. Port 0 picks a free port; the port is printed and, with --port-file,
 * written to a file. The server exits after --lifetime seconds (default 30) or
 * on SIGINT/SIGTERM. Each connection serves one request (Connection: close). */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sluicegate.h"

#define MAX_CLIENTS 64
#define REQ_MAX 8192

struct client {
    int fd;
    struct in_addr addr;
    size_t len;
    char buf[REQ_MAX];
};

static volatile sig_atomic_t stopping = 0;
static volatile sig_atomic_t reloading = 0;
static void on_signal(int sig) {
    if (sig == SIGHUP) reloading = 1;
    else stopping = 1;
}

static uint64_t ceil_secs(uint64_t ns) { return ns / 1000000000u + (ns % 1000000000u != 0); }

static double mono_secs(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void respond(struct client *c, const sluicegate_keyed *table, const sluicegate_config *cfg,
                    uint64_t now) {
    sluicegate_decision d;
    /* The key: the client's IPv4 address as 4 bytes. */
    sluicegate_status s =
        sluicegate_keyed_check_at(table, (const uint8_t *)&c->addr, sizeof c->addr, now, &d);
    char out[1024];
    int n;
    const uint64_t window = ceil_secs(cfg->period_ns);
    if (s != SLUICEGATE_OK) {
        n = snprintf(out, sizeof out,
                     "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n"
                     "Connection: close\r\n\r\n");
        fprintf(stderr, "check failed: %s\n", sluicegate_status_str(s));
    } else if (d.allowed) {
        n = snprintf(out, sizeof out,
                     "HTTP/1.1 200 OK\r\n"
                     "Content-Type: text/plain\r\n"
                     "RateLimit-Policy: \"default\";q=%llu;w=%llu\r\n"
                     "RateLimit: \"default\";r=%llu;t=%llu\r\n"
                     "Content-Length: 3\r\nConnection: close\r\n\r\nok\n",
                     (unsigned long long)cfg->amount, (unsigned long long)window,
                     (unsigned long long)d.remaining,
                     (unsigned long long)ceil_secs(d.reset_after_ns));
    } else {
        static const char body[] = "rate limit exceeded\n";
        n = snprintf(out, sizeof out,
                     "HTTP/1.1 429 Too Many Requests\r\n"
                     "Content-Type: text/plain\r\n"
                     "Retry-After: %llu\r\n"
                     "RateLimit-Policy: \"default\";q=%llu;w=%llu\r\n"
                     "RateLimit: \"default\";r=%llu;t=%llu\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                     (unsigned long long)ceil_secs(d.retry_after_ns),
                     (unsigned long long)cfg->amount, (unsigned long long)window,
                     (unsigned long long)d.remaining,
                     (unsigned long long)ceil_secs(d.reset_after_ns), sizeof body - 1, body);
    }
    /* Responses are small: one blocking-ish write on a fresh socket buffer. */
    if (n > 0) {
        ssize_t off = 0;
        while (off < n) {
            ssize_t w = write(c->fd, out + off, (size_t)(n - off));
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) break;
            off += w;
        }
    }
}

/* Writes all of `out` (responses are small: a fresh socket buffer takes them). */
static void send_all(int fd, const char *out, int n) {
    ssize_t off = 0;
    while (n > 0 && off < n) {
        ssize_t w = write(fd, out + off, (size_t)(n - off));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        off += w;
    }
}

#define MAX_HEADERS 32

/* The request's attributes for the policy: ip, method, path, host and every
 * header as header:<lower-case name>, pointing into the request buffer (the
 * header names are lower-cased in place) and `ip`. Returns the count, or -1 for
 * a malformed request line. */
static int request_attrs(char *req, const char *ip, sluicegate_attr *a, char names[][80]) {
    int n = 0;
    char *line_end = strstr(req, "\r\n");
    char *sp1 = strchr(req, ' ');
    char *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
    if (!line_end || !sp1 || !sp2 || sp2 > line_end) return -1;
    a[n++] = (sluicegate_attr){"ip", 2, ip, strlen(ip)};
    a[n++] = (sluicegate_attr){"method", 6, req, (size_t)(sp1 - req)};
    char *path = sp1 + 1;
    char *query = memchr(path, '?', (size_t)(sp2 - path));
    a[n++] = (sluicegate_attr){"path", 4, path, (size_t)((query ? query : sp2) - path)};
    for (char *h = line_end + 2; n < MAX_HEADERS + 3; ) {
        char *end = strstr(h, "\r\n");
        if (!end || end == h) break;
        char *colon = memchr(h, ':', (size_t)(end - h));
        if (colon && colon > h && (size_t)(colon - h) < sizeof names[0] - 8) {
            char *name = names[n];
            memcpy(name, "header:", 7);
            size_t len = (size_t)(colon - h);
            for (size_t i = 0; i < len; ++i)
                name[7 + i] = (char)((h[i] >= 'A' && h[i] <= 'Z') ? h[i] - 'A' + 'a' : h[i]);
            char *v = colon + 1;
            while (v < end && (*v == ' ' || *v == '\t')) ++v;
            char *ve = end;
            while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t')) --ve;
            a[n] = (sluicegate_attr){name, 7 + len, v, (size_t)(ve - v)};
            if (len == 4 && memcmp(name + 7, "host", 4) == 0 && n < MAX_HEADERS + 3) {
                ++n;
                a[n] = (sluicegate_attr){"host", 4, v, (size_t)(ve - v)};
            }
            ++n;
        }
        h = end + 2;
    }
    return n;
}

static void respond_policy(struct client *c, const sluicegate_policy *policy,
                           sluicegate_policy_decision *d, uint64_t now) {
    char out[4096];
    int n;
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &c->addr, ip, sizeof ip);
    if (strncmp(c->buf, "GET /metrics ", 13) == 0) {
        static char text[65536];
        size_t len = 0;
        sluicegate_policy_metrics_text_at(policy, now, text, sizeof text, &len);
        if (len >= sizeof text) len = sizeof text - 1; /* truncated: still valid lines up to here */
        n = snprintf(out, sizeof out,
                     "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n", len);
        send_all(c->fd, out, n);
        send_all(c->fd, text, (int)len);
        return;
    }
    sluicegate_attr attrs[MAX_HEADERS + 4];
    static char names[MAX_HEADERS + 4][80];
    int count = request_attrs(c->buf, ip, attrs, names);
    sluicegate_policy_result r;
    sluicegate_status s = count < 0 ? SLUICEGATE_ERR_PARSE
                                    : sluicegate_policy_check_at(policy, attrs, (size_t)count, 1,
                                                                 now, d, &r);
    if (s != SLUICEGATE_OK) {
        /* A malformed request, or one whose text is not UTF-8. */
        n = snprintf(out, sizeof out,
                     "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        fprintf(stderr, "bad request: %s\n", sluicegate_status_str(s));
        send_all(c->fd, out, n);
        return;
    }
    char rl[1024], rlp[1024], fields[2200] = "";
    size_t rl_len = 0, rlp_len = 0;
    sluicegate_policy_decision_ratelimit(d, rl, sizeof rl, &rl_len);
    sluicegate_policy_decision_ratelimit_policy(d, rlp, sizeof rlp, &rlp_len);
    if (rlp_len > 0 && rl_len < sizeof rl && rlp_len < sizeof rlp)
        snprintf(fields, sizeof fields, "RateLimit-Policy: %s\r\nRateLimit: %s\r\n", rlp, rl);
    if (r.allowed) {
        n = snprintf(out, sizeof out,
                     "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n%s"
                     "Content-Length: 3\r\nConnection: close\r\n\r\nok\n",
                     fields);
    } else {
        sluicegate_policy_rule rule;
        char body[256];
        if (sluicegate_policy_decision_rule(d, r.denying_rule, &rule) == SLUICEGATE_OK)
            snprintf(body, sizeof body, "rate limit exceeded (rule %.*s)\n", (int)rule.name_len,
                     rule.name);
        else
            snprintf(body, sizeof body, "rate limit exceeded\n");
        n = snprintf(out, sizeof out,
                     "HTTP/1.1 429 Too Many Requests\r\nContent-Type: text/plain\r\n"
                     "Retry-After: %llu\r\n%s"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                     (unsigned long long)ceil_secs(r.retry_after_ns), fields, strlen(body), body);
    }
    send_all(c->fd, out, n);
}

static void drop(struct client *c) {
    close(c->fd);
    c->fd = -1;
    c->len = 0;
}

/* Writes the port to `path` atomically (it appears complete or not at all). */
static int write_port_file(const char *path, unsigned port) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return 0;
    fprintf(f, "%u\n", port);
    fclose(f);
    return rename(tmp, path) == 0;
}

/* What every worker serves with. */
struct setup {
    const char *rate;
    const char *policy_file;
    const char *shared; /* a region name or path, or NULL: this process only */
    unsigned long long capacity;
    double lifetime;
    sluicegate_config cfg;
};

/* One server: builds its limiter (or policy), then answers on `lfd` until
 * stopped or its lifetime is over. Returns the exit code. */
static int serve(int lfd, const struct setup *st) {
    sluicegate_status s;
    sluicegate_policy *policy = NULL;
    sluicegate_policy_decision *decision = NULL;
    static char msg[8192];
    const char *policy_file = st->policy_file;
    if (policy_file) {
        s = sluicegate_policy_new_from_file(policy_file, strlen(policy_file), msg, sizeof msg,
                                            &policy);
        if (s != SLUICEGATE_OK) {
            fprintf(stderr, "cannot load the policy (%s):\n%s\n", sluicegate_status_str(s), msg);
            return 2;
        }
        if (msg[0]) fprintf(stderr, "%s\n", msg); /* warnings */
        if (sluicegate_policy_decision_new(&decision) != SLUICEGATE_OK) return 1;
    }
    sluicegate_keyed *table = NULL;
    if (policy) s = SLUICEGATE_OK;
    else if (st->shared)
        s = sluicegate_keyed_open_shared(st->shared, strlen(st->shared), NULL, &st->cfg,
                                         st->capacity, SLUICEGATE_EVICT_STALEST, msg, sizeof msg,
                                         &table);
    else s = sluicegate_keyed_new(&st->cfg, st->capacity, SLUICEGATE_EVICT_STALEST, &table);
    if (s != SLUICEGATE_OK) {
        char why[160];
        sluicegate_config_validate(&st->cfg, why, sizeof why);
        fprintf(stderr, "cannot build the limiter: %s (%s)\n", sluicegate_status_str(s),
                st->shared ? msg : why);
        return 2;
    }
    /* A shared region's time base is its own, the same in every process. */
    uint64_t (*const clock_ns)(void) = st->shared ? sluicegate_shared_now_ns : sluicegate_now_ns;

    static struct client clients[MAX_CLIENTS];
    for (int i = 0; i < MAX_CLIENTS; ++i) clients[i].fd = -1;
    const double deadline = mono_secs() + st->lifetime;
    unsigned long served = 0;

    while (!stopping && mono_secs() < deadline) {
        struct pollfd pfd[MAX_CLIENTS + 1];
        int idx[MAX_CLIENTS + 1];
        nfds_t n = 0;
        pfd[n].fd = lfd;
        pfd[n].events = POLLIN;
        idx[n++] = -1;
        for (int i = 0; i < MAX_CLIENTS; ++i) {
            if (clients[i].fd >= 0) {
                pfd[n].fd = clients[i].fd;
                pfd[n].events = POLLIN;
                idx[n++] = i;
            }
        }
        int ready = poll(pfd, n, 100);
        if (ready < 0) {
            if (errno == EINTR) continue;
            perror("poll");
            break;
        }
        if (reloading && policy) {
            reloading = 0;
            s = sluicegate_policy_reload_from_file(policy, policy_file, strlen(policy_file), msg,
                                                   sizeof msg);
            if (s == SLUICEGATE_OK)
                printf("policy reloaded from %s%s%s\n", policy_file, msg[0] ? ": " : "", msg);
            else
                printf("policy reload rejected (%s), the rules in force keep running:\n%s\n",
                       sluicegate_status_str(s), msg);
            fflush(stdout);
        }
        /* One clock read for everything this turn decides. */
        const uint64_t now = clock_ns();
        for (nfds_t p = 1; p < n; ++p) {
            if (!(pfd[p].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            struct client *c = &clients[idx[p]];
            ssize_t r = read(c->fd, c->buf + c->len, sizeof c->buf - 1 - c->len);
            if (r <= 0) {
                if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
                drop(c);
                continue;
            }
            c->len += (size_t)r;
            c->buf[c->len] = '\0';
            if (strstr(c->buf, "\r\n\r\n") != NULL) {
                if (policy) respond_policy(c, policy, decision, now);
                else respond(c, table, &st->cfg, now);
                ++served;
                drop(c);
            } else if (c->len >= sizeof c->buf - 1) {
                static const char too_big[] =
                    "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\n"
                    "Connection: close\r\n\r\n";
                if (write(c->fd, too_big, sizeof too_big - 1) < 0) { /* closing anyway */
                }
                drop(c);
            }
        }
        if (pfd[0].revents & POLLIN) {
            for (;;) {
                struct sockaddr_in peer;
                socklen_t plen = sizeof peer;
                /* Workers share the socket: another may have taken the
                 * connection first (EAGAIN). */
                int fd = accept(lfd, (struct sockaddr *)&peer, &plen);
                if (fd < 0) break;
                int slot = -1;
                for (int i = 0; i < MAX_CLIENTS; ++i)
                    if (clients[i].fd < 0) { slot = i; break; }
                if (slot < 0) {
                    close(fd); /* full: shed the connection */
                    continue;
                }
                fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
                clients[slot].fd = fd;
                clients[slot].addr = peer.sin_addr;
                clients[slot].len = 0;
            }
        }
    }
    for (int i = 0; i < MAX_CLIENTS; ++i)
        if (clients[i].fd >= 0) drop(&clients[i]);
    close(lfd);
    sluicegate_keyed_stats stats;
    if (policy)
        printf("served %lu requests under the policy; bye\n", served);
    else if (sluicegate_keyed_get_stats(table, &stats) == SLUICEGATE_OK)
        printf("served %lu requests from %llu client addresses; bye\n", served,
               (unsigned long long)(stats.inserted + stats.reused));
    fflush(stdout);
    sluicegate_keyed_free(table);
    sluicegate_policy_decision_free(decision);
    sluicegate_policy_free(policy);
    return 0;
}

int main(int argc, char **argv) {
    unsigned port = 8080;
    const char *port_file = NULL;
    unsigned workers = 1;
    struct setup st = {"5 per 10 seconds", NULL, NULL, 65536, 30, {0}};
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--port") == 0) port = (unsigned)strtoul(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--rate") == 0) st.rate = argv[i + 1];
        else if (strcmp(argv[i], "--lifetime") == 0) st.lifetime = strtod(argv[i + 1], NULL);
        else if (strcmp(argv[i], "--port-file") == 0) port_file = argv[i + 1];
        else if (strcmp(argv[i], "--capacity") == 0) st.capacity = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--policy") == 0) st.policy_file = argv[i + 1];
        else if (strcmp(argv[i], "--workers") == 0) workers = (unsigned)strtoul(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--shared") == 0) st.shared = argv[i + 1];
        else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (workers < 1 || workers > 64) {
        fprintf(stderr, "--workers must be 1 to 64\n");
        return 2;
    }
    /* Several workers share their limits through a region: one of their own
     * unless --shared names one, removed at exit. */
    static char own_region[64];
    if (workers > 1 && !st.shared && !st.policy_file) {
        snprintf(own_region, sizeof own_region, "http-server-%ld", (long)getpid());
        st.shared = own_region;
    }

    memset(&st.cfg, 0, sizeof st.cfg);
    st.cfg.struct_size = sizeof st.cfg;
    st.cfg.algorithm = SLUICEGATE_TOKEN_BUCKET;
    sluicegate_parse_error perr;
    sluicegate_status s = sluicegate_config_parse(st.rate, strlen(st.rate), &st.cfg, &perr);
    if (s != SLUICEGATE_OK) {
        fprintf(stderr, "bad --rate %s: %s at byte %zu: %s\n", st.rate, sluicegate_status_str(s),
                perr.position, perr.message ? perr.message : "");
        return 2;
    }

    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK); /* 127.0.0.1 only */
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(lfd, 128) != 0) {
        perror("listen");
        return 1;
    }
    socklen_t salen = sizeof sa;
    getsockname(lfd, (struct sockaddr *)&sa, &salen);
    fcntl(lfd, F_SETFL, fcntl(lfd, F_GETFL) | O_NONBLOCK);

    struct sigaction act;
    memset(&act, 0, sizeof act);
    act.sa_handler = on_signal;
    sigaction(SIGINT, &act, NULL);
    sigaction(SIGTERM, &act, NULL);
    sigaction(SIGHUP, &act, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (st.policy_file)
        printf("listening on 127.0.0.1:%u, policy %s", ntohs(sa.sin_port), st.policy_file);
    else
        printf("listening on 127.0.0.1:%u, %s per client IP", ntohs(sa.sin_port), st.rate);
    if (workers > 1) printf(", %u workers", workers);
    if (st.shared) printf(", shared region %s", st.shared);
    printf(" (sluicegate %s)\n", sluicegate_version());
    fflush(stdout);

    int rc = 0;
    if (workers == 1) {
        if (port_file && !write_port_file(port_file, ntohs(sa.sin_port))) return 1;
        rc = serve(lfd, &st);
    } else {
        pid_t pids[64];
        for (unsigned w = 0; w < workers; ++w) {
            pids[w] = fork();
            if (pids[w] < 0) {
                perror("fork");
                stopping = 1;
                workers = w;
                break;
            }
            if (pids[w] == 0) _exit(serve(lfd, &st));
        }
        close(lfd);
        /* The port file appears once every worker is accepting (or about to:
         * the socket is listening already, so no connection is refused). */
        if (!stopping && port_file && !write_port_file(port_file, ntohs(sa.sin_port))) stopping = 1;
        /* Reap the workers; forward SIGTERM/SIGINT to them once (polled, so a
         * signal between two checks is never missed). */
        unsigned left = workers;
        int forwarded = 0;
        while (left > 0) {
            if (stopping && !forwarded) {
                for (unsigned w = 0; w < workers; ++w) kill(pids[w], SIGTERM);
                forwarded = 1;
            }
            int ws = 0;
            pid_t pid = waitpid(-1, &ws, WNOHANG);
            if (pid == 0 || (pid < 0 && errno == EINTR)) {
                const struct timespec tick = {0, 50000000};
                nanosleep(&tick, NULL);
                continue;
            }
            if (pid < 0) break;
            --left;
            if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
                /* A worker failed (e.g. its region could not be opened): stop. */
                if (rc == 0) rc = WIFEXITED(ws) ? WEXITSTATUS(ws) : 1;
                stopping = 1;
            }
        }
        printf("%u workers stopped; bye\n", workers);
    }
    if (st.shared == own_region)
        sluicegate_shared_unlink(own_region, strlen(own_region), NULL, 0);
    return rc;
}
