/*
 * liveness.c - the watch (heartbeats over TCP links to rank 0, in a thread of its own) and the
 * probe (connect to each peer's listening socket) that notice and name dead peers. See
 * liveness.h.
 *
 * Wire format of the watch: frames of four 32-bit words in network order (magic, kind, rank,
 * arg). HELLO (rank, pid) opens a link; BEAT every DDP_LIVENESS_BEAT_S both ways; BYE when a
 * rank is done; GONE (rank, why), from rank 0 only, when a peer died. The thread only reads,
 * sends and polls; it never takes a lock that the main thread may hold (no stdio: its one
 * line goes out with write(2)), so it can always report and _exit.
 */
#include "comm/liveness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/util.h"

#define FRAME_MAGIC 0x64647731u /* "ddw1" */
#define FRAME_BYTES 16

enum frame_kind { FRAME_HELLO = 1, FRAME_BEAT, FRAME_BYE, FRAME_GONE };
enum gone_why { GONE_CLOSED = 1, GONE_SILENT };

struct peer {
    char host[64];
    uint32_t addr; /* IPv4, network order */
    uint16_t port; /* network order; 0 = no socket */
    int32_t pid;
};

/* One watched connection: on rank 0 one per peer (index = rank), elsewhere one to rank 0. */
struct link {
    int fd;       /* -1 when there is none or it was closed */
    int rank;     /* the rank at the other end */
    int bye;      /* it said goodbye: its end closing is not a death */
    double heard; /* ddp_now() when a frame last came */
    unsigned char buf[FRAME_BYTES];
    size_t have; /* bytes of a frame read so far */
};

struct ddp_liveness {
    int fd; /* listening socket, -1 if none */
    int rank, size;
    struct peer *peers; /* (size) */
    struct link *links; /* (nlinks) */
    int nlinks;
    int wake[2]; /* destroy writes a byte to [1]: say goodbye and stop */
    pthread_t thread;
    int running;
};

/* ---- addresses and sockets -------------------------------------------------------------- */

/* The first IPv4 address of an interface that is up and not loopback, or 0. */
static uint32_t interface_address(void)
{
    struct ifaddrs *all = NULL;
    uint32_t a = 0;
    if (getifaddrs(&all) != 0)
        return 0;
    for (struct ifaddrs *i = all; i && !a; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) &&
            !(i->ifa_flags & IFF_LOOPBACK))
            a = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
    freeifaddrs(all);
    return a;
}

/* This host's IPv4 address as its peers would reach it: its name resolved, unless that is a
 * loopback address (Debian maps the host name to 127.0.1.1) and an interface has a real one;
 * else loopback. */
static uint32_t own_address(const char *host)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    uint32_t a = htonl(INADDR_LOOPBACK);
    if (getaddrinfo(host, NULL, &hints, &res) == 0 && res) {
        a = ((struct sockaddr_in *)res->ai_addr)->sin_addr.s_addr;
        freeaddrinfo(res);
    }
    if ((ntohl(a) >> 24) == 127) {
        uint32_t i = interface_address();
        if (i)
            a = i;
    }
    return a;
}

/* A listening socket on any free port; its port in *port (network order). -1 on failure. */
static int listen_socket(uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    socklen_t sl = sizeof sa;
    if (fd >= 0 &&
        (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, SOMAXCONN) != 0 ||
         getsockname(fd, (struct sockaddr *)&sa, &sl) != 0)) {
        close(fd);
        fd = -1;
    }
    *port = fd >= 0 ? sa.sin_port : 0;
    return fd;
}

/* Rank 0 holds one descriptor per peer: raise the soft limit towards the hard one if needed. */
static void ensure_descriptors(int need)
{
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY ||
        r.rlim_cur >= (rlim_t)need + 256)
        return;
    r.rlim_cur = r.rlim_max == RLIM_INFINITY || r.rlim_max > (rlim_t)need + 256 ? (rlim_t)need + 256
                                                                                : r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
}

static void set_link_options(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* a frame leaves at once */
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* ---- frames ----------------------------------------------------------------------------- */

/* Send one frame without blocking; a full or closed connection is the watch's to notice. */
static void send_frame(int fd, int kind, int rank, int arg)
{
    uint32_t w[4] = {htonl(FRAME_MAGIC), htonl((uint32_t)kind), htonl((uint32_t)rank),
                     htonl((uint32_t)arg)};
    if (fd >= 0)
        (void)send(fd, w, sizeof w, MSG_NOSIGNAL | MSG_DONTWAIT);
}

static int decode_frame(const unsigned char *b, int *kind, int *rank, int *arg)
{
    uint32_t w[4];
    memcpy(w, b, sizeof w);
    *kind = (int)ntohl(w[1]);
    *rank = (int)ntohl(w[2]);
    *arg = (int)ntohl(w[3]);
    return ntohl(w[0]) == FRAME_MAGIC ? 0 : -1;
}

/* Read exactly one frame from a non-blocking fd before the time end. 0, or -1. */
static int recv_frame(int fd, unsigned char *b, double end)
{
    size_t have = 0;
    while (have < FRAME_BYTES) {
        ssize_t k = recv(fd, b + have, FRAME_BYTES - have, 0);
        if (k > 0) {
            have += (size_t)k;
            continue;
        }
        if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            return -1;
        double left = end - ddp_now();
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, (int)(left * 1000) + 1) < 0)
            return -1;
    }
    return 0;
}

/* ---- setup of the watch ----------------------------------------------------------------- */

/* A non-zero rank: connect to rank 0 and introduce itself. 0, or -1 with a reason. */
static int watch_connect(ddp_liveness *l, char *why, size_t len)
{
    const struct peer *p = &l->peers[0];
    if (p->port == 0)
        return ddp_err(why, len, "rank 0 has no liveness socket");
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return ddp_err(why, len, "socket: %s", strerror(errno));
    struct sockaddr_in sa = {
        .sin_family = AF_INET, .sin_port = p->port, .sin_addr.s_addr = p->addr};
    char a[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &sa.sin_addr, a, sizeof a);
    int e = 0;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        e = errno;
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        socklen_t el = sizeof e;
        if (e == EINPROGRESS && poll(&pf, 1, (int)(DDP_LIVENESS_SETUP_S * 1000)) == 1)
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el);
        else if (e == EINPROGRESS)
            e = ETIMEDOUT;
    }
    if (e != 0) {
        close(fd);
        return ddp_err(why, len, "cannot connect to rank 0 at %s:%d: %s", a, (int)ntohs(p->port),
                       strerror(e));
    }
    set_link_options(fd);
    send_frame(fd, FRAME_HELLO, l->rank, (int)getpid());
    l->links = ddp_calloc(1, sizeof *l->links);
    l->nlinks = 1;
    l->links[0].fd = fd;
    l->links[0].rank = 0;
    return 0;
}

/* Rank 0: accept one link from every other rank, each opened by a HELLO that matches the
 * table (a stray connection, e.g. a probe, is closed). 0, or -1 with a reason. */
static int watch_accept(ddp_liveness *l, char *why, size_t len)
{
    ensure_descriptors(l->size);
    l->nlinks = l->size;
    l->links = ddp_calloc((size_t)l->size, sizeof *l->links);
    for (int r = 0; r < l->size; r++) {
        l->links[r].fd = -1;
        l->links[r].rank = r;
    }
    const double end = ddp_now() + DDP_LIVENESS_SETUP_S;
    for (int got = 0; got < l->size - 1;) {
        double left = end - ddp_now();
        struct pollfd p = {.fd = l->fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, (int)(left * 1000) + 1) < 0)
            return ddp_err(why, len, "%d of %d ranks connected within %g s", got, l->size - 1,
                           DDP_LIVENESS_SETUP_S);
        int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE)
                return ddp_err(why, len, "accept: %s", strerror(errno));
            continue;
        }
        unsigned char b[FRAME_BYTES];
        int kind, r, pid;
        double hello_end = ddp_now() + 2.0 < end ? ddp_now() + 2.0 : end;
        if (recv_frame(fd, b, hello_end) != 0 || decode_frame(b, &kind, &r, &pid) != 0 ||
            kind != FRAME_HELLO || r <= 0 || r >= l->size || l->links[r].fd >= 0 ||
            pid != l->peers[r].pid) {
            close(fd);
            continue;
        }
        set_link_options(fd);
        l->links[r].fd = fd;
        got++;
    }
    return 0;
}

static void close_links(ddp_liveness *l)
{
    for (int k = 0; k < l->nlinks; k++)
        if (l->links[k].fd >= 0) {
            close(l->links[k].fd);
            l->links[k].fd = -1;
        }
}

static void *watch_main(void *arg);

/* Start the thread with every signal blocked: signals stay the main thread's business. */
static int start_thread(ddp_liveness *l)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&l->thread, NULL, watch_main, l);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

/* Collective: open the links, agree that every rank has them, start the thread. When any
 * rank failed, all close their links (no thread runs yet, so nobody takes that for a death). */
static void watch_setup(ddp_liveness *l, ddp_comm *c)
{
    char why[256] = "";
    int rc = l->fd < 0      ? ddp_err(why, sizeof why, "no listening socket")
             : l->rank == 0 ? watch_accept(l, why, sizeof why)
                            : watch_connect(l, why, sizeof why);
    if (rc == 0 && pipe2(l->wake, O_CLOEXEC) != 0) {
        l->wake[0] = l->wake[1] = -1;
        rc = ddp_err(why, sizeof why, "pipe: %s", strerror(errno));
    }
    int64_t bad = rc != 0;
    ddp_comm_allreduce(c, &bad, 1, DDP_I64);
    if (rc != 0)
        ddp_warn("liveness watch: %s", why);
    if (bad != 0) {
        close_links(l);
        if (l->rank == 0)
            ddp_warn("liveness watch off on %lld rank%s: a dead peer is noticed only when a "
                     "collective fails or at [dist] timeout_s",
                     (long long)bad, bad > 1 ? "s" : "");
        return;
    }
    double now = ddp_now();
    for (int k = 0; k < l->nlinks; k++)
        l->links[k].heard = now;
    if (start_thread(l) != 0)
        ddp_die("cannot start the liveness thread: %s", strerror(errno));
    l->running = 1;
}

ddp_liveness *ddp_liveness_create(ddp_comm *c, const char *host)
{
    int size = ddp_comm_size(c);
    struct peer me;
    memset(&me, 0, sizeof me);
    int fd = listen_socket(&me.port);
    if (fd >= 0) {
        snprintf(me.host, sizeof me.host, "%s", host);
        me.addr = own_address(host);
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
    l->wake[0] = l->wake[1] = -1;
    if (size > 1)
        watch_setup(l, c);
    return l;
}

void ddp_liveness_destroy(ddp_liveness *l)
{
    if (!l)
        return;
    if (l->running) {
        char b = 1;
        while (write(l->wake[1], &b, 1) < 0 && errno == EINTR)
            ;
        pthread_join(l->thread, NULL); /* bounded: the goodbye lingers at most LINGER_S */
    }
    close_links(l);
    for (int i = 0; i < 2; i++)
        if (l->wake[i] >= 0)
            close(l->wake[i]);
    if (l->fd >= 0)
        close(l->fd);
    free(l->links);
    free(l->peers);
    free(l);
}

/* ---- the watch thread ------------------------------------------------------------------- */

/* Wait up to DDP_LIVENESS_LINGER_S for the open links except skip's to close at the other end,
 * discarding what they send, so that our last frame is read before any reset. */
static void linger(ddp_liveness *l, int skip)
{
    struct pollfd *pf = ddp_calloc((size_t)l->nlinks, sizeof *pf);
    const double end = ddp_now() + DDP_LIVENESS_LINGER_S;
    for (;;) {
        int open = 0;
        for (int k = 0; k < l->nlinks; k++) {
            int fd = l->links[k].rank == skip ? -1 : l->links[k].fd;
            pf[k] = (struct pollfd){.fd = fd, .events = POLLIN};
            open += fd >= 0;
        }
        double left = end - ddp_now();
        if (!open || left <= 0 || poll(pf, (nfds_t)l->nlinks, (int)(left * 1000) + 1) < 0)
            break;
        for (int k = 0; k < l->nlinks; k++) {
            unsigned char junk[256];
            if (pf[k].fd < 0 || !pf[k].revents)
                continue;
            ssize_t got = recv(pf[k].fd, junk, sizeof junk, 0);
            if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
                close(l->links[k].fd);
                l->links[k].fd = -1;
            }
        }
    }
    free(pf);
}

/* A peer is gone: rank 0 tells the others first; print one line, wait briefly for the others
 * to take the notice, leave with DDP_EXIT_PEER. by: the rank that noticed it. */
static void __attribute__((noreturn)) gone(ddp_liveness *l, int r, int why, int by)
{
    if (l->rank == 0)
        for (int k = 0; k < l->nlinks; k++) {
            struct link *x = &l->links[k];
            if (x->rank == r || x->fd < 0 || x->bye)
                continue;
            send_frame(x->fd, FRAME_GONE, r, why);
            shutdown(x->fd, SHUT_WR);
        }
    const struct peer *p = r >= 0 && r < l->size ? &l->peers[r] : NULL;
    char line[640];
    int n = snprintf(line, sizeof line, "ddptrain: %s rank %d: peer gone: rank %d on %s (pid %d) ",
                     l->peers[l->rank].host, l->rank, r, p ? p->host : "?", p ? (int)p->pid : 0);
    if (why == GONE_SILENT)
        n += snprintf(line + n, sizeof line - (size_t)n,
                      "is unresponsive: no heartbeat for %g s (the process is stopped or hung, "
                      "or its node is gone)",
                      DDP_LIVENESS_LOST_S);
    else
        n += snprintf(line + n, sizeof line - (size_t)n,
                      "closed its connection without saying goodbye (it exited on an error or "
                      "was killed)");
    if (by != l->rank)
        n += snprintf(line + n, sizeof line - (size_t)n, "; noticed by rank %d", by);
    snprintf(line + n, sizeof line - (size_t)n, "; exiting %d\n", DDP_EXIT_PEER);
    ssize_t w = write(STDERR_FILENO, line, strlen(line));
    (void)w;
    if (l->rank == 0)
        linger(l, r);
    _exit(DDP_EXIT_PEER);
}

/* Read what link k has; act on each whole frame. Returns -1 when the link closed without a
 * goodbye, else 0 (a BYE closes the link). A GONE notice from rank 0 does not return. */
static int link_read(ddp_liveness *l, struct link *x, double now)
{
    for (;;) {
        ssize_t k = recv(x->fd, x->buf + x->have, FRAME_BYTES - x->have, 0);
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return 0;
        if (k <= 0)
            return -1; /* closed or reset, and no BYE came first */
        x->heard = now;
        x->have += (size_t)k;
        if (x->have < FRAME_BYTES)
            continue;
        x->have = 0;
        int kind, r, arg;
        if (decode_frame(x->buf, &kind, &r, &arg) != 0)
            return -1; /* not our peer speaking: treat as a broken link */
        if (kind == FRAME_GONE && l->rank != 0 && x->rank == 0)
            gone(l, r, arg == GONE_SILENT ? GONE_SILENT : GONE_CLOSED, 0);
        if (kind == FRAME_BYE) {
            x->bye = 1;
            close(x->fd);
            x->fd = -1;
            return 0;
        }
    }
}

/* Say goodbye on every open link and wait briefly for the other ends to close. */
static void goodbye(ddp_liveness *l)
{
    for (int k = 0; k < l->nlinks; k++) {
        struct link *x = &l->links[k];
        if (x->fd < 0)
            continue;
        send_frame(x->fd, FRAME_BYE, l->rank, 0);
        shutdown(x->fd, SHUT_WR);
    }
    linger(l, -1);
}

/* One turn: beat if due, then wait for frames, a new connection or the wake pipe until the
 * next beat. Returns 1 when destroy asked to stop. */
static int watch_turn(ddp_liveness *l, struct pollfd *pf, double *next_beat)
{
    double now = ddp_now();
    if (now >= *next_beat) {
        for (int k = 0; k < l->nlinks; k++)
            if (l->links[k].fd >= 0)
                send_frame(l->links[k].fd, FRAME_BEAT, l->rank, 0);
        *next_beat = now + DDP_LIVENESS_BEAT_S;
    }
    pf[0] = (struct pollfd){.fd = l->wake[0], .events = POLLIN};
    pf[1] = (struct pollfd){.fd = l->rank == 0 ? l->fd : -1, .events = POLLIN};
    for (int k = 0; k < l->nlinks; k++)
        pf[2 + k] = (struct pollfd){.fd = l->links[k].fd, .events = POLLIN};
    int ms = (int)((*next_beat - now) * 1000) + 1;
    if (poll(pf, (nfds_t)l->nlinks + 2, ms) < 0)
        return 0;
    if (pf[0].revents)
        return 1;
    if (pf[1].revents & POLLIN) { /* a probe's connection: it only needed the handshake */
        int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0)
            close(fd);
    }
    const double start = now;
    now = ddp_now();
    /* This thread itself did not run for a while (the whole job suspended, e.g. scontrol
     * suspend, or this process stopped): the silence is ours, not the peers'. */
    if (now - start > ms / 1000.0 + DDP_LIVENESS_LOST_S / 2)
        for (int k = 0; k < l->nlinks; k++)
            l->links[k].heard = now;
    for (int k = 0; k < l->nlinks; k++) {
        struct link *x = &l->links[k];
        if (x->fd >= 0 && pf[2 + k].revents && link_read(l, x, now) != 0)
            gone(l, x->rank, GONE_CLOSED, l->rank);
    }
    for (int k = 0; k < l->nlinks; k++) {
        struct link *x = &l->links[k];
        if (x->fd >= 0 && !x->bye && now - x->heard > DDP_LIVENESS_LOST_S)
            gone(l, x->rank, GONE_SILENT, l->rank);
    }
    return 0;
}

static void *watch_main(void *arg)
{
    ddp_liveness *l = arg;
    struct pollfd *pf = ddp_calloc((size_t)l->nlinks + 2, sizeof *pf);
    double next_beat = 0;
    while (!watch_turn(l, pf, &next_beat))
        ;
    free(pf);
    goodbye(l);
    return NULL;
}

/* ---- the probe -------------------------------------------------------------------------- */

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
        struct sockaddr_in sa = {
            .sin_family = AF_INET, .sin_port = p->port, .sin_addr.s_addr = p->addr};
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
