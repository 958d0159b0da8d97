/*
 * liveness.h - noticing that a peer died, and naming it, whatever the collective backend.
 *
 * At create every rank opens a TCP listening socket of its own (any free port) and the ranks
 * exchange (host, address, port, pid) through one all-gather of the communicator. After that
 * nothing here goes through the communicator (MPI, NCCL or self alike); two services use the
 * table:
 *
 * The watch. Every other rank holds one TCP connection to rank 0, and a background thread on
 * each rank sends a heartbeat over it every DDP_LIVENESS_BEAT_S and reads its peers'. A peer is
 * gone when its connection closes without a goodbye (the kernel closes the sockets of a killed
 * or crashed process, on any host) or when no heartbeat came for DDP_LIVENESS_LOST_S (the
 * process is stopped, or its node vanished). The thread then prints one line naming the peer
 * (rank, host, pid, why) and _exit(DDP_EXIT_PEER)s; rank 0 first tells every other rank, which
 * do the same. So every rank stops within seconds of a death, whatever [dist] timeout_s says
 * (that bound remains for a peer that is alive but stuck). Heartbeats come from the thread, not
 * from the training loop: a rank busy in a long eval or checkpoint is alive. A rank that says
 * goodbye (ddp_liveness_destroy, after the last collective) is done, never taken for dead.
 * _exit from the thread leaves no half-written file: checkpoints and weights are written to a
 * temporary name and renamed (ckpt.c), so a file is whole or absent.
 *
 * The probe. When a collective fails or times out, comm.c asks which peers are gone: the probe
 * connects to every peer's port; a dead process no longer holds its socket, so the kernel
 * refuses the connection (on the same host, kill(pid, 0) is asked too). It never blocks longer
 * than DDP_LIVENESS_PROBE_S. The listening socket answers through the kernel's backlog.
 *
 * Not here: restarting anything; telling a stuck peer from a slow one (that is timeout_s).
 */
#ifndef DDP_LIVENESS_H
#define DDP_LIVENESS_H

#include <stddef.h>

#include "comm/comm.h"

#define DDP_LIVENESS_PROBE_S 2.0
/* Heartbeat period of the watch thread. */
#define DDP_LIVENESS_BEAT_S 1.0
/* Silence after which a peer counts as gone: 5 heartbeats, far above any scheduling delay of
 * a thread that only sleeps and sends 16 bytes, and within 10 s of a death with the relay. */
#define DDP_LIVENESS_LOST_S 5.0
/* Bound of the watch's setup (connections to rank 0) at create. */
#define DDP_LIVENESS_SETUP_S 30.0
/* How long a goodbye or a death notice waits for the other ends to close first, so that the
 * last frame is read before the connection resets. */
#define DDP_LIVENESS_LINGER_S 1.0

typedef struct ddp_liveness ddp_liveness;

/* Collective: every rank calls it once, after the communicator exists, and starts the watch.
 * Returns NULL (no probe, no watch) when no socket can be opened; when the watch cannot be
 * set up on every rank, rank 0 warns once and only the probe remains. Never fails the job. */
ddp_liveness *ddp_liveness_create(ddp_comm *c, const char *host);
/* Say goodbye, stop the watch and free. Call after the last collective (after
 * ddp_comm_destroy): from then on this rank's exit is not a death. Accepts NULL. */
void ddp_liveness_destroy(ddp_liveness *l);

/* Peer probe for ddp_comm_set_peer_probe: "rank 2 on n2 (pid 1234)", the peers that are gone,
 * or "" if all answer. */
void ddp_liveness_probe(void *ctx, char *buf, size_t len);

#endif
