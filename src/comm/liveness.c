/* liveness.c - naming dead peers by probing their listening sockets. See liveness.h. */
#include "comm/liveness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util.h"

struct peer {
    char host[64];
    uint32_t addr; /* IPv4, network order */
    uint16_t port; /* network order */
    int32_t pid;
};

struct ddp_liveness {
    int fd;
    int rank, size;
    struct peer *peers;
};

/* This host's IPv4 address as its peers would reach it: its name resolved, else loopback. */
static uint32_t own_address(const char *host)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    uint32_t a = htonl(INADDR_LOOPBACK);
    if (getaddrinfo(host, NULL, &hints, &res) == 0 && res) {
        a = ((struct sockaddr_in *)res->ai_addr)->sin_addr.s_addr;
        freeaddrinfo(res);
    }
    return a;
}

ddp_liveness *ddp_liveness_create(ddp_comm *c, const char *host)
{
    int size = ddp_comm_size(c);
    struct peer me;
    memset(&me, 0, sizeof me);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    socklen_t sl = sizeof sa;
    if (fd >= 0 && (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 64) != 0 ||
                    getsockname(fd, (struct sockaddr *)&sa, &sl) != 0)) {
        close(fd);
        fd = -1;
    }
    if (fd >= 0) {
        snprintf(me.host, sizeof me.host, "%s", host);
        me.addr = own_address(host);
        me.port = sa.sin_port;
        me.pid = (int32_t)getpid();
    }
    /* every rank takes part even without a socket (port 0 = not probeable) */
    struct peer *all = ddp_calloc((size_t)size, sizeof *all);
    ddp_comm_allgather(c, &me, all, sizeof me);
    ddp_liveness *l = ddp_calloc(1, sizeof *l);
    l->fd = fd;
    l->rank = ddp_comm_rank(c);
    l->size = size;
    l->peers = all;
    return l;
}

void ddp_liveness_destroy(ddp_liveness *l)
{
    if (!l)
        return;
    if (l->fd >= 0)
        close(l->fd);
    free(l->peers);
    free(l);
}

void ddp_liveness_probe(void *ctx, char *buf, size_t len)
{
    ddp_liveness *l = ctx;
    buf[0] = '\0';
    if (!l)
        return;
    int n = l->size;
    int *fds = ddp_malloc(sizeof(int) * (size_t)n);
    int *dead = ddp_calloc((size_t)n, sizeof(int));
    struct pollfd *pf = ddp_calloc((size_t)n, sizeof *pf);
    char me[64];
    snprintf(me, sizeof me, "%s", l->peers[l->rank].host);
    for (int r = 0; r < n; r++) {
        fds[r] = -1;
        struct peer *p = &l->peers[r];
        if (r == l->rank || p->port == 0)
            continue;
        if (strcmp(p->host, me) == 0 && p->pid > 0 && kill(p->pid, 0) != 0 && errno == ESRCH) {
            dead[r] = 1;
            continue;
        }
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = p->port,
                                 .sin_addr.s_addr = p->addr};
        if (fd < 0)
            continue;
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
            close(fd);
            continue;
        }
        if (errno == ECONNREFUSED) {
            dead[r] = 1;
            close(fd);
            continue;
        }
        fds[r] = fd;
        pf[r].fd = fd;
        pf[r].events = POLLOUT;
    }
    double end = ddp_now() + DDP_LIVENESS_PROBE_S;
    for (;;) {
        int pending = 0;
        for (int r = 0; r < n; r++)
            if (fds[r] >= 0) {
                pending = 1;
                pf[r].fd = fds[r];
            } else {
                pf[r].fd = -1;
            }
        double left = end - ddp_now();
        if (!pending || left <= 0)
            break;
        if (poll(pf, (nfds_t)n, (int)(left * 1000) + 1) <= 0)
            continue;
        for (int r = 0; r < n; r++) {
            if (fds[r] < 0 || !(pf[r].revents & (POLLOUT | POLLERR | POLLHUP)))
                continue;
            int e = 0;
            socklen_t el = sizeof e;
            getsockopt(fds[r], SOL_SOCKET, SO_ERROR, &e, &el);
            if (e == ECONNREFUSED || e == EHOSTUNREACH || e == ENETUNREACH)
                dead[r] = 1;
            close(fds[r]);
            fds[r] = -1;
        }
    }
    size_t used = 0;
    int count = 0;
    for (int r = 0; r < n; r++) {
        if (fds[r] >= 0)
            close(fds[r]);
        if (!dead[r] || used + 1 >= len)
            continue;
        used += (size_t)snprintf(buf + used, len - used, "%srank %d on %s (pid %d)",
                                 count ? ", " : "", r, l->peers[r].host, (int)l->peers[r].pid);
        count++;
    }
    free(fds);
    free(dead);
    free(pf);
}
