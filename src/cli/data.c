/*
 * cli/data.c - `ddptrain data`: import IDX sets, synthesise datasets, describe a file.
 * The reference is docs/data.md. This file only parses arguments, maps errors to exit
 * codes (usage 2, bad input or unwritable output 3) and prints; the work is in data/ (idx.c,
 * synth.c, and h5writer.c behind data/h5data.h).
 */
#include "cli/cli.h"
#include "cli/data_import.h"
#include "data/h5data.h"
#include "data/idx.h"
#include "data/synth.h"
#include "core/fileio.h"
#include "core/util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* `info` prints a per-class histogram up to this many classes, a summary beyond. */
#define INFO_MAX_HIST_CLASSES 1000
/* Histogram entries per printed line. */
#define INFO_HIST_PER_LINE 10

static const char usage_text[] =
    "usage: ddptrain data idx --dir DIR -o OUT.h5 [--classes K|NAME,...] [--source TEXT]\n"
    "                         [--force]\n"
    "       ddptrain data idx --train-images F --train-labels F --test-images F\n"
    "                         --test-labels F -o OUT.h5 [--classes K|NAME,...] [--source T]\n"
    "                         [--force]\n"
    "       ddptrain data synth -o OUT.h5 [--shape 1,28,28 | --shape 784] [--classes 10]\n"
    "                         [--train 60000] [--test 10000] [--seed 0]\n"
    "                         [--dtype uint8|float32] [--noise 0.3]\n"
    "       ddptrain data npy --images X.npy --labels Y.npy [--test-images X.npy\n"
    "                         --test-labels Y.npy | --test-fraction F] -o OUT.h5\n"
    "                         [--classes K|NAME,...] [--force]\n"
    "       ddptrain data npz FILE.npz -o OUT.h5 [--images-key x_train]\n"
    "                         [--labels-key y_train] [--test-images-key x_test]\n"
    "                         [--test-labels-key y_test | --test-fraction F]\n"
    "                         [--classes K|NAME,...] [--force]\n"
    "       ddptrain data csv FILE.csv --label-column NAME|INDEX -o OUT.h5 [--test T.csv\n"
    "                         | --test-fraction F] [--classes K|NAME,...] [--force]\n"
    "       ddptrain data imagefolder DIR -o OUT.h5 [--test-fraction F] [--resize HxW]\n"
    "                         [--channels 1|3] [--force]\n"
    "       ddptrain data info FILE.h5\n"
    "\n"
    "  idx    import an MNIST-style IDX set (raw or .gz) into the HDF5 layout:\n"
    "         /train and /test with images (N,1,H,W) uint8 and labels (N,) uint8;\n"
    "         --dir finds train-images-idx3-ubyte, train-labels-idx1-ubyte,\n"
    "         t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte (each raw or .gz);\n"
    "         --classes defaults to the largest label + 1; an existing OUT is\n"
    "         refused (exit 2) unless --force replaces it\n"
    "         (--classes NAME,NAME,...: the class names in label order, written as\n"
    "         class_names; --test-fraction F: /test is the last round(F n) rows of each\n"
    "         class, in file order, as imagefolder does)\n"
    "  synth  write a learnable synthetic set (prototypes + noise, deterministic for a\n"
    "         seed, generated in chunks so N may exceed memory)\n"
    "  npy    import NumPy arrays: images uint8 or float32 (N,H,W), (N,C,H,W) or (N,D),\n"
    "         labels integers (N,); /test when --test-images/--test-labels are given\n"
    "  npz    the same from an .npz (stored or deflated members; keys x_train, y_train,\n"
    "         x_test, y_test unless named; /test when the archive holds the test key)\n"
    "  csv    import a CSV: numeric features as (N,D) float32, one integer label column;\n"
    "         a first line with a non-numeric cell is the header\n"
    "  imagefolder  import class folders of PNG/JPEG images (DIR/train/<class>/..., or\n"
    "         DIR/<class>/... with --test-fraction) as (N,C,H,W) uint8\n"
    "         (npy, npz, csv, imagefolder: an existing OUT is refused, exit 2,\n"
    "         unless --force replaces it)\n"
    "  info   list groups, shapes, dtypes, classes, the class histogram and class_names\n"
    "\n"
    "OUT is written as OUT.tmp and renamed when complete.\n"
    "Exit codes: 0 done, 1 OUT cannot be written (a full disk), 2 usage error or an unusable\n"
    "-o, 3 bad input file.\n"
    "Reference: docs/data.md\n";

/* Usage error: one line on stderr and a pointer to --help; returns DDP_EXIT_USAGE. */
static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
    char msg[2 * DDP_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ddp_warn("data: %s (see `ddptrain data --help`)", msg);
    return DDP_EXIT_USAGE;
}

static int is_help(const char *s)
{
    return !strcmp(s, "--help") || !strcmp(s, "-h");
}

/* Parse an integer option within [lo, hi]; usage error text into msg on failure. */
static int parse_range(const char *name, const char *s, int64_t lo, int64_t hi, int64_t *out,
                       char *msg, size_t len)
{
    if (ddp_parse_i64(s, out) != 0 || *out < lo || *out > hi) {
        snprintf(msg, len, "%s `%s`: expected an integer in [%lld, %lld]", name, s, (long long)lo,
                 (long long)hi);
        return -1;
    }
    return 0;
}

/* "1,28,28", "1x28x28" or "784" into rank/dims; every field a number (",1" and "1,,28,28"
 * are refused, not read as "1" and "1,28,28"). */
static int parse_shape(const char *s, int *rank, int64_t dims[3])
{
    char buf[128];
    if (strlen(s) >= sizeof buf)
        return -1;
    int r = 0;
    for (const char *t = s;; t++) {
        const size_t n = strcspn(t, ",x");
        snprintf(buf, sizeof buf, "%.*s", (int)n, t);
        if (r == 3 || ddp_parse_i64(buf, &dims[r]) != 0 || dims[r] <= 0)
            return -1;
        r++;
        t += n;
        if (!*t)
            break;
    }
    if (r != 1 && r != 3)
        return -1;
    *rank = r;
    return 0;
}

/* Text of the command line, for the `source` attribute. */
static void command_text(int argc, char **argv, char *buf, size_t len)
{
    size_t o = (size_t)snprintf(buf, len, "ddptrain data");
    for (int i = 0; i < argc && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, " %s", argv[i]);
}

/* idx: refuse to replace an existing OUT without --force (usage error naming it). */
static int refuse_existing(const char *out, int force)
{
    struct stat st;
    if (force || stat(out, &st) != 0)
        return 0;
    return usage_error("idx: %s already exists; add --force to replace it, or give another -o",
                       out);
}

/* idx: refuse an OUT that is one of the four IDX files (usage error naming it). */
static int refuse_input(const char *out, const ddp_idx_files *files)
{
    const char *in[4] = {files->train_images, files->train_labels, files->test_images,
                         files->test_labels};
    for (int k = 0; k < 4; k++)
        if (ddp_file_same(out, in[k]))
            return usage_error("idx: -o %s is the input %s: an import never writes over its "
                               "input; give another -o",
                               out, in[k]);
    return 0;
}

/* idx's --classes: K, or names (then *classes is their number). 0, or -1 with msg. */
static int idx_classes(const char *v, int64_t *classes, char ***names, char *msg, size_t len)
{
    if (ddp_parse_i64(v, classes) == 0)
        return parse_range("--classes", v, 1, DDP_H5_MAX_CLASSES, classes, msg, len);
    int n = 0;
    if (ddp_data_class_names(v, names, &n, msg, len) != 0)
        return -1;
    *classes = n;
    return 0;
}

static int cmd_idx(int argc, char **argv)
{
    const char *dir = NULL, *out = NULL, *source = NULL, *classes_s = NULL;
    const char *f[4] = {NULL, NULL, NULL, NULL};
    int force = 0;
    static const char *const fname[4] = {"--train-images", "--train-labels", "--test-images",
                                         "--test-labels"};
    for (int i = 1; i < argc; i++) {
        int m = 0, k;
        if (is_help(argv[i])) {
            fputs(usage_text, stdout);
            return DDP_EXIT_OK;
        }
        if (!strcmp(argv[i], "--force")) {
            force = 1;
            continue;
        }
        if ((m = ddp_opt_value(argc, argv, &i, "--dir", &dir)) ||
            (m = ddp_opt_value(argc, argv, &i, "-o", &out)) ||
            (m = ddp_opt_value(argc, argv, &i, "--output", &out)) ||
            (m = ddp_opt_value(argc, argv, &i, "--source", &source)) ||
            (m = ddp_opt_value(argc, argv, &i, "--classes", &classes_s))) {
            if (m < 0)
                return usage_error("idx: option %s needs a value", argv[i]);
            continue;
        }
        for (k = 0; k < 4; k++)
            if ((m = ddp_opt_value(argc, argv, &i, fname[k], &f[k])) != 0)
                break;
        if (m < 0)
            return usage_error("idx: option %s needs a value", argv[i]);
        if (m == 0)
            return usage_error("idx: unknown argument `%s`", argv[i]);
    }
    if (!out)
        return usage_error("idx: -o OUT.h5 is required");
    int nf = !!f[0] + !!f[1] + !!f[2] + !!f[3];
    if (dir && nf)
        return usage_error("idx: give either --dir or the four file options, not both");
    if (!dir && nf != 4) {
        for (int k = 0; k < 4; k++)
            if (!f[k])
                return usage_error("idx: %s is missing; give --dir DIR or all four of "
                                   "--train-images, --train-labels, --test-images, --test-labels",
                                   fname[k]);
    }
    int64_t classes = 0;
    char msg[DDP_ERR_LEN], err[DDP_ERR_LEN];
    char **names = NULL;
    if (classes_s && idx_classes(classes_s, &classes, &names, msg, sizeof msg) != 0)
        return usage_error("idx: %s", msg);
    if (ddp_file_check_output("-o", out, msg, sizeof msg) != 0)
        return usage_error("idx: %s", msg);
    if (refuse_existing(out, force))
        return DDP_EXIT_USAGE;

    ddp_idx_files files;
    if (dir) {
        if (ddp_idx_find(dir, &files, err, sizeof err) != 0) {
            ddp_warn("%s", err);
            return DDP_EXIT_DATA;
        }
    } else {
        char *dst[4] = {files.train_images, files.train_labels, files.test_images,
                        files.test_labels};
        for (int k = 0; k < 4; k++) {
            if (strlen(f[k]) >= DDP_IDX_MAX_PATH)
                return usage_error("idx: %s path is too long", fname[k]);
            snprintf(dst[k], DDP_IDX_MAX_PATH, "%s", f[k]);
        }
    }
    if (refuse_input(out, &files))
        return DDP_EXIT_USAGE;
    char src[1024];
    if (source)
        snprintf(src, sizeof src, "%s", source);
    else
        command_text(argc, argv, src, sizeof src);
    ddp_idx_summary sum;
    double t0 = ddp_now();
    int imp = ddp_idx_import_names(&files, out, (int)classes, names, src, &sum, err, sizeof err);
    ddp_class_names_free(names, (int)classes * !!names);
    if (imp == DDP_IDX_BAD_NAMES)
        return usage_error("idx: %s", err);
    if (imp != 0) {
        ddp_warn("%s", err);
        return imp == -2 ? DDP_EXIT_RUNTIME : DDP_EXIT_DATA; /* the output, or an input */
    }
    char shape[96];
    if (sum.rank == 1)
        snprintf(shape, sizeof shape, "%lld", (long long)sum.dims[0]);
    else
        snprintf(shape, sizeof shape, "%lldx%lldx%lld", (long long)sum.dims[0],
                 (long long)sum.dims[1], (long long)sum.dims[2]);
    printf("wrote %s: /train %lld x %s uint8 (labels %d..%d), /test %lld x %s uint8 (labels "
           "%d..%d), classes %d, %.1f s\n",
           out, (long long)sum.n_train, shape, sum.label_min[0], sum.label_max[0],
           (long long)sum.n_test, shape, sum.label_min[1], sum.label_max[1], sum.classes,
           ddp_now() - t0);
    return DDP_EXIT_OK;
}

static int cmd_synth(int argc, char **argv)
{
    ddp_synth_spec spec;
    ddp_synth_defaults(&spec);
    const char *out = NULL;
    char msg[DDP_ERR_LEN], err[DDP_ERR_LEN];
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int64_t x;
        int m;
        if (is_help(argv[i])) {
            fputs(usage_text, stdout);
            return DDP_EXIT_OK;
        }
        if ((m = ddp_opt_value(argc, argv, &i, "-o", &out)) ||
            (m = ddp_opt_value(argc, argv, &i, "--output", &out))) {
            if (m < 0)
                return usage_error("synth: option %s needs a value", argv[i]);
        } else if ((m = ddp_opt_value(argc, argv, &i, "--shape", &v))) {
            if (m < 0 || parse_shape(v, &spec.rank, spec.dims) != 0)
                return usage_error("synth: --shape `%s`: expected C,H,W (e.g. 1,28,28) or D "
                                   "(e.g. 784), positive integers",
                                   m < 0 ? "" : v);
        } else if ((m = ddp_opt_value(argc, argv, &i, "--classes", &v))) {
            if (m < 0 || parse_range("--classes", v, 2, DDP_H5_MAX_CLASSES, &x, msg, sizeof msg))
                return usage_error("synth: %s", m < 0 ? "--classes needs a value" : msg);
            spec.classes = (int)x;
        } else if ((m = ddp_opt_value(argc, argv, &i, "--train", &v))) {
            if (m < 0 || parse_range("--train", v, 1, DDP_H5_MAX_SAMPLES, &x, msg, sizeof msg))
                return usage_error("synth: %s", m < 0 ? "--train needs a value" : msg);
            spec.n_train = x;
        } else if ((m = ddp_opt_value(argc, argv, &i, "--test", &v))) {
            if (m < 0 || parse_range("--test", v, 1, DDP_H5_MAX_SAMPLES, &x, msg, sizeof msg))
                return usage_error("synth: %s", m < 0 ? "--test needs a value" : msg);
            spec.n_test = x;
        } else if ((m = ddp_opt_value(argc, argv, &i, "--seed", &v))) {
            if (m < 0 || parse_range("--seed", v, 0, INT64_MAX, &x, msg, sizeof msg))
                return usage_error("synth: %s", m < 0 ? "--seed needs a value" : msg);
            spec.seed = (uint64_t)x;
        } else if ((m = ddp_opt_value(argc, argv, &i, "--dtype", &v))) {
            if (m > 0 && !strcmp(v, "uint8"))
                spec.dtype = DDP_H5DTYPE_UINT8;
            else if (m > 0 && !strcmp(v, "float32"))
                spec.dtype = DDP_H5DTYPE_FLOAT32;
            else
                return usage_error("synth: --dtype `%s`: expected uint8 or float32",
                                   m > 0 ? v : "");
        } else if ((m = ddp_opt_value(argc, argv, &i, "--noise", &v))) {
            double d;
            if (m < 0 || ddp_parse_f64(v, &d) != 0)
                return usage_error("synth: --noise `%s`: expected a number", m > 0 ? v : "");
            spec.noise = d;
        } else {
            return usage_error("synth: unknown argument `%s`", argv[i]);
        }
    }
    if (!out)
        return usage_error("synth: -o OUT.h5 is required");
    if (ddp_file_check_output("-o", out, msg, sizeof msg) != 0)
        return usage_error("synth: %s", msg);
    if (ddp_synth_check(&spec, err, sizeof err) != 0)
        return usage_error("synth: %s", err);
    double t0 = ddp_now();
    if (ddp_synth_write(&spec, out, err, sizeof err) != 0) {
        ddp_warn("%s", err); /* only writes: the output failed (a full disk), a runtime failure */
        return DDP_EXIT_RUNTIME;
    }
    printf("wrote %s: /train %lld, /test %lld samples of %s, %d classes, seed %llu, %.1f s\n", out,
           (long long)spec.n_train, (long long)spec.n_test, ddp_h5dtype_name(spec.dtype),
           spec.classes, (unsigned long long)spec.seed, ddp_now() - t0);
    return DDP_EXIT_OK;
}

/* The group's class names, ten to a line, up to INFO_MAX_HIST_CLASSES (a summary beyond). */
static void print_class_names(const ddp_h5split *s)
{
    const char *const *names = ddp_h5split_class_names(s);
    int n = ddp_h5split_class_name_count(s);
    if (!names)
        return;
    if (n > INFO_MAX_HIST_CLASSES) {
        printf("  class_names: %d names, 0 %s ... %d %s\n", n, names[0], n - 1, names[n - 1]);
        return;
    }
    for (int k = 0; k < n; k++)
        printf("%s%d %s%s", k % INFO_HIST_PER_LINE ? ", " : "  class_names: ", k, names[k],
               (k % INFO_HIST_PER_LINE == INFO_HIST_PER_LINE - 1 || k == n - 1) ? "\n" : "");
}

/* Print one split; returns an exit code (3 when it does not validate). */
static int info_split(const char *path, const char *group)
{
    char err[DDP_ERR_LEN];
    ddp_h5split *s = ddp_h5split_open(path, group, err, sizeof err);
    if (!s) {
        ddp_warn("%s", err);
        return DDP_EXIT_DATA;
    }
    int64_t n = ddp_h5split_count(s), dims[3];
    int rank = ddp_h5split_shape(s, dims);
    char shape[128];
    if (rank == 1)
        snprintf(shape, sizeof shape, "(%lld, %lld)", (long long)n, (long long)dims[0]);
    else
        snprintf(shape, sizeof shape, "(%lld, %lld, %lld, %lld)", (long long)n, (long long)dims[0],
                 (long long)dims[1], (long long)dims[2]);
    const int32_t *lab = ddp_h5split_labels(s);
    int32_t lo = lab[0], hi = lab[0];
    for (int64_t i = 1; i < n; i++) {
        lo = lab[i] < lo ? lab[i] : lo;
        hi = lab[i] > hi ? lab[i] : hi;
    }
    int classes = ddp_h5split_classes(s);
    printf("%s: %lld samples, images %s %s, labels (%lld,) %s, classes %s%d, labels %d..%d\n",
           group, (long long)n, shape, ddp_h5dtype_name(ddp_h5split_dtype(s)), (long long)n,
           ddp_h5split_labels_type(s), classes > 0 ? "" : "(no attribute) ",
           classes > 0 ? classes : (int)hi + 1, (int)lo, (int)hi);
    int hn = classes > 0 ? classes : (int)hi + 1;
    if (lo >= 0 && hi < DDP_H5_MAX_CLASSES) {
        int64_t *hist = ddp_calloc((size_t)(hi + 1 > hn ? hi + 1 : hn), sizeof *hist);
        for (int64_t i = 0; i < n; i++)
            hist[lab[i]]++;
        if (hn <= INFO_MAX_HIST_CLASSES) {
            for (int k = 0; k < hn; k++)
                printf("%s%d:%lld%s", k % INFO_HIST_PER_LINE ? " " : "  ", k, (long long)hist[k],
                       (k % INFO_HIST_PER_LINE == INFO_HIST_PER_LINE - 1 || k == hn - 1) ? "\n"
                                                                                         : "");
        } else {
            int64_t mn = INT64_MAX, mx = 0, present = 0;
            for (int k = 0; k < hn; k++) {
                present += hist[k] > 0;
                mn = hist[k] < mn ? hist[k] : mn;
                mx = hist[k] > mx ? hist[k] : mx;
            }
            printf("  %lld of %d classes present, %lld..%lld samples per class\n",
                   (long long)present, hn, (long long)mn, (long long)mx);
        }
        free(hist);
    }
    print_class_names(s);
    int rc = DDP_EXIT_OK;
    if (ddp_h5split_check_labels(s, hn, err, sizeof err) != 0) {
        ddp_warn("%s", err);
        rc = DDP_EXIT_DATA;
    }
    ddp_h5split_close(s);
    return rc;
}

static int cmd_info(int argc, char **argv)
{
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (is_help(argv[i])) {
            fputs(usage_text, stdout);
            return DDP_EXIT_OK;
        }
        if (argv[i][0] == '-' && argv[i][1] != '\0')
            return usage_error("info: unknown option `%s`", argv[i]);
        if (path)
            return usage_error("info: one file at a time (`%s` and `%s`)", path, argv[i]);
        path = argv[i];
    }
    if (!path)
        return usage_error("info: FILE.h5 is required");
    char err[DDP_ERR_LEN], source[1024];
    char **groups = NULL;
    int ng = ddp_h5data_groups(path, &groups, err, sizeof err);
    if (ng < 0 || ddp_h5data_source(path, source, sizeof source, err, sizeof err) != 0) {
        ddp_h5data_free_names(groups, ng);
        ddp_warn("%s", err);
        return DDP_EXIT_DATA;
    }
    if (ng == 0) {
        ddp_warn("%s: holds no groups; expected /train and /test with images and labels "
                 "(see docs/data.md)",
                 path);
        return DDP_EXIT_DATA;
    }
    printf("%s: source \"%s\"\n", path, source);
    int rc = DDP_EXIT_OK;
    for (int g = 0; g < ng; g++) {
        int r = info_split(path, groups[g]);
        if (r != DDP_EXIT_OK)
            rc = r;
    }
    ddp_h5data_free_names(groups, ng);
    return rc;
}

int ddp_cmd_data(int argc, char **argv)
{
    if (argc < 2)
        return usage_error(
            "a subcommand is required: idx, npy, npz, csv, imagefolder, synth or info");
    const char *sub = argv[1];
    if (is_help(sub)) {
        fputs(usage_text, stdout);
        return DDP_EXIT_OK;
    }
    if (!strcmp(sub, "idx"))
        return cmd_idx(argc - 1, argv + 1);
    if (!strcmp(sub, "synth"))
        return cmd_synth(argc - 1, argv + 1);
    if (!strcmp(sub, "info"))
        return cmd_info(argc - 1, argv + 1);
    if (!strcmp(sub, "npy"))
        return ddp_data_cmd_npy(argc - 1, argv + 1);
    if (!strcmp(sub, "npz"))
        return ddp_data_cmd_npz(argc - 1, argv + 1);
    if (!strcmp(sub, "csv"))
        return ddp_data_cmd_csv(argc - 1, argv + 1);
    if (!strcmp(sub, "imagefolder"))
        return ddp_data_cmd_imagefolder(argc - 1, argv + 1);
    return usage_error(
        "unknown subcommand `%s`; expected idx, npy, npz, csv, imagefolder, synth or info", sub);
}
