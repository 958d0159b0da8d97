/*
 * paths.h - where ddptrain finds the files it ships: the example and validate configs
 * (configs/, with validate-ref/ and expect-*.ini), the sbatch templates (slurm/). Their
 * layout under the data directory is the source tree's, so one relative name serves both:
 *
 *   installed   PREFIX/bin/ddptrain     -> PREFIX/share/ddptrain/configs/...
 *               (found relative to the executable, so a copied or relocated prefix works;
 *               then the prefix the build was configured with)
 *   build tree  BUILD/ddptrain, BUILD/tests/... -> the source tree's configs/...
 *
 * An installed binary never looks in the source tree, and a build-tree binary never in an
 * installed prefix. What is not found is the caller's to report; nothing here prints.
 */
#ifndef DDP_PATHS_H
#define DDP_PATHS_H

#include <stddef.h>

/* The data directory of this executable into dir (absolute), and 1; or 0 with dir set to
 * the places looked at ("A nor B"), for a message. origin (may be NULL) receives how it was
 * chosen: "installed", "build tree" or "none" (static strings). */
int ddp_paths_data_dir(char *dir, size_t len, const char **origin);

/* DATA_DIR/rel into path and 1 when that file or directory exists; else 0 with path set to
 * the place it was looked for (or the places, when no data directory was found). */
int ddp_paths_find(const char *rel, char *path, size_t len);

#endif
