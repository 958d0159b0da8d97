/* nvml.c - GPU health from NVML, opened at run time (see nvml.h). */
#include "core/nvml.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dl.h"
#include "core/util.h"

/* ---- NVML's API, declared after NVIDIA's public nvml.h (only what is used) ---------------- */

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct nvmlEventSet_st *nvmlEventSet_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_TIMEOUT 10
#define NVML_MEMORY_ERROR_TYPE_CORRECTED 0
#define NVML_MEMORY_ERROR_TYPE_UNCORRECTED 1
#define NVML_VOLATILE_ECC 0
#define NVML_AGGREGATE_ECC 1
#define NVML_TEMPERATURE_GPU 0
#define NVML_TEMPERATURE_THRESHOLD_SLOWDOWN 1
#define NVML_CLOCK_SM 1
#define NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS 0
#define NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR 1
#define nvmlEventTypeXidCriticalError 0x8ull

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType, eventData;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;

/* The table dl fills: the first NVML_REQUIRED must be there, the rest may be missing. */
struct nvml_api {
    nvmlReturn_t (*init)(void);
    nvmlReturn_t (*shutdown)(void);
    nvmlReturn_t (*count)(unsigned int *);
    nvmlReturn_t (*by_index)(unsigned int, nvmlDevice_t *);
    nvmlReturn_t (*pci_info)(nvmlDevice_t, nvmlPciInfo_t *);
    nvmlReturn_t (*by_bus_id)(const char *, nvmlDevice_t *);
    nvmlReturn_t (*index)(nvmlDevice_t, unsigned int *);
    nvmlReturn_t (*ecc)(nvmlDevice_t, int, int, unsigned long long *);
    nvmlReturn_t (*remapped)(nvmlDevice_t, unsigned int *, unsigned int *, unsigned int *,
                             unsigned int *);
    nvmlReturn_t (*retired)(nvmlDevice_t, int, unsigned int *, unsigned long long *);
    nvmlReturn_t (*retire_pending)(nvmlDevice_t, int *);
    nvmlReturn_t (*reasons)(nvmlDevice_t, unsigned long long *);
    nvmlReturn_t (*reasons_old)(nvmlDevice_t, unsigned long long *);
    nvmlReturn_t (*clock)(nvmlDevice_t, int, unsigned int *);
    nvmlReturn_t (*temp)(nvmlDevice_t, int, unsigned int *);
    nvmlReturn_t (*temp_threshold)(nvmlDevice_t, int, unsigned int *);
    nvmlReturn_t (*power)(nvmlDevice_t, unsigned int *);
    nvmlReturn_t (*power_limit)(nvmlDevice_t, unsigned int *);
    nvmlReturn_t (*set_create)(nvmlEventSet_t *);
    nvmlReturn_t (*set_free)(nvmlEventSet_t);
    nvmlReturn_t (*register_events)(nvmlDevice_t, unsigned long long, nvmlEventSet_t);
    nvmlReturn_t (*wait)(nvmlEventSet_t, nvmlEventData_t *, unsigned int);
};
#define NVML_REQUIRED 5 /* init, shutdown, count, by_index, pci_info: enough to find a GPU */

#define SYM(n, f)                       \
    {                                   \
        n, offsetof(struct nvml_api, f) \
    }
static const struct ddp_dl_sym nvml_syms[] = {
    SYM("nvmlInit_v2", init),
    SYM("nvmlShutdown", shutdown),
    SYM("nvmlDeviceGetCount_v2", count),
    SYM("nvmlDeviceGetHandleByIndex_v2", by_index),
    SYM("nvmlDeviceGetPciInfo_v3", pci_info),
    SYM("nvmlDeviceGetHandleByPciBusId_v2", by_bus_id),
    SYM("nvmlDeviceGetIndex", index),
    SYM("nvmlDeviceGetTotalEccErrors", ecc),
    SYM("nvmlDeviceGetRemappedRows", remapped),
    SYM("nvmlDeviceGetRetiredPages", retired),
    SYM("nvmlDeviceGetRetiredPagesPendingStatus", retire_pending),
    SYM("nvmlDeviceGetCurrentClocksEventReasons", reasons),
    SYM("nvmlDeviceGetCurrentClocksThrottleReasons", reasons_old),
    SYM("nvmlDeviceGetClockInfo", clock),
    SYM("nvmlDeviceGetTemperature", temp),
    SYM("nvmlDeviceGetTemperatureThreshold", temp_threshold),
    SYM("nvmlDeviceGetPowerUsage", power),
    SYM("nvmlDeviceGetEnforcedPowerLimit", power_limit),
    SYM("nvmlEventSetCreate", set_create),
    SYM("nvmlEventSetFree", set_free),
    SYM("nvmlDeviceRegisterEvents", register_events),
    SYM("nvmlEventSetWait_v2", wait),
};
#undef SYM

static struct nvml_api N;
static int g_open;        /* GPUs open now; NVML is initialised while > 0 */
static int g_loaded = -1; /* -1 not tried, 0 failed, 1 loaded */
static char g_why[256];

struct ddp_nvml_gpu {
    nvmlDevice_t dev;
    nvmlEventSet_t events; /* NULL: XID events not reported */
    int index;
    char bus_id[32];
};

/* Load the library once per process; 0 or -1 with the reason in g_why. */
static int nvml_load(void)
{
    if (g_loaded < 0) {
        static const char *const sonames[] = {"libnvidia-ml.so.1", NULL};
        static const struct ddp_dl_lib lib = {"NVML",
                                              sonames,
                                              "install the NVIDIA driver (it ships NVML)",
                                              "of driver 450 or newer",
                                              nvml_syms,
                                              sizeof nvml_syms / sizeof nvml_syms[0]};
        g_loaded = ddp_dl_open_some(&lib, NVML_REQUIRED, &N, g_why, sizeof g_why) == 0;
    }
    return g_loaded ? 0 : -1;
}

/* "DDDD:BB:DD.F" (any number of domain digits) into its numbers; 0 or -1. */
static int parse_bus_id(const char *s, unsigned *dom, unsigned *bus, unsigned *dev)
{
    unsigned fn;
    char tail;
    return sscanf(s, "%x:%x:%x.%x%c", dom, bus, dev, &fn, &tail) == 4 ? 0 : -1;
}

/* The NVML device at PCI domain:bus:device, by NVML's own lookup first, else by walking its
 * indices; 0 or -1. */
static int find_device(const char *bus_id, nvmlDevice_t *dev)
{
    unsigned dom, bus, d, n = 0;
    if (parse_bus_id(bus_id, &dom, &bus, &d) != 0)
        return -1;
    char nv[32];
    snprintf(nv, sizeof nv, "%08x:%02x:%02x.0", dom, bus, d);
    if (N.by_bus_id && N.by_bus_id(nv, dev) == NVML_SUCCESS)
        return 0;
    if (N.count(&n) != NVML_SUCCESS)
        return -1;
    for (unsigned i = 0; i < n; i++) {
        nvmlPciInfo_t p;
        if (N.by_index(i, dev) == NVML_SUCCESS && N.pci_info(*dev, &p) == NVML_SUCCESS &&
            p.domain == dom && p.bus == bus && p.device == d)
            return 0;
    }
    return -1;
}

/* Register for XID events on g (NULL set where NVML cannot). */
static void register_xids(ddp_nvml_gpu *g)
{
    if (!N.set_create || !N.register_events || !N.wait)
        return;
    if (N.set_create(&g->events) != NVML_SUCCESS) {
        g->events = NULL;
        return;
    }
    if (N.register_events(g->dev, nvmlEventTypeXidCriticalError, g->events) != NVML_SUCCESS) {
        if (N.set_free)
            N.set_free(g->events);
        g->events = NULL;
    }
}

ddp_nvml_gpu *ddp_nvml_gpu_open(const char *bus_id, char *err, size_t errlen)
{
    if (nvml_load() != 0) {
        ddp_err(err, errlen, "%s", g_why);
        return NULL;
    }
    if (g_open == 0) {
        nvmlReturn_t rc = N.init();
        if (rc != NVML_SUCCESS) {
            ddp_err(err, errlen, "nvmlInit_v2 failed (NVML error %d)", rc);
            return NULL;
        }
    }
    g_open++;
    nvmlDevice_t dev;
    if (find_device(bus_id, &dev) != 0) {
        ddp_err(err, errlen, "no GPU at PCI address %s in NVML", bus_id);
        if (--g_open == 0)
            N.shutdown();
        return NULL;
    }
    ddp_nvml_gpu *g = ddp_calloc(1, sizeof *g);
    g->dev = dev;
    unsigned idx;
    g->index = N.index && N.index(dev, &idx) == NVML_SUCCESS ? (int)idx : -1;
    nvmlPciInfo_t p;
    if (N.pci_info(dev, &p) == NVML_SUCCESS)
        snprintf(g->bus_id, sizeof g->bus_id, "%.31s", p.busId);
    else
        snprintf(g->bus_id, sizeof g->bus_id, "%.31s", bus_id);
    register_xids(g);
    return g;
}

void ddp_nvml_gpu_close(ddp_nvml_gpu *g)
{
    if (!g)
        return;
    if (g->events && N.set_free)
        N.set_free(g->events);
    free(g);
    if (--g_open == 0)
        N.shutdown();
}

/* One ECC counter, -1 where not reported (a GPU without ECC: NVML_ERROR_NOT_SUPPORTED). */
static int64_t ecc_count(const ddp_nvml_gpu *g, int type, int counter)
{
    unsigned long long n;
    return N.ecc && N.ecc(g->dev, type, counter, &n) == NVML_SUCCESS ? (int64_t)n : -1;
}

/* One unsigned reading through f(dev, arg, &v), -1 where not reported. */
static int32_t u32_arg(nvmlReturn_t (*f)(nvmlDevice_t, int, unsigned *), const ddp_nvml_gpu *g,
                       int arg)
{
    unsigned v;
    return f && f(g->dev, arg, &v) == NVML_SUCCESS ? (int32_t)v : -1;
}

/* Row remapping (Ampere and newer) and page retirement (older GPUs). */
static void read_memory_repair(const ddp_nvml_gpu *g, struct ddp_nvml_state *s)
{
    unsigned cor, unc, pend, fail;
    s->remap_cor = s->remap_unc = s->remap_pending = s->remap_failed = -1;
    if (N.remapped && N.remapped(g->dev, &cor, &unc, &pend, &fail) == NVML_SUCCESS) {
        s->remap_cor = (int32_t)cor;
        s->remap_unc = (int32_t)unc;
        s->remap_pending = pend != 0;
        s->remap_failed = fail != 0;
    }
    s->retired_pages = -1;
    const int causes[] = {NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
                          NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR};
    for (int i = 0; i < 2 && N.retired; i++) {
        unsigned n = 0; /* 0: only count them */
        nvmlReturn_t rc = N.retired(g->dev, causes[i], &n, NULL);
        if (rc != NVML_SUCCESS && rc != NVML_ERROR_INSUFFICIENT_SIZE)
            break;
        s->retired_pages = (s->retired_pages < 0 ? 0 : s->retired_pages) + (int32_t)n;
    }
    int pending;
    s->retire_pending =
        N.retire_pending && N.retire_pending(g->dev, &pending) == NVML_SUCCESS ? pending != 0 : -1;
}

void ddp_nvml_sample(ddp_nvml_gpu *g, int64_t *clock_reasons, int32_t *temp_c)
{
    unsigned long long r;
    nvmlReturn_t (*f)(nvmlDevice_t, unsigned long long *) = N.reasons ? N.reasons : N.reasons_old;
    *clock_reasons = f && f(g->dev, &r) == NVML_SUCCESS ? (int64_t)r : -1;
    *temp_c = u32_arg(N.temp, g, NVML_TEMPERATURE_GPU);
}

void ddp_nvml_read(ddp_nvml_gpu *g, struct ddp_nvml_state *s)
{
    memset(s, 0, sizeof *s);
    s->index = g->index;
    snprintf(s->bus_id, sizeof s->bus_id, "%s", g->bus_id);
    s->ecc_unc_vol = ecc_count(g, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC);
    s->ecc_cor_vol = ecc_count(g, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC);
    s->ecc_unc_agg = ecc_count(g, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC);
    s->ecc_cor_agg = ecc_count(g, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_AGGREGATE_ECC);
    read_memory_repair(g, s);
    ddp_nvml_sample(g, &s->clock_reasons, &s->temp_c);
    s->sm_mhz = u32_arg(N.clock, g, NVML_CLOCK_SM);
    s->temp_slowdown_c = u32_arg(N.temp_threshold, g, NVML_TEMPERATURE_THRESHOLD_SLOWDOWN);
    unsigned mw;
    s->power_mw = N.power && N.power(g->dev, &mw) == NVML_SUCCESS ? (int32_t)mw : -1;
    s->power_limit_mw =
        N.power_limit && N.power_limit(g->dev, &mw) == NVML_SUCCESS ? (int32_t)mw : -1;
}

int ddp_nvml_xids(ddp_nvml_gpu *g, uint32_t *xid, int max)
{
    if (!g->events)
        return -1;
    int n = 0;
    nvmlEventData_t e;
    /* timeout 0: only what is queued; a bounded loop, a storm of events cannot hold us */
    for (int i = 0; i < 4096 && N.wait(g->events, &e, 0) == NVML_SUCCESS; i++) {
        if (!(e.eventType & nvmlEventTypeXidCriticalError))
            continue;
        if (n < max)
            xid[n] = (uint32_t)e.eventData;
        n++;
    }
    return n;
}
