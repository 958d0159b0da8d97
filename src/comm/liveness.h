/*
 * liveness.h - telling which peer died. Each rank listens on a TCP port of its own (any free
 * port) and the ranks exchange (host, address, port, pid) at start. When a collective fails
 * or times out, the probe connects to every peer's port: a process that has died no longer
 * holds its socket, so the kernel refuses the connection (on the same host, kill(pid, 0) is
 * asked too). The probe names those ranks and their hosts. It never blocks longer than
 * DDP_LIVENESS_PROBE_S. Connections are never accepted: the kernel completes them.
 */
#ifndef DDP_LIVENESS_H
#define DDP_LIVENESS_H

#include <stddef.h>

#include "comm/comm.h"

#define DDP_LIVENESS_PROBE_S 2.0

typedef struct ddp_liveness ddp_liveness;

/* Collective: every rank calls it once. Returns NULL (and the probe is simply absent) when no
 * socket can be opened; never fails the job. */
ddp_liveness *ddp_liveness_create(ddp_comm *c, const char *host);
void ddp_liveness_destroy(ddp_liveness *l); /* accepts NULL */

/* Peer probe for ddp_comm_set_peer_probe: "rank 2 on n2 (pid 1234)", the peers that are gone,
 * or "" if all answer. */
void ddp_liveness_probe(void *ctx, char *buf, size_t len);

#endif
