/*
 * nvml.cc - the GPU twin's NVML: built as libnvidia-ml.so.1 in the build tree (tests/twin), so
 * that ddptrain's real loader (core/nvml.c, dlopen through core/dl) opens it as it opens the
 * driver's. Exports the NVML functions ddptrain reads, with NVML's names, values and
 * signatures (NVIDIA's public nvml.h), and nothing else.
 *
 * Devices: DDP_EMU_GPUS per host (default 4), as the twin runtime; NVML ignores
 * CUDA_VISIBLE_DEVICES, as the driver's does. Twin GPU i sits at PCI 00000000:i:00.0 (the
 * runtime's cudaDeviceGetPCIBusId gives 0000:i:00.0). Each reports a healthy GPU: no ECC
 * errors, no remapped rows or retired pages, no clock event reason, 45 C against a slowdown
 * threshold of 90 C, 1980 MHz, 120 W of a 700 W limit.
 *
 * Faults (DDP_EMU_NVML_FAULT=FAULT[,FAULT...], FAULT = KIND[:N]@[HOST/]GPU): KIND on twin GPU
 * GPU (NVML's index) of the host HOST ($SLURMD_NODENAME, else the short host name; no HOST:
 * every host). Kinds:
 *   ecc[:N]          N (1) uncorrected volatile ECC errors (aggregate too)
 *   corrected[:N]    N (1) corrected aggregate ECC errors
 *   remap_pending    a row remapping waits for a GPU reset
 *   remap_failed     a row remapping failed
 *   retire_pending   a page retirement waits for a reset
 *   xid:N            an XID N event, delivered to every event set registered for the GPU
 *   thermal          clocks held down by HW thermal slowdown
 *   sw_thermal       ... by SW thermal slowdown
 *   power_brake      ... by the HW power brake
 *   hw_slowdown      ... by HW slowdown
 *   hot              temperature at the slowdown threshold
 * A malformed list makes nvmlInit_v2 fail with one line on stderr.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mutex>
#include <string>
#include <vector>

extern "C" {
typedef int nvmlReturn_t;
typedef struct twin_nvml_gpu *nvmlDevice_t;
typedef struct twin_nvml_set *nvmlEventSet_t;
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
}

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_UNKNOWN = 999,
};
#define XID_EVENT 0x8ull

struct twin_nvml_gpu {
    unsigned index;
    unsigned long long ecc_unc = 0, ecc_cor = 0;
    unsigned remap_pending = 0, remap_failed = 0, retire_pending = 0;
    unsigned long long reasons = 0;
    unsigned temp = 45;
    std::vector<unsigned> xids;
};

struct twin_nvml_set {
    std::vector<nvmlEventData_t> queue;
};

static std::mutex g_mu;
static std::vector<twin_nvml_gpu> g_gpus;
static int g_init; /* nvmlInit_v2 minus nvmlShutdown */
static const unsigned SLOWDOWN_C = 90;

/* This host's name as faults name it. */
static std::string host_name()
{
    const char *n = getenv("SLURMD_NODENAME");
    if (n && *n)
        return n;
    char h[256] = "";
    gethostname(h, sizeof h - 1);
    h[strcspn(h, ".")] = '\0';
    return h;
}

/* Apply one fault "KIND[:N]@[HOST/]GPU"; false when malformed. */
static bool apply_fault(const std::string &f, const std::string &host)
{
    size_t at = f.find('@');
    if (at == std::string::npos)
        return false;
    std::string kind = f.substr(0, at), where = f.substr(at + 1);
    long n = 1;
    size_t colon = kind.find(':');
    if (colon != std::string::npos) {
        char *end;
        n = strtol(kind.c_str() + colon + 1, &end, 10);
        if (*end || n < 0)
            return false;
        kind.resize(colon);
    }
    size_t slash = where.find('/');
    if (slash != std::string::npos) {
        if (where.substr(0, slash) != host)
            return true; /* another node's */
        where = where.substr(slash + 1);
    }
    char *end;
    long gpu = strtol(where.c_str(), &end, 10);
    if (where.empty() || *end || gpu < 0)
        return false;
    if (gpu >= (long)g_gpus.size())
        return true; /* a GPU this host does not have: nothing to break */
    twin_nvml_gpu &g = g_gpus[(size_t)gpu];
    if (kind == "ecc")
        g.ecc_unc += (unsigned long long)n;
    else if (kind == "corrected")
        g.ecc_cor += (unsigned long long)n;
    else if (kind == "remap_pending")
        g.remap_pending = 1;
    else if (kind == "remap_failed")
        g.remap_failed = 1;
    else if (kind == "retire_pending")
        g.retire_pending = 1;
    else if (kind == "xid" && colon != std::string::npos)
        g.xids.push_back((unsigned)n);
    else if (kind == "thermal")
        g.reasons |= 0x40;
    else if (kind == "sw_thermal")
        g.reasons |= 0x20;
    else if (kind == "power_brake")
        g.reasons |= 0x80;
    else if (kind == "hw_slowdown")
        g.reasons |= 0x8;
    else if (kind == "hot")
        g.temp = SLOWDOWN_C;
    else
        return false;
    return true;
}

/* The devices and their faults, from the environment; false (printed) when malformed. */
static bool setup()
{
    const char *e = getenv("DDP_EMU_GPUS");
    int n = e && *e ? atoi(e) : 4;
    g_gpus.clear();
    for (int i = 0; i < n; i++) {
        g_gpus.emplace_back();
        g_gpus.back().index = (unsigned)i;
    }
    const char *f = getenv("DDP_EMU_NVML_FAULT");
    std::string list = f ? f : "", host = host_name();
    size_t pos = 0;
    while (pos < list.size()) {
        size_t c = list.find(',', pos);
        std::string one = list.substr(pos, c == std::string::npos ? std::string::npos : c - pos);
        if (!apply_fault(one, host)) {
            fprintf(stderr,
                    "twin NVML: DDP_EMU_NVML_FAULT: '%s' is not KIND[:N]@[HOST/]GPU with KIND one "
                    "of ecc, corrected, remap_pending, remap_failed, retire_pending, xid:N, "
                    "thermal, sw_thermal, power_brake, hw_slowdown, hot (docs/gpu.md)\n",
                    one.c_str());
            return false;
        }
        if (c == std::string::npos)
            break;
        pos = c + 1;
    }
    return true;
}

#define API extern "C" __attribute__((visibility("default")))
#define GPU_OR_FAIL(d)                          \
    do {                                        \
        if (!g_init)                            \
            return NVML_ERROR_UNINITIALIZED;    \
        if (!(d))                               \
            return NVML_ERROR_INVALID_ARGUMENT; \
    } while (0)

API nvmlReturn_t nvmlInit_v2(void)
{
    std::lock_guard<std::mutex> lk(g_mu);
    if (g_init == 0 && !setup())
        return NVML_ERROR_UNKNOWN;
    g_init++;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlShutdown(void)
{
    std::lock_guard<std::mutex> lk(g_mu);
    if (!g_init)
        return NVML_ERROR_UNINITIALIZED;
    g_init--;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n)
{
    if (!g_init)
        return NVML_ERROR_UNINITIALIZED;
    *n = (unsigned)g_gpus.size();
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d)
{
    if (!g_init)
        return NVML_ERROR_UNINITIALIZED;
    if (i >= g_gpus.size())
        return NVML_ERROR_INVALID_ARGUMENT;
    *d = &g_gpus[i];
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *bus_id, nvmlDevice_t *d)
{
    unsigned dom, bus, dev, fn;
    if (!g_init)
        return NVML_ERROR_UNINITIALIZED;
    if (sscanf(bus_id, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) != 4)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (dom != 0 || dev != 0 || fn != 0 || bus >= g_gpus.size())
        return NVML_ERROR_NOT_FOUND;
    *d = &g_gpus[bus];
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *i)
{
    GPU_OR_FAIL(d);
    *i = d->index;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *p)
{
    GPU_OR_FAIL(d);
    memset(p, 0, sizeof *p);
    p->bus = d->index;
    p->pciDeviceId = 0x233010de; /* an H100's */
    snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "0000:%02X:00.0", d->index);
    snprintf(p->busId, sizeof p->busId, "00000000:%02X:00.0", d->index);
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, int type, int counter,
                                             unsigned long long *n)
{
    GPU_OR_FAIL(d);
    if ((type != 0 && type != 1) || (counter != 0 && counter != 1))
        return NVML_ERROR_INVALID_ARGUMENT;
    /* corrected errors are lifetime ones only (the twin's fault is an old one) */
    *n = type == 1 ? d->ecc_unc : counter == 1 ? d->ecc_cor : 0;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t d, unsigned int *cor, unsigned int *unc,
                                           unsigned int *pending, unsigned int *failed)
{
    GPU_OR_FAIL(d);
    *cor = 0;
    *unc = d->remap_pending || d->remap_failed;
    *pending = d->remap_pending;
    *failed = d->remap_failed;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t d, int cause, unsigned int *count,
                                           unsigned long long *addresses)
{
    GPU_OR_FAIL(d);
    (void)cause;
    (void)addresses;
    *count = 0;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t d, int *pending)
{
    GPU_OR_FAIL(d);
    *pending = (int)d->retire_pending;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long *r)
{
    GPU_OR_FAIL(d);
    *r = d->reasons;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned int *mhz)
{
    GPU_OR_FAIL(d);
    *mhz = type == 1 && d->reasons ? 1200 : 1980; /* held down by a fault */
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int *c)
{
    GPU_OR_FAIL(d);
    if (sensor != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    *c = d->temp;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t d, int which, unsigned int *c)
{
    GPU_OR_FAIL(d);
    if (which == 0)
        *c = SLOWDOWN_C + 5; /* shutdown */
    else if (which == 1)
        *c = SLOWDOWN_C;
    else
        return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *mw)
{
    GPU_OR_FAIL(d);
    *mw = 120000;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned int *mw)
{
    GPU_OR_FAIL(d);
    *mw = 700000;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    if (!g_init)
        return NVML_ERROR_UNINITIALIZED;
    *set = new twin_nvml_set;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    delete set;
    return NVML_SUCCESS;
}

/* The GPU's XID faults are queued on every set that registers for XID events. */
API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types,
                                          nvmlEventSet_t set)
{
    GPU_OR_FAIL(d);
    if (!set)
        return NVML_ERROR_INVALID_ARGUMENT;
    std::lock_guard<std::mutex> lk(g_mu);
    if (types & XID_EVENT)
        for (unsigned x : d->xids)
            set->queue.push_back(nvmlEventData_t{d, XID_EVENT, x, 0xffffffffu, 0xffffffffu});
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data,
                                     unsigned int timeout_ms)
{
    if (!g_init)
        return NVML_ERROR_UNINITIALIZED;
    std::lock_guard<std::mutex> lk(g_mu);
    if (set->queue.empty()) {
        (void)timeout_ms; /* nothing ever arrives later: no need to wait */
        return NVML_ERROR_TIMEOUT;
    }
    *data = set->queue.front();
    set->queue.erase(set->queue.begin());
    return NVML_SUCCESS;
}
