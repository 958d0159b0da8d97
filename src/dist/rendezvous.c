/*
 * rendezvous.c - the TCP way of the bootstrap (bootstrap.h): rank 0 serves its blob on
 * master_port, every other rank fetches it from master_addr:master_port.
 *
 * Wire format (integers big-endian u32):
 *   peer -> rank 0  hello  "DDPB" version seq rank world_size len token[128]
 *   rank 0 -> peer  reply  "DDPR" status detail len token[128], then len blob bytes (status OK)
 *   peer -> rank 0  ack    one byte 'A' once the blob is in, then the peer closes
 * status: OK, LATER (the peer is already at the next call while rank 0 still serves this
 * one: it retries), or a refusal (another job's token, another world size, length or an
 * earlier call, a rank out of range or already taken); detail carries rank 0's value.
 *
 * Every socket is non-blocking; every wait is one poll() bounded by the call's deadline.
 * Rank 0 serves any number of peers at once from one poll set; a connection that sends no
 * hello within HELLO_IDLE_S is dropped so that strays cannot hold a slot. Leaves choosing the
 * way, the token and the call number to bootstrap.c.
 */
#include "dist/bootstrap_impl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "core/util.h"

#define PROTO_VERSION 1u
#define TOKEN_FIELD 128 /* DDP_BOOTSTRAP_TOKEN_MAX + NUL */
#define HELLO_SIZE (4 + 5 * 4 + TOKEN_FIELD)
#define REPLY_SIZE (4 + 3 * 4 + TOKEN_FIELD)
/* A connection that has not sent its whole hello after this long is a stray: dropped. */
#define HELLO_IDLE_S 10.0
/* Connections rank 0 keeps open beyond one per peer, for strays and retries. */
#define STRAY_SLOTS 16
/* File descriptors left to the rest of the process when rank 0 sizes its poll set. */
#define FD_RESERVE 32
/* Longest wait for one connect() before it is abandoned and retried. */
#define CONNECT_ATTEMPT_S 5.0
/* Backoff between connection attempts of a peer: from 20 ms, doubling, up to 1 s. */
#define RETRY_MIN_S 0.02
#define RETRY_MAX_S 1.0
/* Longest single poll() of rank 0, so that stray hello deadlines are checked. */
#define SERVE_TICK_MS 500

enum status {
    ST_OK = 0,
    ST_STRANGER = 1, /* another job's token */
    ST_WORLD = 2,    /* detail: rank 0's world size */
    ST_LEN = 3,      /* detail: rank 0's blob length */
    ST_RANK = 4,     /* rank outside 1..world_size-1 */
    ST_DUP = 5,      /* rank already taken */
    ST_SEQ = 6,      /* detail: rank 0's call number */
    ST_VERSION = 7,  /* detail: rank 0's protocol version */
    ST_LATER = 8,    /* the peer is already at a later call: retry (detail: rank 0's call) */
};

static void put32(unsigned char *p, uint32_t v)
{
    v = htonl(v);
    memcpy(p, &v, 4);
}

static uint32_t get32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return ntohl(v);
}

/* Milliseconds until deadline for poll(): at least 0, at most cap_ms. */
static int ms_left(double deadline, int cap_ms)
{
    double left = (deadline - ddp_now()) * 1e3;
    if (left <= 0)
        return 0;
    return left > cap_ms ? cap_ms : (int)left + 1;
}

/* Wait until fd is ready for ev or the deadline passes: 1 ready, 0 timed out, -1 error. */
static int wait_fd(int fd, short ev, double deadline)
{
    for (;;) {
        struct pollfd p = {fd, ev, 0};
        int ms = ms_left(deadline, 1000);
        int rc = poll(&p, 1, ms);
        if (rc > 0)
            return 1;
        if (rc < 0 && errno != EINTR)
            return -1;
        if (rc == 0 && ddp_now() >= deadline)
            return 0;
    }
}

/* Sleep s seconds, or less when the deadline comes first. */
static void nap(double s, double deadline)
{
    double left = deadline - ddp_now();
    if (s > left)
        s = left;
    if (s <= 0)
        return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Send all n bytes of buf on a non-blocking socket before the deadline: 0, or -1 with why. */
static int send_all(int fd, const void *buf, size_t n, double deadline, const char **why)
{
    const unsigned char *p = buf;
    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k > 0) {
            p += k;
            n -= (size_t)k;
            continue;
        }
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int rc = wait_fd(fd, POLLOUT, deadline);
            if (rc == 1)
                continue;
            *why = rc == 0 ? "timed out" : strerror(errno);
            return -1;
        }
        *why = strerror(errno);
        return -1;
    }
    return 0;
}

/* Receive exactly n bytes before the deadline: 0, or -1 with why ("closed" on EOF). */
static int recv_all(int fd, void *buf, size_t n, double deadline, const char **why)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t k = recv(fd, p, n, 0);
        if (k > 0) {
            p += k;
            n -= (size_t)k;
            continue;
        }
        if (k == 0) {
            *why = "closed";
            return -1;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            int rc = wait_fd(fd, POLLIN, deadline);
            if (rc == 1)
                continue;
            *why = rc == 0 ? "timed out" : strerror(errno);
            return -1;
        }
        *why = strerror(errno);
        return -1;
    }
    return 0;
}

/* Numeric text of a socket address ("10.0.0.1", "::1"). */
static void addr_text(const struct sockaddr *sa, socklen_t salen, char *out, size_t outlen)
{
    if (getnameinfo(sa, salen, out, (socklen_t)outlen, NULL, 0, NI_NUMERICHOST) != 0)
        snprintf(out, outlen, "?");
}

/* A token field as text (at most TOKEN_FIELD - 1 printable characters). */
static void token_text(const unsigned char *field, char *out)
{
    size_t i = 0;
    for (; i < TOKEN_FIELD - 1 && field[i]; i++)
        out[i] = field[i] >= 0x20 && field[i] < 0x7f ? (char)field[i] : '?';
    out[i] = '\0';
}

/* ---------------------------------------------------------------- rank 0: serve the blob */

enum conn_state { C_HELLO, C_REPLY, C_ACK };

struct conn {
    int fd;
    enum conn_state state;
    unsigned char in[HELLO_SIZE]; /* hello being read */
    size_t got;
    unsigned char reply[REPLY_SIZE];
    size_t sent;   /* bytes of reply + blob sent */
    size_t total;  /* bytes of reply + blob to send */
    int rank;      /* rank claimed by a valid hello, -1 before */
    int closing;   /* a refusal: close once sent */
    double opened; /* for HELLO_IDLE_S */
    char peer[64]; /* address, for messages */
};

struct server {
    const struct ddp_world *w;
    const char *token;
    unsigned seq;
    const unsigned char *blob;
    size_t len;
    unsigned char *state; /* per rank: 0 absent, 1 connected, 2 acknowledged */
    int acked;
    struct conn *conns;
    int nconns, maxconns;
    int warned_stranger;
};

/* Raise the soft descriptor limit to the hard one (rank 0 holds one socket per peer). */
static rlim_t raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 1024;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            getrlimit(RLIMIT_NOFILE, &rl);
    }
    return rl.rlim_cur;
}

/* Listen on port (all addresses, IPv6 dual-stack when available, else IPv4). Returns the
 * socket, or -1 with one line in err. */
static int listen_on(const struct ddp_world *w, int port, char *err, size_t errlen)
{
    int fam[2] = {AF_INET6, AF_INET};
    int last = 0;
    for (int i = 0; i < 2; i++) {
        int fd = socket(fam[i], SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            last = errno;
            continue;
        }
        int one = 1, zero = 0;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        struct sockaddr_storage ss;
        socklen_t sl;
        memset(&ss, 0, sizeof ss);
        if (fam[i] == AF_INET6) {
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
            struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
            a->sin6_family = AF_INET6;
            a->sin6_addr = in6addr_any;
            a->sin6_port = htons((uint16_t)port);
            sl = sizeof *a;
        } else {
            struct sockaddr_in *a = (struct sockaddr_in *)&ss;
            a->sin_family = AF_INET;
            a->sin_addr.s_addr = htonl(INADDR_ANY);
            a->sin_port = htons((uint16_t)port);
            sl = sizeof *a;
        }
        if (bind(fd, (struct sockaddr *)&ss, sl) == 0 && listen(fd, SOMAXCONN) == 0)
            return fd;
        last = errno;
        close(fd);
        if (last == EADDRINUSE)
            return ddp_err(err, errlen,
                           "port %d on %s is in use: another job? set [dist] port "
                           "or MASTER_PORT",
                           port, w->host);
        if (last == EACCES)
            return ddp_err(err, errlen,
                           "port %d on %s: permission denied (ports below 1024 "
                           "need root): set [dist] port or MASTER_PORT to 1024..65535",
                           port, w->host);
    }
    return ddp_err(err, errlen, "cannot listen on port %d on %s for the TCP rendezvous: %s", port,
                   w->host, strerror(last));
}

/* Warn when master_addr is not an address of this host: the peers would look elsewhere. */
static void check_master_is_here(const struct ddp_world *w)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_flags = AI_NUMERICHOST;
    hints.ai_socktype = SOCK_DGRAM;
    if (getaddrinfo(w->master_addr, NULL, &hints, &res) != 0 || !res)
        return;
    int fd = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
        if (bind(fd, res->ai_addr, res->ai_addrlen) != 0 && errno == EADDRNOTAVAIL)
            ddp_warn("warning: master address %s%s%s%s is not an address of this host (%s), "
                     "where rank 0 runs: the other ranks will look for the rendezvous there; "
                     "set MASTER_ADDR to this host",
                     w->master_addr, strcmp(w->master_host, w->master_addr) ? " (" : "",
                     strcmp(w->master_host, w->master_addr) ? w->master_host : "",
                     strcmp(w->master_host, w->master_addr) ? ")" : "", w->host);
        close(fd);
    }
    freeaddrinfo(res);
}

static void conn_close(struct server *s, int i)
{
    struct conn *c = &s->conns[i];
    if (c->rank > 0 && s->state[c->rank] == 1)
        s->state[c->rank] = 0; /* left before acknowledging: it may come back */
    close(c->fd);
    s->conns[i] = s->conns[--s->nconns];
}

/* Queue a reply with status and detail (and the blob when OK). */
static void conn_reply(struct server *s, struct conn *c, enum status st, uint32_t detail)
{
    memset(c->reply, 0, sizeof c->reply);
    memcpy(c->reply, "DDPR", 4);
    put32(c->reply + 4, st);
    put32(c->reply + 8, detail);
    put32(c->reply + 12, st == ST_OK ? (uint32_t)s->len : 0);
    snprintf((char *)c->reply + 16, TOKEN_FIELD, "%s", s->token);
    c->state = C_REPLY;
    c->sent = 0;
    c->total = REPLY_SIZE + (st == ST_OK ? s->len : 0);
    c->closing = st != ST_OK;
}

/* A whole hello arrived on c: validate it and queue the answer. Returns 0, or -1 with err
 * when the hello shows that this job itself is launched wrong (rank 0 stops). */
static int conn_hello(struct server *s, struct conn *c, char *err, size_t errlen)
{
    const struct ddp_world *w = s->w;
    char tok[TOKEN_FIELD];
    uint32_t version = get32(c->in + 4), seq = get32(c->in + 8), rank = get32(c->in + 12),
             size = get32(c->in + 16), len = get32(c->in + 20);
    token_text(c->in + 24, tok);
    if (version != PROTO_VERSION) {
        conn_reply(s, c, ST_VERSION, PROTO_VERSION);
        return 0;
    }
    if (strcmp(tok, s->token) != 0) {
        if (!s->warned_stranger++)
            ddp_warn("warning: refused a rendezvous connection from %s with job token '%s' "
                     "(this job is '%s'): another job is using port %d",
                     c->peer, tok, s->token, w->master_port);
        conn_reply(s, c, ST_STRANGER, 0);
        return 0;
    }
    /* A peer that finished the previous call may already be at the next one while rank 0
     * still serves the others: not an error, it comes back. One from an earlier call is. */
    if (seq > s->seq) {
        conn_reply(s, c, ST_LATER, s->seq);
        return 0;
    }
    if (seq != s->seq) {
        conn_reply(s, c, ST_SEQ, s->seq);
        return ddp_err(err, errlen,
                       "TCP rendezvous: rank %u (at %s) is at bootstrap call #%u, "
                       "rank 0 at #%u; the ranks run different programs or versions",
                       rank, c->peer, seq + 1, s->seq + 1);
    }
    if (size != (uint32_t)w->world_size) {
        conn_reply(s, c, ST_WORLD, (uint32_t)w->world_size);
        return ddp_err(err, errlen,
                       "TCP rendezvous: a peer at %s (rank %u) has world size %u, "
                       "rank 0 has %d; every rank must be started with the same WORLD_SIZE",
                       c->peer, rank, size, w->world_size);
    }
    if (rank == 0 || rank >= (uint32_t)w->world_size) {
        conn_reply(s, c, ST_RANK, 0);
        return ddp_err(err, errlen,
                       "TCP rendezvous: a peer at %s claims rank %u, outside "
                       "1..%d; the launch gives two processes rank 0 or a rank out of range",
                       c->peer, rank, w->world_size - 1);
    }
    if (len != s->len) {
        conn_reply(s, c, ST_LEN, (uint32_t)s->len);
        return ddp_err(err, errlen,
                       "TCP rendezvous: rank %u (at %s) expects %u bytes, rank 0 "
                       "publishes %zu; the ranks run different programs or versions",
                       rank, c->peer, len, s->len);
    }
    if (s->state[rank] != 0) {
        conn_reply(s, c, ST_DUP, 0);
        return ddp_err(err, errlen,
                       "TCP rendezvous: two processes claim rank %u (the second "
                       "from %s); the launch gave two processes the same RANK",
                       rank, c->peer);
    }
    s->state[rank] = 1;
    c->rank = (int)rank;
    conn_reply(s, c, ST_OK, 0);
    return 0;
}

/* Make progress on connection i after poll said it is ready. Returns 1 when it is to be
 * closed, 0 to keep it, -1 with err when rank 0 must stop. */
static int conn_step(struct server *s, int i, char *err, size_t errlen)
{
    struct conn *c = &s->conns[i];
    for (;;) {
        if (c->state == C_HELLO) {
            ssize_t k = recv(c->fd, c->in + c->got, HELLO_SIZE - c->got, 0);
            if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR && errno != EWOULDBLOCK))
                return 1;
            if (k < 0)
                return 0;
            c->got += (size_t)k;
            if (c->got < 4 || (c->got < HELLO_SIZE && memcmp(c->in, "DDPB", 4) == 0))
                continue;
            if (memcmp(c->in, "DDPB", 4) != 0)
                return 1; /* a stray speaking another protocol */
            if (conn_hello(s, c, err, errlen) < 0) {
                /* best effort: tell the peer why before rank 0 leaves (fits the buffer) */
                (void)!send(c->fd, c->reply, REPLY_SIZE, MSG_NOSIGNAL | MSG_DONTWAIT);
                return -1;
            }
        } else if (c->state == C_REPLY) {
            struct iovec iov[2];
            int n = 0;
            if (c->sent < REPLY_SIZE)
                iov[n++] = (struct iovec){c->reply + c->sent, REPLY_SIZE - c->sent};
            size_t boff = c->sent > REPLY_SIZE ? c->sent - REPLY_SIZE : 0;
            if (c->total > REPLY_SIZE && boff < s->len)
                iov[n++] = (struct iovec){(void *)(s->blob + boff), s->len - boff};
            struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
            ssize_t k = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
            if (k < 0)
                return errno == EAGAIN || errno == EINTR || errno == EWOULDBLOCK ? 0 : 1;
            c->sent += (size_t)k;
            if (c->sent < c->total)
                continue;
            if (c->closing)
                return 1;
            c->state = C_ACK;
        } else {
            unsigned char a;
            ssize_t k = recv(c->fd, &a, 1, 0);
            if (k < 0 && (errno == EAGAIN || errno == EINTR || errno == EWOULDBLOCK))
                return 0;
            if (k == 1 && a == 'A' && c->rank > 0 && s->state[c->rank] == 1) {
                s->state[c->rank] = 2;
                s->acked++;
            }
            return 1;
        }
    }
}

static int serve(const struct ddp_world *w, const char *token, unsigned seq,
                 const unsigned char *blob, size_t len, double timeout_s, char *err, size_t errlen)
{
    int lfd = listen_on(w, w->master_port, err, errlen);
    if (lfd < 0)
        return -1;
    check_master_is_here(w);
    const double t0 = ddp_now(), deadline = t0 + timeout_s;
    rlim_t nofile = raise_nofile();
    struct server s = {.w = w, .token = token, .seq = seq, .blob = blob, .len = len};
    long cap = (long)(w->world_size - 1) + STRAY_SLOTS;
    long room = nofile > FD_RESERVE + 1 ? (long)(nofile - FD_RESERVE) : 1;
    s.maxconns = (int)(cap < room ? cap : room);
    s.state = ddp_calloc((size_t)w->world_size, 1);
    s.conns = ddp_calloc((size_t)s.maxconns, sizeof *s.conns);
    struct pollfd *pfd = ddp_calloc((size_t)s.maxconns + 1, sizeof *pfd);
    int rc = -1;

    while (s.acked < w->world_size - 1) {
        double now = ddp_now();
        if (now >= deadline) {
            char list[200];
            s.state[0] = 2;
            for (int r = 0; r < w->world_size; r++)
                s.state[r] = s.state[r] != 2;
            int n = ddp_bootstrap_format_ranks(s.state, w->world_size, list, sizeof list);
            ddp_err(err, errlen,
                    "TCP rendezvous on %s:%d: rank%s %s (%d of %d) did not arrive "
                    "within %g s; they failed to start or look for another master: every rank "
                    "needs the same MASTER_ADDR/MASTER_PORT (rank 0 is on %s)",
                    w->master_addr, w->master_port, n > 1 ? "s" : "", list, n, w->world_size - 1,
                    timeout_s, w->host);
            goto out;
        }
        /* strays that never said hello in time */
        for (int i = s.nconns - 1; i >= 0; i--)
            if (s.conns[i].state == C_HELLO && now - s.conns[i].opened > HELLO_IDLE_S)
                conn_close(&s, i);
        int np = 0;
        if (s.nconns < s.maxconns)
            pfd[np++] = (struct pollfd){lfd, POLLIN, 0};
        int base = np;
        for (int i = 0; i < s.nconns; i++)
            pfd[np++] =
                (struct pollfd){s.conns[i].fd, s.conns[i].state == C_REPLY ? POLLOUT : POLLIN, 0};
        int k = poll(pfd, (nfds_t)np, ms_left(deadline, SERVE_TICK_MS));
        if (k < 0 && errno != EINTR) {
            ddp_err(err, errlen, "TCP rendezvous: poll failed: %s", strerror(errno));
            goto out;
        }
        if (k <= 0)
            continue;
        /* connections first (from the end, as closing moves the last one into the gap) */
        for (int i = np - 1; i >= base; i--) {
            if (!pfd[i].revents)
                continue;
            int ci = i - base;
            int st = conn_step(&s, ci, err, errlen);
            if (st < 0)
                goto out;
            if (st > 0)
                conn_close(&s, ci);
        }
        if (base == 1 && (pfd[0].revents & POLLIN)) {
            while (s.nconns < s.maxconns) {
                struct sockaddr_storage ss;
                socklen_t sl = sizeof ss;
                int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd < 0)
                    break; /* EAGAIN, or EMFILE: wait until a slot frees */
                struct conn *c = &s.conns[s.nconns++];
                memset(c, 0, sizeof *c);
                c->fd = fd;
                c->rank = -1;
                c->opened = ddp_now();
                addr_text((struct sockaddr *)&ss, sl, c->peer, sizeof c->peer);
                if (strncmp(c->peer, "::ffff:", 7) == 0)
                    memmove(c->peer, c->peer + 7, strlen(c->peer + 7) + 1);
            }
        }
    }
    rc = 0;
out:
    while (s.nconns > 0)
        conn_close(&s, s.nconns - 1);
    close(lfd);
    free(pfd);
    free(s.conns);
    free(s.state);
    return rc;
}

/* ------------------------------------------------------------- other ranks: fetch the blob */

/* The refusal in reply as one line. */
static int refused(const struct ddp_world *w, const unsigned char *reply, size_t len, unsigned seq,
                   const char *token, char *err, size_t errlen)
{
    char theirs[TOKEN_FIELD];
    uint32_t st = get32(reply + 4), detail = get32(reply + 8);
    token_text(reply + 16, theirs);
    const char *where = w->master_addr;
    int port = w->master_port;
    switch (st) {
    case ST_STRANGER:
        return ddp_err(err, errlen,
                       "the rendezvous at %s:%d belongs to another job "
                       "('%s'; this job is '%s'): port %d is taken: set [dist] port or "
                       "MASTER_PORT to a free port, the same on every rank",
                       where, port, theirs, token, port);
    case ST_WORLD:
        return ddp_err(err, errlen,
                       "rank 0 at %s:%d has world size %u, this rank %d; "
                       "every rank must be started with the same WORLD_SIZE",
                       where, port, detail, w->world_size);
    case ST_LEN:
        return ddp_err(err, errlen,
                       "rank 0 publishes %u bytes, this rank expects %zu; "
                       "the ranks run different programs or versions",
                       detail, len);
    case ST_RANK:
        return ddp_err(err, errlen,
                       "rank 0 at %s:%d refused rank %d as out of range; "
                       "check RANK and WORLD_SIZE",
                       where, port, w->rank);
    case ST_DUP:
        return ddp_err(err, errlen,
                       "another process already took rank %d at the rendezvous "
                       "%s:%d; the launch gave two processes the same RANK",
                       w->rank, where, port);
    case ST_SEQ:
        return ddp_err(err, errlen,
                       "at bootstrap call #%u but rank 0 is at #%u; the "
                       "ranks run different programs or versions",
                       seq + 1, detail + 1);
    case ST_VERSION:
        return ddp_err(err, errlen,
                       "rank 0 at %s:%d speaks rendezvous protocol %u, "
                       "this rank %u; run the same ddptrain on every node",
                       where, port, detail, PROTO_VERSION);
    }
    return ddp_err(err, errlen, "the rendezvous at %s:%d answered status %u", where, port, st);
}

/* One attempt: connect, hello, reply, blob, ack. Returns 0 done, 1 retry (why in last),
 * -1 refused or failed for good (err). */
static int fetch_once(const struct ddp_world *w, const struct addrinfo *ai, const char *token,
                      unsigned seq, unsigned char *tmp, size_t len, double deadline, char *last,
                      size_t lastlen, char *err, size_t errlen)
{
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return ddp_err(err, errlen, "cannot create a socket: %s", strerror(errno));
    int rc = 1, one = 1;
    const char *why = NULL;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        if (errno != EINPROGRESS) {
            snprintf(last, lastlen, "%s", strerror(errno));
            goto out;
        }
        double until = ddp_now() + CONNECT_ATTEMPT_S;
        int r = wait_fd(fd, POLLOUT, until < deadline ? until : deadline);
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (r <= 0) {
            snprintf(last, lastlen, "%s",
                     r == 0 ? "connection attempt timed out" : strerror(errno));
            goto out;
        }
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr != 0) {
            snprintf(last, lastlen, "%s", strerror(soerr ? soerr : errno));
            goto out;
        }
    }
    unsigned char hello[HELLO_SIZE], reply[REPLY_SIZE];
    memset(hello, 0, sizeof hello);
    memcpy(hello, "DDPB", 4);
    put32(hello + 4, PROTO_VERSION);
    put32(hello + 8, seq);
    put32(hello + 12, (uint32_t)w->rank);
    put32(hello + 16, (uint32_t)w->world_size);
    put32(hello + 20, (uint32_t)len);
    snprintf((char *)hello + 24, TOKEN_FIELD, "%s", token);
    if (send_all(fd, hello, sizeof hello, deadline, &why) < 0 ||
        recv_all(fd, reply, sizeof reply, deadline, &why) < 0) {
        snprintf(last, lastlen, "connected, but %s before rank 0 answered",
                 strcmp(why, "closed") == 0 ? "the connection was closed" : why);
        goto out;
    }
    if (memcmp(reply, "DDPR", 4) != 0) {
        rc = ddp_err(err, errlen,
                     "%s:%d is not a ddptrain rendezvous (another program "
                     "listens there): set [dist] port or MASTER_PORT to a free port",
                     w->master_addr, w->master_port);
        goto out;
    }
    if (get32(reply + 4) == ST_LATER) {
        snprintf(last, lastlen, "rank 0 is still at bootstrap call #%u, this rank at #%u",
                 get32(reply + 8) + 1, seq + 1);
        goto out;
    }
    if (get32(reply + 4) != ST_OK) {
        rc = refused(w, reply, len, seq, token, err, errlen);
        goto out;
    }
    if (get32(reply + 12) != len) {
        rc = ddp_err(err, errlen, "rank 0 sent %u bytes, this rank expects %zu", get32(reply + 12),
                     len);
        goto out;
    }
    if (recv_all(fd, tmp, len, deadline, &why) < 0) {
        snprintf(last, lastlen, "the blob did not arrive (%s)", why);
        goto out;
    }
    unsigned char ack = 'A';
    if (send_all(fd, &ack, 1, deadline, &why) < 0) {
        snprintf(last, lastlen, "could not acknowledge (%s)", why);
        goto out;
    }
    rc = 0;
out:
    close(fd);
    return rc;
}

static int fetch(const struct ddp_world *w, const char *token, unsigned seq, unsigned char *blob,
                 size_t len, double timeout_s, char *err, size_t errlen)
{
    const double deadline = ddp_now() + timeout_s;
    char port[16], last[160] = "no attempt made";
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(port, sizeof port, "%d", w->master_port);
    int g = getaddrinfo(w->master_addr, port, &hints, &res);
    if (g != 0 || !res)
        return ddp_err(err, errlen,
                       "master address '%s' is not a numeric address "
                       "(%s); set MASTER_ADDR",
                       w->master_addr, g ? gai_strerror(g) : "no address");
    unsigned char *tmp = ddp_malloc(len);
    double backoff = RETRY_MIN_S;
    int rc;
    for (;;) {
        rc = fetch_once(w, res, token, seq, tmp, len, deadline, last, sizeof last, err, errlen);
        if (rc <= 0)
            break;
        if (ddp_now() >= deadline) {
            rc = ddp_err(err, errlen,
                         "could not reach rank 0's rendezvous at %s:%d "
                         "(%s) within %g s (last: %s); is rank 0 running, and can this node "
                         "(%s) reach that address and port?",
                         w->master_addr, w->master_port, w->master_host, timeout_s, last, w->host);
            break;
        }
        nap(backoff, deadline);
        backoff = backoff * 2 > RETRY_MAX_S ? RETRY_MAX_S : backoff * 2;
    }
    if (rc == 0)
        memcpy(blob, tmp, len);
    free(tmp);
    freeaddrinfo(res);
    return rc;
}

int ddp_bootstrap_tcp(const struct ddp_world *w, const char *token, unsigned seq, void *blob,
                      size_t len, double timeout_s, char *err, size_t errlen)
{
    if (!w->master_addr[0] || w->master_port <= 0 || w->master_port > 65535)
        return ddp_err(
            err, errlen,
            "the TCP rendezvous needs the master's address and port, "
            "but they are unknown here (launcher %s): set MASTER_ADDR and "
            "MASTER_PORT, or, under mpirun, use bootstrap = auto or mpi (with MPI built in)",
            ddp_launcher_name(w->launcher));
    if (w->rank == 0)
        return serve(w, token, seq, blob, len, timeout_s, err, errlen);
    return fetch(w, token, seq, blob, len, timeout_s, err, errlen);
}
