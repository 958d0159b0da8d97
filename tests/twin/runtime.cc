/*
 * runtime.cc - the GPU twin's CUDA runtime (include/cuda_runtime.h) on the CPU.
 *
 * Devices: DDP_EMU_GPUS per host (default 4), masked and renumbered by CUDA_VISIBLE_DEVICES as
 * CUDA does (enumeration stops at the first entry that is not an unused ordinal).
 * Memory: device addresses lie in one reserved PROT_NONE range, so a host dereference faults
 * (the SIGSEGV handler names it); the bytes live in a separate "shadow" mapping that only
 * device work (kernels, copies, cuBLAS, NCCL) reaches, through dev_to_host. Addresses are never
 * reused, so a freed pointer is no longer device memory. cudaMalloc'd bytes are garbage.
 * Streams: a FIFO each, executed by its own worker thread; events are (stream, ticket) pairs;
 * cudaStreamWaitEvent queues a wait. Copies from page-locked memory read their source when
 * they execute; from pageable memory they follow CUDA's documented rules (H2D staged at the
 * call, D2H returns when done). DDP_EMU_LATE=1: a stream runs an operation only once someone
 * needs its result (a synchronisation, an event query, a waiting stream), i.e. as late as is
 * legal, so a missing wait shows as stale data.
 * Clock: a device's clock (what an event records, so cudaEventElapsedTime) is the CPU time
 * (CLOCK_THREAD_CPUTIME_ID) the workers of its streams spent running operations, summed over
 * the device's streams: its busy time, the twin's own bookkeeping (lock_pages) left out, and
 * an operation with a fixed cost (run_at_cost: the cuDNN graph engines) counted as that. A
 * worker the scheduler holds off, or one waiting for the kernel lock, another stream or an
 * NCCL peer, does not advance it, so a twin GPU sharing its core with other processes times
 * its work as on an idle core (what `ddptrain validate` compares between GPUs). Events on one
 * stream time the work between them, other streams' work that ran meanwhile included. The
 * stall clock of cuda/graph.cu (globaltimer_ns in twin_kernels.h) stays the host's monotonic
 * clock: it times waiting.
 * Faults: errors found on the device are sticky (every later call returns them), as on a GPU.
 * DDP_EMU_FAIL=kernel:N or alloc:N injects a fault at the Nth kernel launch (cuBLAS calls
 * count) or allocation; with DDP_EMU_FAIL_RANK=R only in the process whose rank (RANK,
 * SLURM_PROCID, OMPI_COMM_WORLD_RANK or PMI_RANK) is R.
 * Page-locked memory (cudaMallocHost, cudaHostAlloc, cudaHostRegister): while an asynchronous
 * copy from it is queued, its pages are read-only to the host, so a host write before the
 * copy's event (a reused loader slot, say) faults at once with a line that says so, where a GPU
 * would silently upload the new bytes.
 * Stats: DDP_EMU_STATS=FILE, one JSON line per training step to FILE.<rank> (twin_step_end):
 * host synchronisations in all and per stream, pageable and page-locked copies, and the
 * streams host-to-device copies ran on (streams named with twin_name_stream).
 */
#include "twin.h"

#include <execinfo.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

struct twin_stream {
    int device;
    unsigned flags;
    int priority;
    bool legacy;
    std::string name;
    std::deque<std::pair<const char *, std::function<void()>>> q;
    uint64_t issued = 0, done = 0, demanded = 0;
    bool stop = false;
    std::condition_variable cv;
    std::thread worker;
    /* stream capture (under g_mu): the capture this stream takes part in, and its vector
     * clock there: operations recorded on each stream that this stream's work follows */
    struct Capture *cap = nullptr;
    std::map<twin_stream *, uint64_t> clock;
};

struct twin_event {
    unsigned flags;
    twin_stream *s = nullptr;
    uint64_t ticket = 0;
    double time_ms = 0;
    uint64_t cap_id = 0;                     /* recorded in this capture (0: none) */
    std::map<twin_stream *, uint64_t> clock; /* the recording stream's clock then */
};

/* An operation recorded during stream capture: make gives the closure of one execution;
 * ranges are the device memory it uses, checked again at every launch. */
struct twin_op {
    const char *what;
    std::function<std::function<void()>()> make;
    std::vector<std::pair<const void *, size_t>> ranges;
};

struct Capture {
    uint64_t id;
    twin_stream *origin;
    int mode;
    cudaError_t invalid = cudaSuccess; /* why the capture was invalidated */
    std::vector<twin_op> ops;
    std::vector<twin_stream *> members;
};

struct twin_graph {
    std::vector<twin_op> ops;
};

namespace twin
{

Stats g_stats;

namespace
{

struct Alloc {
    char *shadow;
    size_t bytes, map_bytes;
    int device;
};

constexpr size_t REGION = (size_t)1 << 38; /* 256 GiB of device addresses, never reused */
constexpr size_t PAGE = 4096;

/* Never destroyed: stream workers wait on them until the process ends. */
std::mutex &g_mu = *new std::mutex;                           /* streams, events */
std::condition_variable &g_cv = *new std::condition_variable; /* an operation completed */
std::mutex &g_amu = *new std::mutex;                          /* allocations */
std::map<uintptr_t, Alloc> g_allocs;
std::map<uintptr_t, size_t> g_pinned;
std::map<uintptr_t, int> g_locked; /* page -> queued H2D copies reading it (under g_amu) */
/* Page-locked ranges for the SIGSEGV handler, which cannot take a lock: a fixed table,
 * entries written under g_amu and read racily (only to word a fault message). */
constexpr int PINNED_TABLE = 256;
std::atomic<uintptr_t> g_pin_lo[PINNED_TABLE], g_pin_hi[PINNED_TABLE];
std::map<std::string, long long> g_sync_by, g_h2d_by; /* per stream name (under g_mu) */
int g_nstreams;
std::vector<size_t> g_used; /* bytes allocated per ordinal */
char *g_region;
size_t g_bump;
std::vector<twin_stream *> g_streams;
std::map<int, twin_stream *> g_legacy;
std::atomic<int> g_sticky{0};
thread_local int t_last = 0;
thread_local int t_device = 0;
/* stream capture: active captures by id (under g_mu), how many (read without the lock), the
 * device ranges a host thread looked up since its last enqueue while any capture is active */
std::map<uint64_t, Capture *> g_caps;
uint64_t g_cap_ids;
std::atomic<int> g_ncap{0};
thread_local bool t_worker = false;
thread_local std::vector<std::pair<const void *, size_t>> t_touched;
bool g_late;
long long g_fail_kernel = -1, g_fail_alloc = -1;
std::atomic<long long> g_nkernels{0}, g_nallocs{0};
std::vector<int> g_phys; /* visible ordinal -> physical twin GPU */
int g_ngpus;
size_t g_mem_bytes;

/* The device clock (header): per device ordinal, nanoseconds of CPU time its streams' workers
 * spent running operations; the worker running one adds it when the operation ends. */
constexpr int CLOCK_DEVICES = 256;
std::atomic<uint64_t> g_busy_ns[CLOCK_DEVICES];
thread_local int t_op_device = -1; /* a worker: its stream's device */
thread_local uint64_t t_op_start;  /* a worker: its thread's CPU time when its operation began */

uint64_t thread_cpu_ns()
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

std::atomic<uint64_t> &busy_of(int device)
{
    return g_busy_ns[(unsigned)device % CLOCK_DEVICES];
}

/* Run one operation of a stream of `device` on its worker, adding its CPU time to the clock. */
void run_timed(int device, const std::function<void()> &fn)
{
    t_op_device = device;
    t_op_start = thread_cpu_ns();
    fn();
    busy_of(device) += thread_cpu_ns() - t_op_start;
}

/* The device clock in milliseconds, read by an operation running on a worker: the device's
 * busy time so far, the running operation's part included (a graph launch runs many). */
double device_ms()
{
    if (t_op_device < 0)
        return 0;
    return (double)(busy_of(t_op_device).load() + (thread_cpu_ns() - t_op_start)) / 1e6;
}

/* 1 when a lies in page-locked host memory (racy read of the table; for messages only). */
bool in_pinned_table(uintptr_t a)
{
    for (int i = 0; i < PINNED_TABLE; i++)
        if (a >= g_pin_lo[i].load(std::memory_order_relaxed) &&
            a < g_pin_hi[i].load(std::memory_order_relaxed))
            return true;
    return false;
}

void on_segv(int sig, siginfo_t *si, void *)
{
    const char *a = (const char *)si->si_addr;
    if (in_pinned_table((uintptr_t)a)) {
        char msg[320];
        int n = snprintf(msg, sizeof msg,
                         "ddptrain-twin: host write to page-locked memory at %p while an "
                         "asynchronous copy from it is still queued: wait for the copy's event "
                         "before reusing the buffer\n",
                         (const void *)a);
        if (write(2, msg, (size_t)n) < 0)
            _exit(70);
        void *bt[32];
        backtrace_symbols_fd(bt, backtrace(bt, 32), 2);
        signal(sig, SIG_DFL);
        return;
    }
    if (g_region && a >= g_region && a < g_region + REGION) {
        char msg[256];
        int n = snprintf(msg, sizeof msg,
                         "ddptrain-twin: host access to device memory at %p: a device pointer "
                         "was dereferenced on the host (copy it with cudaMemcpy first)\n",
                         (const void *)a);
        if (write(2, msg, (size_t)n) < 0)
            _exit(70);
        void *bt[32];
        backtrace_symbols_fd(bt, backtrace(bt, 32), 2);
    }
    signal(sig, SIG_DFL); /* the faulting access repeats and kills the process */
}

/* Reads the environment once: devices, memory, late mode, injection. Called under g_mu or
 * at first use through init(). */
void init_once()
{
    const char *e = getenv("DDP_EMU_GPUS");
    g_ngpus = e && *e ? atoi(e) : 4;
    if (g_ngpus < 0)
        g_ngpus = 0;
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    std::vector<bool> used((size_t)g_ngpus + 1, false);
    if (!cvd) {
        for (int i = 0; i < g_ngpus; i++)
            g_phys.push_back(i);
    } else {
        std::string s(cvd);
        size_t pos = 0;
        while (pos < s.size()) {
            size_t c = s.find(',', pos);
            std::string tok = s.substr(pos, c == std::string::npos ? std::string::npos : c - pos);
            char *end = nullptr;
            long v = strtol(tok.c_str(), &end, 10);
            if (tok.empty() || *end || v < 0 || v >= g_ngpus || used[(size_t)v])
                break; /* CUDA stops at the first entry that is not an unused ordinal */
            used[(size_t)v] = true;
            g_phys.push_back((int)v);
            if (c == std::string::npos)
                break;
            pos = c + 1;
        }
    }
    g_used.assign(g_phys.size(), 0);
    e = getenv("DDP_EMU_MEM_MIB");
    g_mem_bytes = (size_t)(e && *e ? atoll(e) : 16384) << 20;
    e = getenv("DDP_EMU_LATE");
    g_late = e && strcmp(e, "1") == 0;
    e = getenv("DDP_EMU_FAIL");
    if (!on_rank(getenv("DDP_EMU_FAIL_RANK"))) /* inject on this rank only */
        e = nullptr;
    if (e && strncmp(e, "kernel:", 7) == 0)
        g_fail_kernel = atoll(e + 7);
    else if (e && strncmp(e, "alloc:", 6) == 0)
        g_fail_alloc = atoll(e + 6);
}

void init()
{
    static std::once_flag once;
    std::call_once(once, init_once);
}

void reserve_region()
{
    if (g_region)
        return;
    void *p = mmap(nullptr, REGION, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "ddptrain-twin: cannot reserve the device address range\n");
        abort();
    }
    g_region = (char *)p;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, nullptr);
}

cudaError_t fail(cudaError_t e)
{
    t_last = e;
    return e;
}

/* Worker of one stream: runs its operations in order; in late mode only demanded ones. */
void worker_loop(twin_stream *s)
{
    t_worker = true;
    std::unique_lock<std::mutex> lk(g_mu);
    for (;;) {
        s->cv.wait(
            lk, [&] { return s->stop || (!s->q.empty() && (!g_late || s->demanded > s->done)); });
        if (s->q.empty() && s->stop)
            return;
        if (s->q.empty())
            continue;
        auto op = std::move(s->q.front());
        s->q.pop_front();
        lk.unlock();
        if (!g_sticky.load())
            run_timed(s->device, op.second);
        lk.lock();
        s->done++;
        g_cv.notify_all();
    }
}

twin_stream *new_stream(int device, unsigned flags, int priority, bool legacy)
{
    twin_stream *s = new twin_stream;
    s->device = device;
    s->flags = flags;
    s->priority = priority;
    s->legacy = legacy;
    s->name = legacy ? "legacy" : "s" + std::to_string(++g_nstreams);
    s->worker = std::thread(worker_loop, s);
    g_streams.push_back(s);
    return s;
}

/* Under g_mu: the stream should run up to ticket t. */
void demand(twin_stream *s, uint64_t t)
{
    if (t > s->demanded) {
        s->demanded = t;
        s->cv.notify_one();
    }
}

/* Under g_mu (lk): wait until s has run its first t operations. */
void wait_ticket(std::unique_lock<std::mutex> &lk, twin_stream *s, uint64_t t)
{
    demand(s, t);
    g_cv.wait(lk, [&] { return s->done >= t; });
}

twin_stream *legacy_of(int device)
{
    auto it = g_legacy.find(device);
    if (it != g_legacy.end())
        return it->second;
    return g_legacy[device] = new_stream(device, 0, 0, true);
}

/* Under g_mu: queue an operation; the legacy stream and blocking streams order each other. */
void push(twin_stream *s, const char *what, std::function<void()> fn)
{
    std::vector<std::pair<twin_stream *, uint64_t>> deps;
    if (s->legacy) {
        for (twin_stream *b : g_streams)
            if (b != s && !b->legacy && b->device == s->device && !(b->flags & 1) &&
                b->issued > b->done)
                deps.push_back({b, b->issued});
    } else if (!(s->flags & 1)) {
        auto it = g_legacy.find(s->device);
        if (it != g_legacy.end() && it->second->issued > it->second->done)
            deps.push_back({it->second, it->second->issued});
    }
    for (auto &d : deps) {
        twin_stream *o = d.first;
        uint64_t t = d.second;
        s->q.push_back({"implicit legacy-stream order", [o, t] {
                            std::unique_lock<std::mutex> lk(g_mu);
                            wait_ticket(lk, o, t);
                        }});
        s->issued++;
    }
    s->q.push_back({what, std::move(fn)});
    s->issued++;
    s->cv.notify_one();
}

enum Space { PAGEABLE, PINNED, DEVICE };

Space space_of(const void *p)
{
    if (in_device_range(p))
        return DEVICE;
    std::lock_guard<std::mutex> lk(g_amu);
    auto it = g_pinned.upper_bound((uintptr_t)p);
    if (it != g_pinned.begin()) {
        --it;
        if ((uintptr_t)p < it->first + it->second)
            return PINNED;
    }
    return PAGEABLE;
}

/* Under g_amu: enter or clear a page-locked range in the fault handler's table. */
void pin_table_add(uintptr_t lo, size_t n)
{
    for (int i = 0; i < PINNED_TABLE; i++)
        if (g_pin_hi[i].load() == 0) {
            g_pin_lo[i].store(lo);
            g_pin_hi[i].store(lo + n);
            return;
        }
}
void pin_table_del(uintptr_t lo)
{
    for (int i = 0; i < PINNED_TABLE; i++)
        if (g_pin_lo[i].load() == lo) {
            g_pin_hi[i].store(0);
            g_pin_lo[i].store(0);
        }
}

/* The pages of [p, p + n): read-only to the host while a queued copy reads them (delta +1 at
 * the enqueue), read-write again when the last such copy ran (delta -1). Whole pages: a host
 * write to other bytes of a page that a queued copy reads faults too (allocate slots apart).
 * One mprotect per run of pages that change. The twin's bookkeeping, not the copy's work: on a
 * worker its CPU time is left out of the device clock (how long it takes depends on whether
 * the host queued the next copy before this one ran, i.e. on the host's scheduling). */
void lock_pages(const char *p, size_t n, int delta)
{
    const uint64_t t0 = t_op_device >= 0 ? thread_cpu_ns() : 0;
    {
        std::lock_guard<std::mutex> lk(g_amu);
        const uintptr_t lo = (uintptr_t)p & ~(uintptr_t)(PAGE - 1);
        const uintptr_t hi = ((uintptr_t)p + n + PAGE - 1) & ~(uintptr_t)(PAGE - 1);
        uintptr_t run = 0, run_end = 0; /* pages whose protection changes, not yet applied */
        const int prot = delta > 0 ? PROT_READ : PROT_READ | PROT_WRITE;
        for (uintptr_t pg = lo; pg < hi; pg += PAGE) {
            int &c = g_locked[pg];
            const int before = c;
            c += delta;
            const bool change = (before == 0 && c > 0) || (before > 0 && c <= 0);
            if (c <= 0)
                g_locked.erase(pg);
            if (change && run_end == pg) {
                run_end += PAGE;
                continue;
            }
            if (run_end > run)
                mprotect((void *)run, run_end - run, prot);
            run = run_end = change ? pg : 0;
            run_end += change ? PAGE : 0;
        }
        if (run_end > run)
            mprotect((void *)run, run_end - run, prot);
    }
    if (t_op_device >= 0)
        t_op_start += thread_cpu_ns() - t0; /* untimed */
}

/* Under g_mu: invalidate capture c because `call` did what a capture forbids; one line on
 * stderr names it (a host synchronisation sneaking into a captured step shows here). */
cudaError_t capture_violation(Capture *c, cudaError_t e, const char *call, const char *where)
{
    if (c->invalid == cudaSuccess) {
        c->invalid = e;
        fprintf(stderr,
                "ddptrain-twin: %s on %s during stream capture of stream %s: %s; the capture is "
                "invalidated\n",
                call, where, c->origin->name.c_str(), cudaGetErrorString(e));
    }
    return fail(e);
}

/* Under g_mu: the first active global-mode capture, or NULL. */
Capture *global_capture()
{
    for (auto &kv : g_caps)
        if (kv.second->mode == cudaStreamCaptureModeGlobal)
            return kv.second;
    return nullptr;
}

/* A call CUDA forbids while a global-mode capture is active (allocation, device-wide
 * synchronisation): every such capture is invalidated. */
cudaError_t forbidden_in_capture(const char *call)
{
    if (g_ncap.load() == 0)
        return cudaSuccess;
    std::lock_guard<std::mutex> lk(g_mu);
    cudaError_t r = cudaSuccess;
    for (auto &kv : g_caps)
        if (kv.second->mode == cudaStreamCaptureModeGlobal)
            r = capture_violation(kv.second, cudaErrorStreamCaptureUnsupported, call, "the device");
    return r;
}

/* Under g_mu: cudaStreamWaitEvent's part in stream capture. A stream waiting on an event
 * recorded in an active capture joins it (or, a member, takes the event's clock); a capturing
 * stream may not wait on work outside its capture. 0: not a capture matter; 1: done; -1: the
 * error is set (cudaGetLastError). */
int capture_wait(twin_stream *s, cudaEvent_t e)
{
    Capture *c = e->cap_id && g_caps.count(e->cap_id) ? g_caps[e->cap_id] : nullptr;
    if (!c && !s->cap)
        return 0;
    if (!c) {
        if (!e->s)
            return 1; /* never recorded (or in an ended capture): nothing to wait for */
        capture_violation(s->cap, cudaErrorStreamCaptureIsolation, "cudaStreamWaitEvent",
                          s->name.c_str());
        return -1;
    }
    if (s->cap && s->cap != c) {
        capture_violation(s->cap, cudaErrorStreamCaptureMerge, "cudaStreamWaitEvent",
                          s->name.c_str());
        return -1;
    }
    if (!s->cap) {
        s->cap = c;
        s->clock.clear();
        c->members.push_back(s);
    }
    for (auto &kv : e->clock)
        s->clock[kv.first] = std::max(s->clock[kv.first], kv.second);
    return 1;
}

cudaError_t sync_stream(twin_stream *s, const char *call = "cudaStreamSynchronize")
{
    g_stats.syncs++;
    std::unique_lock<std::mutex> lk(g_mu);
    g_sync_by[s->name]++;
    if (s->cap)
        return capture_violation(s->cap, cudaErrorStreamCaptureUnsupported, call, s->name.c_str());
    wait_ticket(lk, s, s->issued);
    return sticky();
}

const struct {
    int code;
    const char *name, *text;
} k_errors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration",
     "invalid configuration argument"},
    {cudaErrorInvalidDevicePointer, "cudaErrorInvalidDevicePointer", "invalid device pointer"},
    {cudaErrorInsufficientDriver, "cudaErrorInsufficientDriver",
     "CUDA driver version is insufficient for CUDA runtime version"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorIllegalAddress, "cudaErrorIllegalAddress",
     "an illegal memory access was encountered"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure"},
    {cudaErrorIllegalState, "cudaErrorIllegalState",
     "the operation cannot be performed in the present state"},
    {cudaErrorStreamCaptureUnsupported, "cudaErrorStreamCaptureUnsupported",
     "operation not permitted when stream is capturing"},
    {cudaErrorStreamCaptureInvalidated, "cudaErrorStreamCaptureInvalidated",
     "operation failed due to a previous error during capture"},
    {cudaErrorStreamCaptureMerge, "cudaErrorStreamCaptureMerge",
     "operation would result in a merge of separate capture sequences"},
    {cudaErrorStreamCaptureUnmatched, "cudaErrorStreamCaptureUnmatched",
     "capture was not ended in the same stream as it began"},
    {cudaErrorStreamCaptureUnjoined, "cudaErrorStreamCaptureUnjoined",
     "capturing stream has unjoined work"},
    {cudaErrorStreamCaptureIsolation, "cudaErrorStreamCaptureIsolation",
     "dependency created on uncaptured work in another stream"},
    {cudaErrorStreamCaptureImplicit, "cudaErrorStreamCaptureImplicit",
     "operation would make the legacy stream depend on a capturing blocking stream"},
    {cudaErrorCapturedEvent, "cudaErrorCapturedEvent",
     "operation not permitted on an event last recorded in a capturing stream"},
};

} // namespace

int in_device_range(const void *p)
{
    const char *a = (const char *)p;
    return g_region && a >= g_region && a < g_region + REGION;
}

void *dev_to_host(const void *p, size_t bytes)
{
    if (!p)
        return nullptr;
    std::lock_guard<std::mutex> lk(g_amu);
    auto it = g_allocs.upper_bound((uintptr_t)p);
    if (it == g_allocs.begin())
        return nullptr;
    --it;
    const uintptr_t off = (uintptr_t)p - it->first;
    if (off + bytes > it->second.bytes || off >= it->second.bytes)
        return nullptr;
    if (g_ncap.load() && !t_worker) /* a call being recorded checks these again at launch */
        t_touched.push_back({p, bytes});
    return it->second.shadow + off;
}

cudaError_t enqueue(cudaStream_t s, const char *what, std::function<void()> fn)
{
    return enqueue_op(s, what, [fn = std::move(fn)] { return fn; });
}

cudaError_t enqueue_op(cudaStream_t s, const char *what,
                       std::function<std::function<void()>()> make)
{
    init();
    if (cudaError_t e = sticky())
        return e;
    {
        std::lock_guard<std::mutex> lk(g_mu);
        twin_stream *st = s ? s : legacy_of(t_device);
        if (st->cap) { /* recorded, not run */
            st->clock[st]++;
            st->cap->ops.push_back({what, std::move(make), std::move(t_touched)});
            t_touched.clear();
            return st->cap->invalid ? fail(cudaErrorStreamCaptureInvalidated) : cudaSuccess;
        }
        t_touched.clear();
        if (st->legacy && g_ncap.load())
            if (Capture *c = global_capture())
                return capture_violation(c, cudaErrorStreamCaptureImplicit, what,
                                         "the legacy stream");
    }
    std::function<void()> fn = make();
    std::lock_guard<std::mutex> lk(g_mu);
    push(s ? s : legacy_of(t_device), what, std::move(fn));
    return cudaSuccess;
}

void device_fault(cudaError_t e, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "ddptrain-twin: GPU fault: %s\n", msg);
    int zero = 0;
    g_sticky.compare_exchange_strong(zero, e);
}

cudaError_t sticky(void)
{
    return g_sticky.load();
}
void set_last(cudaError_t e)
{
    t_last = e;
}

void run_at_cost(double ms, const std::function<void()> &fn)
{
    const uint64_t t0 = t_op_device >= 0 ? thread_cpu_ns() : 0;
    fn();
    if (t_op_device < 0)
        return;
    t_op_start += thread_cpu_ns() - t0; /* untimed, as lock_pages */
    busy_of(t_op_device) += (uint64_t)llround(ms * 1e6);
}

int inject_kernel_fault(void)
{
    init();
    g_stats.launches++;
    return ++g_nkernels == g_fail_kernel;
}

int on_rank(const char *only)
{
    if (!only || !*only)
        return 1;
    const char *r = getenv("RANK");
    for (const char *v : {"SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"})
        if (!r && getenv(v))
            r = getenv(v);
    return r && strcmp(r, only) == 0;
}

int current_device(void)
{
    return t_device;
}
int physical_id(int ordinal)
{
    init();
    return ordinal >= 0 && ordinal < (int)g_phys.size() ? g_phys[(size_t)ordinal] : -1;
}

const char *host_id(void)
{
    static char buf[256];
    if (!buf[0] && gethostname(buf, sizeof buf - 1) != 0)
        snprintf(buf, sizeof buf, "localhost");
    return buf;
}

} // namespace twin

using namespace twin;

/* ---- errors, devices --------------------------------------------------------------------- */

extern "C" {

const char *cudaGetErrorName(cudaError_t e)
{
    for (auto &k : k_errors)
        if (k.code == e)
            return k.name;
    return "cudaErrorUnknown";
}
const char *cudaGetErrorString(cudaError_t e)
{
    for (auto &k : k_errors)
        if (k.code == e)
            return k.text;
    return "unknown error";
}
cudaError_t cudaGetLastError(void)
{
    cudaError_t e = t_last ? t_last : sticky();
    t_last = 0;
    return e;
}
cudaError_t cudaPeekAtLastError(void)
{
    return t_last ? t_last : sticky();
}

cudaError_t cudaGetDeviceCount(int *n)
{
    init();
    *n = (int)g_phys.size();
    return g_phys.empty() ? fail(cudaErrorNoDevice) : cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int *v)
{
    init();
    *v = g_ngpus > 0 ? CUDART_VERSION : 0;
    return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int *v)
{
    *v = CUDART_VERSION;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int device)
{
    init();
    if (device < 0 || device >= (int)g_phys.size())
        return fail(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "ddptrain GPU twin %d", g_phys[(size_t)device]);
    p->major = 9;
    p->minor = 0;
    p->totalGlobalMem = g_mem_bytes;
    p->multiProcessorCount = 1;
    p->pciBusID = g_phys[(size_t)device];
    return cudaSuccess;
}
/* Twin GPU p sits at PCI 0000:p:00.0 (pciBusID = p), as the twin's NVML (nvml.cc) reports. */
cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device)
{
    init();
    if (device < 0 || device >= (int)g_phys.size())
        return fail(cudaErrorInvalidDevice);
    if (len < 13)
        return fail(cudaErrorInvalidValue);
    snprintf(pciBusId, (size_t)len, "0000:%02x:00.0", g_phys[(size_t)device]);
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int device)
{
    init();
    if (device < 0 || device >= (int)g_phys.size())
        return fail(cudaErrorInvalidDevice);
    t_device = device;
    return sticky();
}
cudaError_t cudaGetDevice(int *device)
{
    init();
    if (g_phys.empty())
        return fail(cudaErrorNoDevice);
    *device = t_device;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest)
{
    *least = 0;
    *greatest = -5;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    init();
    g_stats.syncs++;
    if (cudaError_t e = forbidden_in_capture("cudaDeviceSynchronize"))
        return e;
    std::unique_lock<std::mutex> lk(g_mu);
    g_sync_by["device"]++;
    for (twin_stream *s : g_streams)
        if (s->device == t_device)
            wait_ticket(lk, s, s->issued);
    return sticky();
}

/* ---- memory ------------------------------------------------------------------------------ */

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    init();
    if (g_phys.empty())
        return fail(cudaErrorNoDevice);
    if (cudaError_t e = sticky())
        return e;
    if (cudaError_t e = forbidden_in_capture("cudaMalloc"))
        return e;
    g_stats.allocs++;
    const size_t map_bytes = (bytes + PAGE - 1) / PAGE * PAGE + PAGE; /* + a guard page */
    std::lock_guard<std::mutex> lk(g_amu);
    reserve_region();
    if (++g_nallocs == g_fail_alloc || g_used[(size_t)t_device] + bytes > g_mem_bytes ||
        g_bump + map_bytes > REGION) {
        *p = nullptr;
        return fail(cudaErrorMemoryAllocation);
    }
    void *sh = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED)
        return fail(cudaErrorMemoryAllocation);
    mprotect((char *)sh + map_bytes - PAGE, PAGE, PROT_NONE);
    memset(sh, 0xa5, bytes); /* garbage, as cudaMalloc's memory is */
    char *dev = g_region + g_bump;
    g_bump += map_bytes;
    g_allocs[(uintptr_t)dev] = Alloc{(char *)sh, bytes, map_bytes, t_device};
    g_used[(size_t)t_device] += bytes;
    *p = dev;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
    init();
    if (!p) /* creates the context */
        return g_phys.empty() ? fail(cudaErrorNoDevice) : sticky();
    if (cudaError_t e = forbidden_in_capture("cudaFree"))
        return e;
    g_stats.frees++;
    cudaDeviceSynchronize(); /* cudaFree waits for the device, as CUDA's does */
    std::lock_guard<std::mutex> lk(g_amu);
    auto it = g_allocs.find((uintptr_t)p);
    if (it == g_allocs.end())
        return fail(cudaErrorInvalidValue);
    munmap(it->second.shadow, it->second.map_bytes);
    g_used[(size_t)it->second.device] -= it->second.bytes;
    g_allocs.erase(it);
    return sticky();
}

cudaError_t cudaMallocHost(void **p, size_t bytes)
{
    init();
    if (cudaError_t e = sticky())
        return e;
    if (cudaError_t e = forbidden_in_capture("cudaMallocHost"))
        return e;
    g_stats.allocs++;
    if (++g_nallocs == g_fail_alloc)
        return fail(cudaErrorMemoryAllocation);
    void *h = mmap(nullptr, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (h == MAP_FAILED)
        return fail(cudaErrorMemoryAllocation);
    std::lock_guard<std::mutex> lk(g_amu);
    reserve_region(); /* installs the fault handler */
    g_pinned[(uintptr_t)h] = bytes ? bytes : 1;
    pin_table_add((uintptr_t)h, bytes ? bytes : 1);
    *p = h;
    return cudaSuccess;
}
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned)
{
    return cudaMallocHost(p, bytes);
}

cudaError_t cudaFreeHost(void *p)
{
    if (!p)
        return sticky();
    if (cudaError_t e = forbidden_in_capture("cudaFreeHost"))
        return e;
    g_stats.frees++;
    cudaDeviceSynchronize(); /* as CUDA's: waits for work that may read the buffer */
    std::lock_guard<std::mutex> lk(g_amu);
    auto it = g_pinned.find((uintptr_t)p);
    if (it == g_pinned.end())
        return fail(cudaErrorInvalidValue);
    munmap(p, it->second);
    g_pinned.erase(it);
    pin_table_del((uintptr_t)p);
    return sticky();
}

/* Page-locks existing host memory: copies from it are then asynchronous (and checked as
 * cudaMallocHost's are). */
cudaError_t cudaHostRegister(void *p, size_t bytes, unsigned)
{
    init();
    if (!p || !bytes || in_device_range(p))
        return fail(cudaErrorInvalidValue);
    if (cudaError_t e = forbidden_in_capture("cudaHostRegister"))
        return e;
    std::lock_guard<std::mutex> lk(g_amu);
    reserve_region();
    if (g_pinned.count((uintptr_t)p))
        return fail(cudaErrorInvalidValue); /* CUDA: cudaErrorHostMemoryAlreadyRegistered */
    g_pinned[(uintptr_t)p] = bytes;
    pin_table_add((uintptr_t)p, bytes);
    return sticky();
}

cudaError_t cudaHostUnregister(void *p)
{
    cudaDeviceSynchronize(); /* no queued copy may still read it */
    std::lock_guard<std::mutex> lk(g_amu);
    auto it = g_pinned.find((uintptr_t)p);
    if (it == g_pinned.end())
        return fail(cudaErrorInvalidValue);
    g_pinned.erase(it);
    pin_table_del((uintptr_t)p);
    return sticky();
}

cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b)
{
    init();
    std::lock_guard<std::mutex> lk(g_amu);
    *total_b = g_mem_bytes;
    *free_b = g_used.empty() ? 0 : g_mem_bytes - g_used[(size_t)t_device];
    return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p)
{
    init();
    memset(a, 0, sizeof *a);
    switch (space_of(p)) {
    case DEVICE:
        a->type = cudaMemoryTypeDevice;
        a->devicePointer = (void *)p;
        break;
    case PINNED:
        a->type = cudaMemoryTypeHost;
        a->hostPointer = a->devicePointer = (void *)p;
        break;
    default:
        a->type = cudaMemoryTypeUnregistered;
        a->hostPointer = (void *)p;
    }
    return cudaSuccess;
}

/* ---- copies ------------------------------------------------------------------------------ */

cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t s)
{
    init();
    if (!bytes)
        return sticky();
    void *h = dev_to_host(p, bytes);
    if (!h)
        return fail(cudaErrorInvalidValue);
    return enqueue(s, "cudaMemsetAsync", [h, v, bytes] { memset(h, v, bytes); });
}

cudaError_t cudaMemset(void *p, int v, size_t bytes)
{
    return cudaMemsetAsync(p, v, bytes, nullptr);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind k,
                            cudaStream_t s)
{
    init();
    if (cudaError_t e = sticky())
        return e;
    if (!bytes)
        return cudaSuccess;
    const Space ds = space_of(dst), ss = space_of(src);
    const bool dd = ds == DEVICE, sd = ss == DEVICE;
    if ((k == cudaMemcpyHostToDevice && (!dd || sd)) ||
        (k == cudaMemcpyDeviceToHost && (dd || !sd)) ||
        (k == cudaMemcpyDeviceToDevice && (!dd || !sd)) ||
        (k == cudaMemcpyHostToHost && (dd || sd)))
        return fail(cudaErrorInvalidValue);
    char *dh = dd ? (char *)dev_to_host(dst, bytes) : (char *)dst;
    const char *sh = sd ? (const char *)dev_to_host(src, bytes) : (const char *)src;
    if (!dh || !sh)
        return fail(cudaErrorInvalidValue);
    if (dd && !sd) {
        g_stats.h2d_bytes += (long long)bytes;
        std::lock_guard<std::mutex> lk(g_mu);
        g_h2d_by[(s ? s : legacy_of(t_device))->name]++;
    }
    if (sd && !dd)
        g_stats.d2h_bytes += (long long)bytes;
    if ((ss == PINNED && dd) || (ds == PINNED && sd))
        g_stats.pinned_copies++;
    if ((ss == PAGEABLE && !sd) || (ds == PAGEABLE && !dd)) {
        std::lock_guard<std::mutex> lk(g_mu);
        twin_stream *st = s ? s : legacy_of(t_device);
        if (st->cap) /* CUDA cannot capture a copy from or to pageable memory */
            return capture_violation(st->cap, cudaErrorStreamCaptureUnsupported,
                                     "cudaMemcpyAsync from or to pageable memory",
                                     st->name.c_str());
    }
    if (ss == PINNED && dd) { /* read when it runs: the host must not write src before then */
        return enqueue_op(s, "cudaMemcpyAsync (page-locked H2D)", [dh, sh, bytes] {
            lock_pages(sh, bytes, +1); /* at each execution's enqueue */
            return std::function<void()>([dh, sh, bytes] {
                memcpy(dh, sh, bytes);
                lock_pages(sh, bytes, -1);
            });
        });
    }
    if (ss == PAGEABLE && dd) { /* staged at the call; the caller may reuse src at once */
        g_stats.pageable_copies++;
        auto stage = std::make_shared<std::vector<char>>(sh, sh + bytes);
        return enqueue(s, "cudaMemcpyAsync (pageable H2D)",
                       [dh, stage] { memcpy(dh, stage->data(), stage->size()); });
    }
    cudaError_t e = enqueue(s, "cudaMemcpyAsync", [dh, sh, bytes] { memmove(dh, sh, bytes); });
    if (e == cudaSuccess && !dd && (ds == PAGEABLE || ss == PAGEABLE)) {
        /* to pageable memory: returns only once the copy is done */
        g_stats.pageable_copies++;
        twin_stream *st;
        {
            std::lock_guard<std::mutex> lk(g_mu);
            st = s ? s : legacy_of(t_device);
        }
        e = sync_stream(st);
    }
    return e;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind k)
{
    init();
    if (cudaError_t e = forbidden_in_capture("cudaMemcpy (synchronous)"))
        return e;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, k, nullptr);
    if (e != cudaSuccess)
        return e;
    twin_stream *s;
    {
        std::lock_guard<std::mutex> lk(g_mu);
        s = legacy_of(t_device);
    }
    return sync_stream(s);
}

/* ---- streams and events ------------------------------------------------------------------ */

cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned flags, int priority)
{
    init();
    if (g_phys.empty())
        return fail(cudaErrorNoDevice);
    std::lock_guard<std::mutex> lk(g_mu);
    *s = new_stream(t_device, flags, priority, false);
    return sticky();
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    return cudaStreamCreateWithPriority(s, flags, 0);
}
cudaError_t cudaStreamCreate(cudaStream_t *s)
{
    return cudaStreamCreateWithPriority(s, 0, 0);
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    if (!s)
        return fail(cudaErrorInvalidResourceHandle);
    std::unique_lock<std::mutex> lk(g_mu);
    /* CUDA lets queued work finish; the worker drains it, then ends */
    demand(s, s->issued);
    s->stop = true;
    s->cv.notify_one();
    g_streams.erase(std::find(g_streams.begin(), g_streams.end(), s));
    std::thread w = std::move(s->worker);
    lk.unlock();
    w.join();
    delete s;
    return sticky();
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    init();
    if (!s) {
        std::lock_guard<std::mutex> lk(g_mu);
        s = legacy_of(t_device);
    }
    return sync_stream(s);
}

cudaError_t cudaStreamQuery(cudaStream_t s)
{
    std::lock_guard<std::mutex> lk(g_mu);
    if (!s)
        s = legacy_of(t_device);
    if (s->cap)
        return capture_violation(s->cap, cudaErrorStreamCaptureUnsupported, "cudaStreamQuery",
                                 s->name.c_str());
    if (s->done >= s->issued)
        return sticky();
    demand(s, s->issued);
    return cudaErrorNotReady;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned)
{
    if (!e)
        return fail(cudaErrorInvalidResourceHandle);
    twin_stream *o;
    uint64_t t;
    {
        std::lock_guard<std::mutex> lk(g_mu);
        if (int r = capture_wait(s ? s : legacy_of(t_device), e))
            return r < 0 ? cudaPeekAtLastError() : cudaSuccess;
        o = e->s;
        t = e->ticket;
    }
    if (!o || !t)
        return sticky(); /* never recorded: nothing to wait for */
    return enqueue(s, "cudaStreamWaitEvent", [o, t] {
        std::unique_lock<std::mutex> lk(g_mu);
        wait_ticket(lk, o, t);
    });
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    init();
    *e = new twin_event;
    (*e)->flags = flags;
    return sticky();
}
cudaError_t cudaEventCreate(cudaEvent_t *e)
{
    return cudaEventCreateWithFlags(e, 0);
}
cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    delete e;
    return sticky();
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    if (!e)
        return fail(cudaErrorInvalidResourceHandle);
    if (!(e->flags & cudaEventDisableTiming)) {
        cudaError_t r = enqueue(s, "cudaEventRecord", [e] { e->time_ms = device_ms(); });
        if (r != cudaSuccess)
            return r;
    }
    if (cudaError_t r = sticky())
        return r;
    std::lock_guard<std::mutex> lk(g_mu);
    if (!s)
        s = legacy_of(t_device);
    e->cap_id = 0;
    if (s->cap) { /* a dependency inside the capture, not a point in the stream */
        s->clock[s]++;
        e->cap_id = s->cap->id;
        e->clock = s->clock;
        e->s = nullptr;
        e->ticket = 0;
        return s->cap->invalid ? fail(cudaErrorStreamCaptureInvalidated) : cudaSuccess;
    }
    e->s = s;
    e->ticket = s->issued;
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e)
{
    std::lock_guard<std::mutex> lk(g_mu);
    if (e->cap_id && g_caps.count(e->cap_id))
        return capture_violation(g_caps[e->cap_id], cudaErrorCapturedEvent, "cudaEventQuery",
                                 "an event recorded in the capture");
    if (!e->s || e->s->done >= e->ticket)
        return sticky();
    demand(e->s, e->ticket);
    return cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    g_stats.syncs++;
    std::unique_lock<std::mutex> lk(g_mu);
    if (e->cap_id && g_caps.count(e->cap_id))
        return capture_violation(g_caps[e->cap_id], cudaErrorCapturedEvent, "cudaEventSynchronize",
                                 "an event recorded in the capture");
    if (e->s) {
        g_sync_by[e->s->name]++;
        wait_ticket(lk, e->s, e->ticket);
    }
    return sticky();
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    if ((a->flags | b->flags) & cudaEventDisableTiming)
        return fail(cudaErrorInvalidResourceHandle);
    *ms = (float)(b->time_ms - a->time_ms);
    return sticky();
}

/* ---- stream capture and graphs ----------------------------------------------------------- */

cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode)
{
    init();
    if (!s)
        return fail(cudaErrorStreamCaptureUnsupported); /* the legacy stream cannot capture */
    if (cudaError_t e = sticky())
        return e;
    std::lock_guard<std::mutex> lk(g_mu);
    if (s->cap)
        return fail(cudaErrorIllegalState);
    Capture *c = new Capture;
    c->id = ++g_cap_ids;
    c->origin = s;
    c->mode = mode;
    c->members.push_back(s);
    g_caps[c->id] = c;
    g_ncap++;
    s->cap = c;
    s->clock.clear();
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *graph)
{
    init();
    std::lock_guard<std::mutex> lk(g_mu);
    if (!s || !s->cap)
        return fail(cudaErrorIllegalState);
    Capture *c = s->cap;
    if (c->origin != s)
        return capture_violation(c, cudaErrorStreamCaptureUnmatched, "cudaStreamEndCapture",
                                 s->name.c_str());
    cudaError_t e = c->invalid ? cudaErrorStreamCaptureInvalidated : cudaSuccess;
    for (twin_stream *m : c->members)
        if (!e && m != s && s->clock[m] < m->clock[m]) {
            fprintf(stderr,
                    "ddptrain-twin: cudaStreamEndCapture on stream %s: stream %s forked into the "
                    "capture and was not joined back (wait on an event recorded after its last "
                    "work)\n",
                    s->name.c_str(), m->name.c_str());
            e = cudaErrorStreamCaptureUnjoined;
        }
    for (twin_stream *m : c->members) {
        m->cap = nullptr;
        m->clock.clear();
    }
    g_caps.erase(c->id);
    g_ncap--;
    *graph = nullptr;
    if (!e) {
        *graph = new twin_graph;
        (*graph)->ops = std::move(c->ops);
    }
    delete c;
    return e ? fail(e) : sticky();
}

cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *status)
{
    init();
    std::lock_guard<std::mutex> lk(g_mu);
    twin_stream *st = s ? s : legacy_of(t_device);
    *status = !st->cap           ? cudaStreamCaptureStatusNone
              : st->cap->invalid ? cudaStreamCaptureStatusInvalidated
                                 : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long)
{
    if (!exec || !graph)
        return fail(cudaErrorInvalidValue);
    *exec = new twin_graph(*graph);
    return sticky();
}

/* The recorded operations in capture order on s (one valid order of the graph). An operation
 * whose device memory was freed since the capture faults instead of running, as a kernel given
 * a freed pointer does. */
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s)
{
    init();
    if (!exec)
        return fail(cudaErrorInvalidResourceHandle);
    if (cudaError_t e = sticky())
        return e;
    g_stats.graph_launches++;
    g_stats.graph_ops += (long long)exec->ops.size();
    std::vector<std::pair<const char *, std::function<void()>>> run;
    for (const twin_op &op : exec->ops) {
        const void *freed = nullptr;
        for (auto &r : op.ranges)
            if (!freed && !dev_to_host(r.first, r.second))
                freed = r.first;
        if (!freed) {
            run.push_back({op.what, op.make()});
            continue;
        }
        std::string what(op.what);
        run.push_back({op.what, [what, freed] {
                           device_fault(cudaErrorIllegalAddress,
                                        "graph launch: %s uses device memory at %p that was "
                                        "freed after the capture",
                                        what.c_str(), freed);
                       }});
    }
    t_touched.clear();
    std::lock_guard<std::mutex> lk(g_mu);
    twin_stream *st = s ? s : legacy_of(t_device);
    if (st->cap)
        return capture_violation(st->cap, cudaErrorStreamCaptureUnsupported, "cudaGraphLaunch",
                                 st->name.c_str());
    for (auto &r : run)
        push(st, r.first, std::move(r.second));
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec)
{
    delete exec;
    return sticky();
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
    delete graph;
    return sticky();
}

/* ---- stats ------------------------------------------------------------------------------- */

void twin_step_end(int rank, long step, int log_step)
{
    static std::mutex mu;
    const char *path = getenv("DDP_EMU_STATS");
    if (!path || !*path)
        return;
    std::lock_guard<std::mutex> lk(mu);
    char name[4096];
    snprintf(name, sizeof name, "%s.%d", path, rank);
    FILE *f = fopen(name, "a");
    if (!f)
        return;
    fprintf(f,
            "{\"step\":%ld,\"log_step\":%s,\"syncs\":%lld,\"allocs\":%lld,\"frees\":%lld,"
            "\"launches\":%lld,\"collectives\":%lld,\"h2d_bytes\":%lld,\"d2h_bytes\":%lld,"
            "\"pageable_copies\":%lld,\"pinned_copies\":%lld,\"graph_launches\":%lld,"
            "\"graph_ops\":%lld",
            step, log_step ? "true" : "false", g_stats.syncs.exchange(0),
            g_stats.allocs.exchange(0), g_stats.frees.exchange(0), g_stats.launches.exchange(0),
            g_stats.collectives.exchange(0), g_stats.h2d_bytes.exchange(0),
            g_stats.d2h_bytes.exchange(0), g_stats.pageable_copies.exchange(0),
            g_stats.pinned_copies.exchange(0), g_stats.graph_launches.exchange(0),
            g_stats.graph_ops.exchange(0));
    {
        std::lock_guard<std::mutex> glk(g_mu);
        for (auto *m : {&g_sync_by, &g_h2d_by}) {
            fprintf(f, ",\"%s\":{", m == &g_sync_by ? "syncs_by_stream" : "h2d_by_stream");
            const char *sep = "";
            for (auto &kv : *m) {
                fprintf(f, "%s\"%s\":%lld", sep, kv.first.c_str(), kv.second);
                sep = ",";
            }
            fprintf(f, "}");
            m->clear();
        }
    }
    fprintf(f, "}\n");
    fclose(f);
}

void twin_name_stream(cudaStream_t s, const char *name)
{
    std::lock_guard<std::mutex> lk(g_mu);
    if (s && name)
        s->name = name;
}

} /* extern "C" */
