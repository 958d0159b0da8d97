/*
 * kernels.cc - the GPU twin's kernel executor (see twin_kernels.h): one block at a time, its
 * threads as fibers switched at barriers. A kernel seen once without any barrier runs its
 * threads as a plain loop afterwards (the fast path); a barrier there is reported.
 *
 * Fibers: one per thread slot, made once (ucontext) and kept: each runs thread bodies in a
 * loop, parking after each. Switches are _setjmp/_longjmp, which, unlike swapcontext, make no
 * system call (swapcontext saves and restores the signal mask: two syscalls per switch, most
 * of a reduction kernel's time).
 */
#undef _FORTIFY_SOURCE /* its longjmp check refuses jumps between stacks, what fibers do */
#include "twin_kernels.h"

#include <setjmp.h>
#include <stdio.h>
#include <sys/mman.h>
#include <ucontext.h>

#include <map>
#include <mutex>
#include <string>

dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace
{

constexpr unsigned MAX_THREADS = 1024;
constexpr size_t STACK = 128 * 1024;

enum { RUN, WAIT, DONE };

struct Fiber {
    ucontext_t ctx; /* for its first entry */
    jmp_buf jb;     /* where it stopped: a barrier, or parked after a body */
    int state, bar; /* bar: 0 the block's barrier, 1 + w warp w's */
    bool born;      /* entered once; false again after a deadlock abandoned its stack */
};

std::mutex &g_kmu = *new std::mutex; /* one kernel at a time in the process */
std::map<const void *, bool> g_uses_barrier;
Fiber g_f[MAX_THREADS];
char *g_stacks;
jmp_buf g_sched;
unsigned g_cur, g_nt;
bool g_seq, g_barrier_seen;
const std::function<void()> *g_body;
uint64_t g_shfl[MAX_THREADS / 32][32];
const char *g_name;

/* A fiber's life: the current block's body for thread g_cur, then park until resumed. */
void fiber_main()
{
    for (;;) {
        (*g_body)();
        Fiber &f = g_f[g_cur];
        f.state = DONE;
        if (!_setjmp(f.jb))
            _longjmp(g_sched, 1);
    }
}

/* Run fiber t until it waits at a barrier or finishes its body. */
void resume(unsigned t)
{
    Fiber &f = g_f[t];
    g_cur = t;
    threadIdx = dim3(t, 0, 0);
    if (_setjmp(g_sched))
        return;
    if (f.born)
        _longjmp(f.jb, 1);
    f.born = true;
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = g_stacks + STACK * t;
    f.ctx.uc_stack.ss_size = STACK;
    f.ctx.uc_link = nullptr; /* fiber_main never returns */
    makecontext(&f.ctx, fiber_main, 0);
    setcontext(&f.ctx);
}

void barrier(int bar)
{
    if (g_seq) {
        fprintf(stderr,
                "ddptrain-twin: kernel %s reached a barrier after launches that did "
                "not: the twin cannot run it (make its barriers unconditional)\n",
                g_name);
        abort();
    }
    g_barrier_seen = true;
    Fiber &f = g_f[g_cur];
    f.state = WAIT;
    f.bar = bar;
    if (!_setjmp(f.jb))
        _longjmp(g_sched, 1);
}

/* Release the threads waiting at a barrier every live participant has reached. */
bool release()
{
    bool any = false, all_block = true, live = false;
    for (unsigned t = 0; t < g_nt; t++)
        if (g_f[t].state != DONE) {
            live = true;
            if (g_f[t].state != WAIT || g_f[t].bar != 0)
                all_block = false;
        }
    if (!live)
        return false;
    if (all_block) {
        for (unsigned t = 0; t < g_nt; t++)
            if (g_f[t].state == WAIT)
                g_f[t].state = RUN;
        return true;
    }
    for (unsigned w = 0; w * 32 < g_nt; w++) {
        bool all = true, some = false;
        for (unsigned t = 32 * w; t < g_nt && t < 32 * w + 32; t++)
            if (g_f[t].state != DONE) {
                some = true;
                if (g_f[t].state != WAIT || g_f[t].bar != (int)(1 + w))
                    all = false;
            }
        if (some && all) {
            for (unsigned t = 32 * w; t < g_nt && t < 32 * w + 32; t++)
                if (g_f[t].state == WAIT)
                    g_f[t].state = RUN;
            any = true;
        }
    }
    return any;
}

/* One block as fibers. false on a deadlock (threads waiting at different barriers). */
bool run_fibers()
{
    if (!g_stacks) {
        void *p = mmap(nullptr, STACK * MAX_THREADS, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) {
            fprintf(stderr, "ddptrain-twin: no memory for kernel fiber stacks\n");
            abort();
        }
        g_stacks = (char *)p;
    }
    for (unsigned t = 0; t < g_nt; t++)
        g_f[t].state = RUN;
    for (;;) {
        for (unsigned t = 0; t < g_nt; t++)
            if (g_f[t].state == RUN)
                resume(t);
        if (release())
            continue;
        bool ok = true;
        for (unsigned t = 0; t < g_nt; t++)
            if (g_f[t].state != DONE) {
                g_f[t].born = false; /* stuck mid-kernel: a fresh fiber next time */
                ok = false;
            }
        return ok;
    }
}

void execute(const char *name, const void *key, dim3 grid, dim3 block,
             const std::function<void()> &body)
{
    std::lock_guard<std::mutex> lk(g_kmu);
    auto it = g_uses_barrier.find(key);
    g_seq = it != g_uses_barrier.end() && !it->second;
    g_barrier_seen = false;
    g_name = name;
    g_body = &body;
    g_nt = block.x;
    blockDim = block;
    gridDim = grid;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                blockIdx = dim3(x, y, z);
                if (g_seq) {
                    for (unsigned t = 0; t < g_nt; t++) {
                        threadIdx = dim3(t, 0, 0);
                        body();
                    }
                } else if (!run_fibers()) {
                    twin::device_fault(cudaErrorLaunchFailure,
                                       "kernel %s: threads of block %u "
                                       "wait at different barriers (divergent __syncthreads)",
                                       name, x);
                    return;
                }
            }
    if (!g_seq)
        g_uses_barrier[key] = g_barrier_seen;
}

} // namespace

void __syncthreads(void)
{
    barrier(0);
}

uint64_t twin_shfl(uint64_t bits, unsigned src)
{
    const unsigned lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    g_shfl[w][lane] = bits;
    barrier((int)(1 + w));
    const uint64_t r = src < 32 ? g_shfl[w][src] : bits;
    barrier((int)(1 + w));
    return r;
}

void twin::launch(const char *name, const void *key, dim3 grid, dim3 block, cudaStream_t s,
                  std::function<void()> body, int bad_arg, const void *bad_ptr)
{
    const unsigned nt = block.x * block.y * block.z;
    /* a GPU's grid limits: x up to 2^31 - 1, y and z up to 65535 */
    if (nt == 0 || nt > MAX_THREADS || block.y != 1 || block.z != 1 || grid.x == 0 || grid.y == 0 ||
        grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535u || grid.z > 65535u) {
        set_last(cudaErrorInvalidConfiguration);
        return;
    }
    const bool inject = inject_kernel_fault();
    std::string nm(name);
    cudaError_t e;
    if (bad_arg >= 0)
        e = enqueue(s, name, [nm, bad_arg, bad_ptr] {
            device_fault(cudaErrorIllegalAddress,
                         "kernel %s: argument %d (%p) is not device "
                         "memory: a host or freed pointer was passed to a kernel",
                         nm.c_str(), bad_arg + 1, bad_ptr);
        });
    else if (inject)
        e = enqueue(s, name, [nm] {
            device_fault(cudaErrorIllegalAddress, "kernel %s: fault injected by DDP_EMU_FAIL",
                         nm.c_str());
        });
    else
        e = enqueue(s, name, [name, key, grid, block, body = std::move(body)] {
            execute(name, key, grid, block, body);
        });
    if (e != cudaSuccess)
        set_last(e);
}
