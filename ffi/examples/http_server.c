/* A small HTTP/1.1 server in plain C that rate-limits each client IP address
 * with a sluicegate keyed limiter, over poll(2). It listens on 127.0.0.1 only.
 *
 *   http_server [--port N] [--rate "5 per 10 seconds"] [--lifetime SECONDS]
 *               [--port-file PATH] [--capacity KEYS]
 *
 * Every response carries the IETF httpapi RateLimit fields:
 *   RateLimit-Policy: "default";q=<limit>;w=<window seconds>
 *   RateLimit: "default";r=<remaining>;t=<seconds until full>
 * and a denied request gets 429 with Retry-After (whole seconds, rounded up).
 *
 * The clock is read once per event-loop turn (sluicegate_now_ns) and passed to
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
static void on_signal(int sig) {
    (void)sig;
    stopping = 1;
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

static void drop(struct client *c) {
    close(c->fd);
    c->fd = -1;
    c->len = 0;
}

int main(int argc, char **argv) {
    unsigned port = 8080;
    const char *rate = "5 per 10 seconds";
    const char *port_file = NULL;
    double lifetime = 30;
    unsigned long long capacity = 65536;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--port") == 0) port = (unsigned)strtoul(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--rate") == 0) rate = argv[i + 1];
        else if (strcmp(argv[i], "--lifetime") == 0) lifetime = strtod(argv[i + 1], NULL);
        else if (strcmp(argv[i], "--port-file") == 0) port_file = argv[i + 1];
        else if (strcmp(argv[i], "--capacity") == 0) capacity = strtoull(argv[i + 1], NULL, 10);
        else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }

    sluicegate_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.struct_size = sizeof cfg;
    cfg.algorithm = SLUICEGATE_TOKEN_BUCKET;
    sluicegate_parse_error perr;
    sluicegate_status s = sluicegate_config_parse(rate, strlen(rate), &cfg, &perr);
    if (s != SLUICEGATE_OK) {
        fprintf(stderr, "bad --rate %s: %s at byte %zu: %s\n", rate, sluicegate_status_str(s),
                perr.position, perr.message ? perr.message : "");
        return 2;
    }
    sluicegate_keyed *table = NULL;
    s = sluicegate_keyed_new(&cfg, capacity, SLUICEGATE_EVICT_STALEST, &table);
    if (s != SLUICEGATE_OK) {
        char why[160];
        sluicegate_config_validate(&cfg, why, sizeof why);
        fprintf(stderr, "cannot build the limiter: %s (%s)\n", sluicegate_status_str(s), why);
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
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(lfd, 64) != 0) {
        perror("listen");
        return 1;
    }
    socklen_t salen = sizeof sa;
    getsockname(lfd, (struct sockaddr *)&sa, &salen);
    fcntl(lfd, F_SETFL, fcntl(lfd, F_GETFL) | O_NONBLOCK);
    printf("listening on 127.0.0.1:%u, %s per client IP (sluicegate %s)\n", ntohs(sa.sin_port),
           rate, sluicegate_version());
    fflush(stdout);
    if (port_file) {
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", port_file);
        FILE *f = fopen(tmp, "w");
        if (!f) return 1;
        fprintf(f, "%u\n", ntohs(sa.sin_port));
        fclose(f);
        rename(tmp, port_file); /* appears complete or not at all */
    }

    struct sigaction act;
    memset(&act, 0, sizeof act);
    act.sa_handler = on_signal;
    sigaction(SIGINT, &act, NULL);
    sigaction(SIGTERM, &act, NULL);
    signal(SIGPIPE, SIG_IGN);

    static struct client clients[MAX_CLIENTS];
    for (int i = 0; i < MAX_CLIENTS; ++i) clients[i].fd = -1;
    const double deadline = mono_secs() + lifetime;
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
        /* One clock read for everything this turn decides. */
        const uint64_t now = sluicegate_now_ns();
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
                respond(c, table, &cfg, now);
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
    sluicegate_keyed_stats st;
    if (sluicegate_keyed_get_stats(table, &st) == SLUICEGATE_OK)
        printf("served %lu requests from %llu client addresses; bye\n", served,
               (unsigned long long)(st.inserted + st.reused));
    sluicegate_keyed_free(table);
    return 0;
}
