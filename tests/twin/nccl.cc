/*
 * nccl.cc - the GPU twin's NCCL (include/nccl.h) between processes over TCP.
 *
 * ncclGetUniqueId opens rank 0's bootstrap socket and puts its address (the interface named
 * by NCCL_SOCKET_IFNAME, else the first non-loopback IPv4 one) in the id, as NCCL does; a
 * thread there collects every rank's hello (rank, host, GPU, listening address), refuses two
 * ranks on one GPU of one host ("Duplicate GPU detected") and sends everyone the table. The
 * ranks then connect in a full mesh. ncclCommInitRankConfig with blocking = 0 returns
 * ncclInProgress and finishes in a thread; ncclCommGetAsyncError reports progress.
 *
 * A collective is queued on the given stream (it runs when the stream gets there, reading and
 * writing device memory) and exchanges whole buffers with every peer; reductions are summed in
 * rank order, so every rank gets the same bits. Each message carries a sequence number and the
 * operation: ranks calling different collectives is reported, not mixed. When a peer's
 * connection drops, the communicator's async error becomes ncclRemoteError and the collective
 * stays blocked on its stream, as an NCCL kernel does, until ncclCommAbort.
 */
#include "nccl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "twin.h"

namespace {

constexpr uint64_t ID_MAGIC = 0x31444957544e5744ULL; /* "DWNTWID1" */
constexpr uint32_t MSG_MAGIC = 0x7477696e;

struct IdBody {
    uint64_t magic;
    uint32_t ip; /* network order */
    uint16_t port;
    uint64_t nonce;
};

struct Hello {
    int32_t rank, nranks, gpu;
    uint32_t ip;
    uint16_t port;
    char host[64];
    uint64_t nonce;
};

struct Table {
    int32_t status; /* 0 ok, else ncclInvalidUsage with the message */
    char msg[200];
};

struct MsgHdr {
    uint32_t magic, op;
    uint64_t seq, bytes;
};

double now_s()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

uint32_t local_ip()
{
    const char *want = getenv("NCCL_SOCKET_IFNAME");
    struct ifaddrs *ifs = nullptr;
    uint32_t ip = htonl(INADDR_LOOPBACK);
    if (getifaddrs(&ifs) != 0)
        return ip;
    for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP))
            continue;
        const bool lo = (i->ifa_flags & IFF_LOOPBACK) != 0;
        if (want && *want ? strncmp(i->ifa_name, want, strlen(want)) == 0 : !lo) {
            ip = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
            break;
        }
    }
    freeifaddrs(ifs);
    return ip;
}

int listen_any(uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 64) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

/* Wait for fd to be ready for ev (POLLIN/POLLOUT), or wake to be readable (abort): 1 ready,
 * 0 woken or past the deadline, -1 error. */
int wait_fd(int fd, short ev, int wake, double deadline)
{
    for (;;) {
        struct pollfd p[2] = {{fd, ev, 0}, {wake, POLLIN, 0}};
        const double left = deadline - now_s();
        if (left <= 0)
            return 0;
        int r = poll(p, wake >= 0 ? 2 : 1, left > 0.1 ? 100 : (int)(left * 1000) + 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (wake >= 0 && (p[1].revents & POLLIN))
            return 0;
        if (p[0].revents)
            return 1;
    }
}

/* Blocking full transfer with deadline: 0 done, -1 error/EOF/deadline. */
int xfer(int fd, void *buf, size_t n, bool send_, int wake, double deadline)
{
    char *b = (char *)buf;
    while (n) {
        if (wait_fd(fd, send_ ? POLLOUT : POLLIN, wake, deadline) != 1)
            return -1;
        ssize_t r = send_ ? send(fd, b, n, MSG_NOSIGNAL | MSG_DONTWAIT)
                          : recv(fd, b, n, MSG_DONTWAIT);
        if (r < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (r <= 0)
            return -1;
        b += r;
        n -= (size_t)r;
    }
    return 0;
}

int connect_to(uint32_t ip, uint16_t port, int wake, double deadline)
{
    while (now_s() < deadline) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a;
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = ip;
        a.sin_port = htons(port);
        if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            return fd;
        }
        close(fd);
        struct pollfd p = {wake, POLLIN, 0};
        if (poll(&p, wake >= 0 ? 1 : 0, 50) == 1)
            return -1; /* aborted */
    }
    return -1;
}

/* Rank 0's bootstrap root: serves one communicator (the id it was made for). */
void root_serve(int lfd, uint64_t nonce)
{
    std::vector<int> fds;
    std::vector<Hello> hs;
    int nranks = -1;
    const double deadline = now_s() + 3600;
    while (nranks < 0 || (int)fds.size() < nranks) {
        if (wait_fd(lfd, POLLIN, -1, deadline) != 1)
            break;
        int fd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
        Hello h;
        if (fd < 0 || xfer(fd, &h, sizeof h, false, -1, now_s() + 60) != 0 || h.nonce != nonce) {
            if (fd >= 0)
                close(fd);
            continue;
        }
        nranks = h.nranks;
        fds.push_back(fd);
        hs.push_back(h);
    }
    close(lfd);
    if (nranks < 0 || (int)fds.size() < nranks) {
        for (int fd : fds)
            close(fd);
        return;
    }
    std::vector<Hello> table((size_t)nranks);
    Table t;
    memset(&t, 0, sizeof t);
    for (const Hello &h : hs)
        if (h.rank >= 0 && h.rank < nranks)
            table[(size_t)h.rank] = h;
    for (size_t i = 0; i < hs.size() && !t.status; i++)
        for (size_t j = 0; j < i && !t.status; j++)
            if (hs[i].gpu == hs[j].gpu && strcmp(hs[i].host, hs[j].host) == 0) {
                t.status = ncclInvalidUsage;
                snprintf(t.msg, sizeof t.msg, "Duplicate GPU detected : rank %d and rank %d both "
                         "on CUDA device %d (host %s)", hs[i].rank, hs[j].rank, hs[i].gpu,
                         hs[i].host);
            }
    for (int fd : fds) {
        xfer(fd, &t, sizeof t, true, -1, now_s() + 60);
        if (!t.status)
            xfer(fd, table.data(), sizeof(Hello) * table.size(), true, -1, now_s() + 60);
        close(fd);
    }
}

thread_local int t_group;

} // namespace

struct twin_comm {
    int rank = 0, nranks = 0, gpu = -1;
    std::vector<int> fds;
    std::atomic<int> async{ncclInProgress};
    std::atomic<bool> aborted{false};
    int wake[2] = {-1, -1};
    std::mutex mu;
    std::string last;
    std::atomic<uint64_t> seq{0};
    ncclUniqueId id;
    std::thread init;

    void fail(ncclResult_t r, const char *fmt, ...) __attribute__((format(printf, 3, 4)))
    {
        char buf[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        {
            std::lock_guard<std::mutex> lk(mu);
            if (last.empty())
                last = buf;
        }
        int expect = ncclSuccess;
        if (!async.compare_exchange_strong(expect, r)) {
            expect = ncclInProgress;
            async.compare_exchange_strong(expect, r);
        }
    }
};

namespace {

/* The body of ncclCommInitRank: bootstrap through the root, then the mesh. */
void comm_setup(twin_comm *c)
{
    IdBody body;
    memcpy(&body, c->id.internal, sizeof body);
    const double deadline = now_s() + 600;
    uint16_t port = 0;
    int lfd = listen_any(&port);
    if (lfd < 0)
        return c->fail(ncclSystemError, "cannot open a listening socket: %s", strerror(errno));
    int rfd = connect_to(body.ip, body.port, c->wake[0], deadline);
    if (rfd < 0) {
        close(lfd);
        return c->fail(ncclSystemError, "cannot reach the bootstrap root %s:%u",
                       inet_ntoa(in_addr{body.ip}), body.port);
    }
    Hello h;
    memset(&h, 0, sizeof h);
    h.rank = c->rank;
    h.nranks = c->nranks;
    h.gpu = c->gpu;
    h.ip = local_ip();
    h.port = port;
    h.nonce = body.nonce;
    snprintf(h.host, sizeof h.host, "%s", twin::host_id());
    Table t;
    std::vector<Hello> table((size_t)c->nranks);
    if (xfer(rfd, &h, sizeof h, true, c->wake[0], deadline) != 0 ||
        xfer(rfd, &t, sizeof t, false, c->wake[0], deadline) != 0 ||
        (!t.status && xfer(rfd, table.data(), sizeof(Hello) * table.size(), false, c->wake[0],
                           deadline) != 0)) {
        close(rfd);
        close(lfd);
        return c->fail(ncclSystemError, "bootstrap with the root failed (rank 0 gone?)");
    }
    close(rfd);
    if (t.status) {
        close(lfd);
        return c->fail((ncclResult_t)t.status, "%s", t.msg);
    }
    c->fds.assign((size_t)c->nranks, -1);
    for (int j = 0; j < c->rank; j++) { /* connect down, say who we are */
        int fd = connect_to(table[(size_t)j].ip, table[(size_t)j].port, c->wake[0], deadline);
        int32_t me = c->rank;
        if (fd < 0 || xfer(fd, &me, sizeof me, true, c->wake[0], deadline) != 0) {
            close(lfd);
            return c->fail(ncclSystemError, "cannot connect to rank %d (%s)", j,
                           table[(size_t)j].host);
        }
        c->fds[(size_t)j] = fd;
    }
    for (int k = c->rank + 1; k < c->nranks; k++) { /* accept from above */
        int fd = -1;
        int32_t who = -1;
        if (wait_fd(lfd, POLLIN, c->wake[0], deadline) != 1 ||
            (fd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC)) < 0 ||
            xfer(fd, &who, sizeof who, false, c->wake[0], deadline) != 0 || who <= c->rank ||
            who >= c->nranks || c->fds[(size_t)who] >= 0) {
            if (fd >= 0)
                close(fd);
            close(lfd);
            return c->fail(ncclSystemError, "a peer did not connect to rank %d", c->rank);
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        c->fds[(size_t)who] = fd;
    }
    close(lfd);
    int expect = ncclInProgress;
    c->async.compare_exchange_strong(expect, ncclSuccess);
}

/* Sends `out` (or nothing) to each peer in `to` and receives `in_bytes` from each peer in
 * `from` into in[p], all at once. false: a peer was lost or disagreed (reported on c). */
bool exchange(twin_comm *c, uint32_t op, uint64_t seq, const char *out, size_t out_bytes,
              const std::vector<bool> &to, std::vector<std::vector<char>> &in, size_t in_bytes,
              const std::vector<bool> &from)
{
    const int n = c->nranks;
    MsgHdr hdr = {MSG_MAGIC, op, seq, out_bytes};
    std::vector<size_t> sent((size_t)n, 0), got((size_t)n, 0);
    std::vector<MsgHdr> rh((size_t)n);
    const size_t H = sizeof(MsgHdr);
    for (int p = 0; p < n; p++)
        if (from[(size_t)p])
            in[(size_t)p].resize(in_bytes);
    for (;;) {
        std::vector<struct pollfd> pf;
        std::vector<int> who;
        for (int p = 0; p < n; p++) {
            short ev = 0;
            if (to[(size_t)p] && sent[(size_t)p] < H + out_bytes)
                ev |= POLLOUT;
            if (from[(size_t)p] && got[(size_t)p] < H + in_bytes)
                ev |= POLLIN;
            if (ev) {
                pf.push_back({c->fds[(size_t)p], ev, 0});
                who.push_back(p);
            }
        }
        if (pf.empty())
            return true;
        pf.push_back({c->wake[0], POLLIN, 0});
        if (poll(pf.data(), pf.size(), 1000) < 0 && errno != EINTR)
            return false;
        if (pf.back().revents || c->aborted.load())
            return false;
        for (size_t i = 0; i + 1 < pf.size(); i++) {
            const int p = who[i];
            const int fd = pf[i].fd;
            if ((pf[i].revents & POLLOUT) && sent[(size_t)p] < H + out_bytes) {
                size_t &s = sent[(size_t)p];
                const char *src = s < H ? (const char *)&hdr + s : out + (s - H);
                size_t len = s < H ? H - s : out_bytes - (s - H);
                ssize_t r = send(fd, src, len, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (r < 0 && errno != EAGAIN && errno != EINTR) {
                    c->fail(ncclRemoteError, "rank %d lost its connection to rank %d (%s): "
                            "the peer process died or aborted", c->rank, p, strerror(errno));
                    return false;
                }
                if (r > 0)
                    s += (size_t)r;
            }
            if ((pf[i].revents & (POLLIN | POLLHUP | POLLERR)) && from[(size_t)p] &&
                got[(size_t)p] < H + in_bytes) {
                size_t &g = got[(size_t)p];
                char *dst = g < H ? (char *)&rh[(size_t)p] + g : in[(size_t)p].data() + (g - H);
                size_t len = g < H ? H - g : in_bytes - (g - H);
                ssize_t r = recv(fd, dst, len, MSG_DONTWAIT);
                if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
                    c->fail(ncclRemoteError, "rank %d lost its connection to rank %d: the peer "
                            "process died or aborted", c->rank, p);
                    return false;
                }
                if (r > 0) {
                    g += (size_t)r;
                    const MsgHdr &m = rh[(size_t)p];
                    if (g >= H && g - (size_t)r < H &&
                        (m.magic != MSG_MAGIC || m.seq != seq || m.op != op ||
                         m.bytes != in_bytes)) {
                        c->fail(ncclInternalError, "rank %d and rank %d called different "
                                "collectives (operation %u #%llu of %llu bytes vs %u #%llu of "
                                "%llu bytes)", c->rank, p, op, (unsigned long long)seq,
                                (unsigned long long)in_bytes, m.op, (unsigned long long)m.seq,
                                (unsigned long long)m.bytes);
                        return false;
                    }
                }
            }
        }
    }
}

/* A failed collective blocks its stream until the communicator is aborted, as an NCCL
 * kernel waiting for a dead peer does. */
void hang_until_abort(twin_comm *c)
{
    while (!c->aborted.load()) {
        struct pollfd p = {c->wake[0], POLLIN, 0};
        poll(&p, 1, 200);
    }
}

size_t type_bytes(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
    }
}

template <typename T> void reduce_t(T *acc, const T *x, size_t n, ncclRedOp_t op)
{
    for (size_t i = 0; i < n; i++)
        switch (op) {
        case ncclSum: case ncclAvg: acc[i] = acc[i] + x[i]; break;
        case ncclProd: acc[i] = acc[i] * x[i]; break;
        case ncclMax: acc[i] = x[i] > acc[i] ? x[i] : acc[i]; break;
        case ncclMin: acc[i] = x[i] < acc[i] ? x[i] : acc[i]; break;
        }
}

void reduce(void *acc, const void *x, size_t n, ncclDataType_t t, ncclRedOp_t op)
{
    switch (t) {
    case ncclInt8: reduce_t((int8_t *)acc, (const int8_t *)x, n, op); break;
    case ncclUint8: reduce_t((uint8_t *)acc, (const uint8_t *)x, n, op); break;
    case ncclInt32: reduce_t((int32_t *)acc, (const int32_t *)x, n, op); break;
    case ncclUint32: reduce_t((uint32_t *)acc, (const uint32_t *)x, n, op); break;
    case ncclInt64: reduce_t((int64_t *)acc, (const int64_t *)x, n, op); break;
    case ncclUint64: reduce_t((uint64_t *)acc, (const uint64_t *)x, n, op); break;
    case ncclFloat32: reduce_t((float *)acc, (const float *)x, n, op); break;
    default: reduce_t((double *)acc, (const double *)x, n, op); break;
    }
}

enum { OP_ALLREDUCE = 1, OP_BCAST, OP_ALLGATHER, OP_REDSCAT };

ncclResult_t check_comm(twin_comm *c, bool allow_progress = false)
{
    if (!c)
        return ncclInvalidArgument;
    const int a = c->async.load();
    if (a == ncclInProgress && !allow_progress)
        return ncclInvalidUsage;
    return a == ncclInProgress ? ncclSuccess : (ncclResult_t)a;
}

/* Queue a collective: rank-ordered reduce of everyone's `in_bytes` from send (device), the
 * result's part for this rank into recv (device). */
ncclResult_t collective(uint32_t op, const void *send, size_t send_bytes, void *recv,
                        size_t recv_bytes, ncclDataType_t t, ncclRedOp_t rop, int root,
                        twin_comm *c, cudaStream_t s)
{
    if (ncclResult_t r = check_comm(c))
        return r;
    if ((size_t)t >= ncclNumTypes || (op != OP_BCAST && root != -1))
        return ncclInvalidArgument;
    const bool need_send = op != OP_BCAST || c->rank == root;
    const char *sh = send_bytes && need_send ? (const char *)twin::dev_to_host(send, send_bytes)
                                             : nullptr;
    char *rh = recv_bytes ? (char *)twin::dev_to_host(recv, recv_bytes) : nullptr;
    if ((send_bytes && need_send && !sh) || (recv_bytes && !rh)) {
        c->fail(ncclInvalidArgument, "%s is not device memory of a live allocation",
                send_bytes && need_send && !sh ? "sendbuff" : "recvbuff");
        std::lock_guard<std::mutex> lk(c->mu);
        return ncclInvalidArgument;
    }
    const size_t tb = type_bytes(t);
    /* one sequence number per execution: each graph launch takes a new one */
    cudaError_t e = twin::enqueue_op(s, "nccl collective", [=] {
      twin::g_stats.collectives++;
      const uint64_t seq = c->seq++;
      return std::function<void()>([=] {
        if (c->aborted.load())
            return;
        const int n = c->nranks, me = c->rank;
        std::vector<bool> all((size_t)n, true), none((size_t)n, false);
        all[(size_t)me] = false;
        std::vector<std::vector<char>> in((size_t)n);
        std::vector<char> mine(sh, sh + (need_send ? send_bytes : 0));
        bool ok = true;
        if (op == OP_BCAST) {
            std::vector<bool> from((size_t)n, false);
            if (me != root)
                from[(size_t)root] = true;
            ok = exchange(c, op, seq, mine.data(), me == root ? send_bytes : 0,
                          me == root ? all : none, in, recv_bytes, from);
            if (ok)
                memcpy(rh, me == root ? mine.data() : in[(size_t)root].data(), recv_bytes);
        } else {
            ok = exchange(c, op, seq, mine.data(), send_bytes, all, in, send_bytes, all);
            in[(size_t)me] = mine;
            if (ok && op == OP_ALLGATHER) {
                for (int p = 0; p < n; p++)
                    memcpy(rh + (size_t)p * send_bytes, in[(size_t)p].data(), send_bytes);
            } else if (ok) {
                const size_t off = op == OP_REDSCAT ? (size_t)me * recv_bytes : 0;
                std::vector<char> acc(in[0].begin() + (long)off,
                                      in[0].begin() + (long)(off + recv_bytes));
                for (int p = 1; p < n; p++)
                    reduce(acc.data(), in[(size_t)p].data() + off, recv_bytes / tb, t, rop);
                memcpy(rh, acc.data(), recv_bytes);
            }
        }
        if (!ok)
            hang_until_abort(c);
      });
    });
    if (e != cudaSuccess) {
        c->fail(ncclUnhandledCudaError, "CUDA error on the collective's stream: %s",
                cudaGetErrorString(e));
        return ncclUnhandledCudaError;
    }
    return ncclSuccess;
}

} // namespace

extern "C" {

ncclResult_t ncclGetVersion(int *version)
{
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError:
        return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
        return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
        return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

const char *ncclGetLastError(ncclComm_t c)
{
    static thread_local std::string copy;
    if (!c)
        return "";
    std::lock_guard<std::mutex> lk(c->mu);
    copy = c->last;
    return copy.c_str();
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    uint16_t port = 0;
    int lfd = listen_any(&port);
    if (lfd < 0)
        return ncclSystemError;
    IdBody b;
    memset(&b, 0, sizeof b);
    b.magic = ID_MAGIC;
    b.ip = local_ip();
    b.port = port;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    b.nonce = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40);
    memset(id, 0, sizeof *id);
    memcpy(id->internal, &b, sizeof b);
    std::thread(root_serve, lfd, b.nonce).detach();
    return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *config)
{
    IdBody b;
    memcpy(&b, id.internal, sizeof b);
    if (nranks < 1 || rank < 0 || rank >= nranks || b.magic != ID_MAGIC)
        return ncclInvalidArgument;
    int dev = -1;
    if (cudaGetDevice(&dev) != cudaSuccess)
        return ncclUnhandledCudaError;
    twin_comm *c = new twin_comm;
    c->rank = rank;
    c->nranks = nranks;
    c->gpu = twin::physical_id(dev);
    c->id = id;
    if (pipe2(c->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        delete c;
        return ncclSystemError;
    }
    *comm = c;
    const bool blocking = !config || config->blocking != 0;
    if (blocking) {
        comm_setup(c);
        return check_comm(c);
    }
    c->init = std::thread(comm_setup, c);
    c->init.detach();
    return ncclInProgress;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
    return ncclCommInitRankConfig(comm, nranks, id, rank, nullptr);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *async)
{
    if (!c)
        return ncclInvalidArgument;
    *async = (ncclResult_t)c->async.load();
    return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t c, int *count)
{
    *count = c->nranks;
    return ncclSuccess;
}
ncclResult_t ncclCommUserRank(const ncclComm_t c, int *rank)
{
    *rank = c->rank;
    return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t c) { return check_comm(c); }

ncclResult_t ncclCommDestroy(ncclComm_t c)
{
    if (!c)
        return ncclInvalidArgument;
    for (int &fd : c->fds)
        if (fd >= 0) {
            close(fd);
            fd = -1;
        }
    return ncclSuccess; /* the handle stays allocated: a queued collective may still name it */
}

ncclResult_t ncclCommAbort(ncclComm_t c)
{
    if (!c)
        return ncclSuccess;
    c->aborted = true;
    if (write(c->wake[1], "x", 1) < 0) {
        /* the pipe is full: it is readable, which is all the waiters look at */
    }
    for (int fd : c->fds)
        if (fd >= 0)
            shutdown(fd, SHUT_RDWR); /* peers see the connection drop */
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t,
                           ncclRedOp_t op, ncclComm_t c, cudaStream_t s)
{
    const size_t b = count * type_bytes(t);
    return collective(OP_ALLREDUCE, send, b, recv, b, t, op, -1, c, s);
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t,
                           int root, ncclComm_t c, cudaStream_t s)
{
    if (c && (root < 0 || root >= c->nranks))
        return ncclInvalidArgument;
    const size_t b = count * type_bytes(t);
    return collective(OP_BCAST, send, b, recv, b, t, ncclSum, root, c, s);
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t sendcount, ncclDataType_t t,
                           ncclComm_t c, cudaStream_t s)
{
    const size_t b = sendcount * type_bytes(t);
    return collective(OP_ALLGATHER, send, b, recv, c ? b * (size_t)c->nranks : 0, t, ncclSum,
                      -1, c, s);
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t recvcount,
                               ncclDataType_t t, ncclRedOp_t op, ncclComm_t c, cudaStream_t s)
{
    const size_t b = recvcount * type_bytes(t);
    return collective(OP_REDSCAT, send, c ? b * (size_t)c->nranks : 0, recv, b, t, op, -1, c, s);
}

ncclResult_t ncclGroupStart(void)
{
    t_group++;
    return ncclSuccess;
}
ncclResult_t ncclGroupEnd(void)
{
    if (t_group <= 0)
        return ncclInvalidUsage;
    t_group--;
    return ncclSuccess;
}

} /* extern "C" */
