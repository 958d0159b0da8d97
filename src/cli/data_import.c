/*
 * data_import.c - `ddptrain data npy|npz|csv|imagefolder` (data_import.h): options into the importers
 * of data/import.h, errors to exit codes, one summary line. Reference: docs/data.md.
 */
#include "cli/data_import.h"

#include "core/fileio.h"
#include "core/util.h"
#include "data/import.h"

#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* Most value options one importer takes (besides the common ones). */
#define IMPORT_MAX_OPTS 8

/* Options every importer takes, and the ones of a subcommand. */
typedef struct {
    const char *sub;
    const char *out, *source, *classes_s, *fraction_s;
    int force;
    int takes_fraction; /* --test-fraction F (npy, npz, csv) */
    ddp_import_opts o;  /* out, source, classes (K or names), test fraction */
    const char *names[IMPORT_MAX_OPTS];
    const char **vals[IMPORT_MAX_OPTS];
    int nopts;
    const char *positional; /* the one FILE argument, when the subcommand takes one */
    int takes_positional;
    char src[1024];
} import_args;

/* Usage error: one line and a pointer to --help; returns DDP_EXIT_USAGE. */
static int import_usage(const import_args *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int import_usage(const import_args *a, const char *fmt, ...)
{
    char msg[2 * DDP_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ddp_warn("data: %s: %s (see `ddptrain data --help`)", a->sub, msg);
    return DDP_EXIT_USAGE;
}

int ddp_data_class_names(const char *v, char ***names_out, int *count, char *msg, size_t len)
{
    int n = 1;
    for (const char *p = v; *p; p++)
        n += *p == ',';
    if (n > DDP_H5_MAX_CLASSES)
        return ddp_err(msg, len, "--classes: %d names, above %d", n, DDP_H5_MAX_CLASSES);
    char **names = ddp_calloc((size_t)n, sizeof *names);
    for (int k = 0; k < n; k++) {
        size_t l = strcspn(v, ",");
        names[k] = ddp_calloc(1, l + 1);
        memcpy(names[k], v, l);
        v += l + (v[l] == ',');
        const char *bad = ddp_class_name_problem(names[k]);
        if (bad) {
            ddp_err(msg, len,
                    "--classes: name %d `%.64s` %s; give the class names separated by commas "
                    "(1 to %d bytes of UTF-8 each), or K",
                    k, names[k], bad, DDP_H5_MAX_CLASS_NAME);
            ddp_class_names_free(names, n);
            return -1;
        }
    }
    *names_out = names;
    *count = n;
    return 0;
}

/* --classes NAME,NAME,... into a->o.names; 0 or an exit code. */
static int parse_names(import_args *a)
{
    char msg[DDP_ERR_LEN];
    if (ddp_data_class_names(a->classes_s, &a->o.names, &a->o.nnames, msg, sizeof msg) != 0)
        return import_usage(a, "%s", msg);
    return 0;
}

/* --classes (K or names) and --test-fraction into a->o; 0 or an exit code. */
static int parse_common(import_args *a)
{
    int64_t c = 0;
    if (a->classes_s && ddp_parse_i64(a->classes_s, &c) == 0) {
        if (c < 1 || c > DDP_H5_MAX_CLASSES)
            return import_usage(a, "--classes `%s`: expected an integer in [1, %d] or names",
                                a->classes_s, DDP_H5_MAX_CLASSES);
        a->o.classes = (int)c;
    } else if (a->classes_s) {
        int rc = parse_names(a);
        if (rc)
            return rc;
    }
    double f = 0;
    if (a->fraction_s && (ddp_parse_f64(a->fraction_s, &f) != 0 || !(f >= 0) || !(f < 1)))
        return import_usage(a, "--test-fraction `%s`: expected a number in [0, 1)", a->fraction_s);
    a->o.test_fraction = f;
    return 0;
}

/* Parse argv into a; returns -1 for --help (printed), an exit code > 0, or 0. */
static int parse_args(import_args *a, int argc, char **argv, const char *help)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        int m = 0;
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            fputs(help, stdout);
            return -1;
        }
        if (!strcmp(arg, "--force")) {
            a->force = 1;
            continue;
        }
        if ((m = ddp_opt_value(argc, argv, &i, "-o", &a->out)) ||
            (m = ddp_opt_value(argc, argv, &i, "--output", &a->out)) ||
            (m = ddp_opt_value(argc, argv, &i, "--source", &a->source)) ||
            (m = ddp_opt_value(argc, argv, &i, "--classes", &a->classes_s)) ||
            (a->takes_fraction &&
             (m = ddp_opt_value(argc, argv, &i, "--test-fraction", &a->fraction_s)))) {
            if (m < 0)
                return import_usage(a, "option %s needs a value", arg);
            continue;
        }
        for (int k = 0; k < a->nopts && !m; k++)
            m = ddp_opt_value(argc, argv, &i, a->names[k], a->vals[k]);
        if (m < 0)
            return import_usage(a, "option %s needs a value", arg);
        if (m > 0)
            continue;
        if (arg[0] == '-' && arg[1] != '\0')
            return import_usage(a, "unknown option `%s`", arg);
        if (!a->takes_positional || a->positional)
            return import_usage(a, "unexpected argument `%s`", arg);
        a->positional = arg;
    }
    if (!a->out)
        return import_usage(a, "-o OUT.h5 is required");
    char why[DDP_ERR_LEN + 64];
    if (ddp_file_check_output("-o", a->out, why, sizeof why) != 0)
        return import_usage(a, "%s", why);
    for (int k = 0; k <= a->nopts; k++) { /* the options that name files, and FILE */
        const char *in = k < a->nopts ? *a->vals[k] : a->positional;
        const char *opt = k < a->nopts ? a->names[k] : "the input";
        if (ddp_file_same(a->out, in))
            return import_usage(a,
                                "-o %s is %s %s: an import never writes over its input; "
                                "give another -o",
                                a->out, opt, in);
    }
    struct stat st;
    if (!a->force && stat(a->out, &st) == 0)
        return import_usage(a, "%s already exists; add --force to replace it, or give another -o",
                            a->out);
    size_t o = (size_t)snprintf(a->src, sizeof a->src, "ddptrain data");
    for (int i = 0; i < argc && o < sizeof a->src; i++)
        o += (size_t)snprintf(a->src + o, sizeof a->src - o, " %s", argv[i]);
    if (a->source)
        snprintf(a->src, sizeof a->src, "%s", a->source);
    a->o.out = a->out;
    a->o.source = a->src;
    return parse_common(a);
}

/* Register a value option of the subcommand. */
static void add_opt(import_args *a, const char *name, const char **val)
{
    a->names[a->nopts] = name;
    a->vals[a->nopts++] = val;
}

/* After an import: the summary line, or the error with exit 3 (an input) or 1 (the output
 * cannot be written, as in every subcommand). */
static int finish(import_args *a, int rc, const ddp_import_summary *s, double t0, const char *err)
{
    ddp_class_names_free(a->o.names, a->o.nnames);
    if (rc == DDP_IMPORT_BAD_NAMES)
        return import_usage(a, "%s", err);
    if (rc != 0) {
        ddp_warn("%s", err);
        return rc == -2 ? DDP_EXIT_RUNTIME : DDP_EXIT_DATA;
    }
    char shape[96];
    if (s->rank == 1)
        snprintf(shape, sizeof shape, "%lld", (long long)s->dims[0]);
    else
        snprintf(shape, sizeof shape, "%lldx%lldx%lld", (long long)s->dims[0],
                 (long long)s->dims[1], (long long)s->dims[2]);
    printf("wrote %s: /train %lld x %s %s (labels %d..%d)", a->out, (long long)s->n[0], shape,
           ddp_h5dtype_name(s->dtype), (int)s->label_min[0], (int)s->label_max[0]);
    if (s->nsplits > 1)
        printf(", /test %lld (labels %d..%d)", (long long)s->n[1], (int)s->label_min[1],
               (int)s->label_max[1]);
    else
        printf(", no /test");
    printf(", classes %d, %.1f s\n", s->classes, ddp_now() - t0);
    return DDP_EXIT_OK;
}

static const char npy_help[] =
    "usage: ddptrain data npy --images X.npy --labels Y.npy [--test-images X.npy\n"
    "                         --test-labels Y.npy | --test-fraction F] -o OUT.h5\n"
    "                         [--classes K|NAME,...] [--source T]\n"
    "                         [--force]\n"
    "  images uint8 or float32, (N,H,W) (stored (N,1,H,W)), (N,C,H,W) or (N,D);\n"
    "  labels integers (N,) or (N,1). Reference: docs/data.md\n";

int ddp_data_cmd_npy(int argc, char **argv)
{
    import_args a = {.sub = "npy", .takes_fraction = 1};
    const char *img = NULL, *lab = NULL, *timg = NULL, *tlab = NULL;
    add_opt(&a, "--images", &img);
    add_opt(&a, "--labels", &lab);
    add_opt(&a, "--test-images", &timg);
    add_opt(&a, "--test-labels", &tlab);
    int r = parse_args(&a, argc, argv, npy_help);
    if (r)
        return r < 0 ? DDP_EXIT_OK : r;
    if (!img || !lab)
        return import_usage(&a, "--images and --labels are required");
    if (!timg != !tlab)
        return import_usage(&a, "give both --test-images and --test-labels, or neither");
    if (timg && a.o.test_fraction > 0)
        return import_usage(&a, "--test-fraction holds out /test from --images, so it does not "
                                "apply with --test-images; give one or the other");
    char err[DDP_ERR_LEN];
    ddp_import_summary s;
    double t0 = ddp_now();
    int rc = ddp_import_npy(img, lab, timg, tlab, &a.o, &s, err, sizeof err);
    return finish(&a, rc, &s, t0, err);
}

static const char npz_help[] =
    "usage: ddptrain data npz FILE.npz -o OUT.h5 [--images-key x_train]\n"
    "                         [--labels-key y_train] [--test-images-key x_test]\n"
    "                         [--test-labels-key y_test | --test-fraction F]\n"
    "                         [--classes K|NAME,...] [--source T] [--force]\n"
    "  arrays as numpy.savez / savez_compressed write them; /test when the archive holds\n"
    "  the test images key. Reference: docs/data.md\n";

int ddp_data_cmd_npz(int argc, char **argv)
{
    import_args a = {.sub = "npz", .takes_positional = 1, .takes_fraction = 1};
    const char *keys[4] = {"x_train", "y_train", "x_test", "y_test"};
    add_opt(&a, "--images-key", &keys[0]);
    add_opt(&a, "--labels-key", &keys[1]);
    add_opt(&a, "--test-images-key", &keys[2]);
    add_opt(&a, "--test-labels-key", &keys[3]);
    int r = parse_args(&a, argc, argv, npz_help);
    if (r)
        return r < 0 ? DDP_EXIT_OK : r;
    if (!a.positional)
        return import_usage(&a, "FILE.npz is required");
    char err[DDP_ERR_LEN];
    ddp_import_summary s;
    double t0 = ddp_now();
    /* Test keys named on the command line must be there; the default ones are optional. */
    const int need_test = strcmp(keys[2], "x_test") != 0 || strcmp(keys[3], "y_test") != 0;
    if (need_test && a.o.test_fraction > 0)
        return import_usage(&a, "--test-fraction holds out /test from the training arrays, so "
                                "it does not apply with test keys; give one or the other");
    int rc = ddp_import_npz(a.positional, keys, need_test, &a.o, &s, err, sizeof err);
    return finish(&a, rc, &s, t0, err);
}

static const char csv_help[] =
    "usage: ddptrain data csv FILE.csv --label-column NAME|INDEX -o OUT.h5\n"
    "                         [--test TEST.csv | --test-fraction F]\n"
    "                         [--classes K|NAME,...] [--source T] [--force]\n"
    "  one sample a line: numeric features (float32) and an integer label column (a header\n"
    "  name, or a 0-based index); a first line with a non-numeric cell is the header.\n"
    "  Reference: docs/data.md\n";

int ddp_data_cmd_csv(int argc, char **argv)
{
    import_args a = {.sub = "csv", .takes_positional = 1, .takes_fraction = 1};
    const char *col = NULL, *test = NULL;
    add_opt(&a, "--label-column", &col);
    add_opt(&a, "--test", &test);
    int r = parse_args(&a, argc, argv, csv_help);
    if (r)
        return r < 0 ? DDP_EXIT_OK : r;
    if (!a.positional)
        return import_usage(&a, "FILE.csv is required");
    if (!col)
        return import_usage(&a, "--label-column NAME|INDEX is required");
    if (test && a.o.test_fraction > 0)
        return import_usage(&a, "--test-fraction holds out /test from FILE.csv, so it does not "
                                "apply with --test; give one or the other");
    char err[DDP_ERR_LEN];
    ddp_import_summary s;
    double t0 = ddp_now();
    int rc = ddp_import_csv(a.positional, test, col, &a.o, &s, err, sizeof err);
    return finish(&a, rc, &s, t0, err);
}

static const char imagefolder_help[] =
    "usage: ddptrain data imagefolder DIR -o OUT.h5 [--test-fraction F] [--resize HxW]\n"
    "                         [--channels 1|3] [--source T] [--force]\n"
    "  DIR/train/<class>/<image> (and DIR/test/<class>/...), or DIR/<class>/<image>\n"
    "  with the last F of each class (in name order) as /test; PNG and JPEG; classes\n"
    "  are the folder names sorted; images one size, or --resize HxW (bilinear);\n"
    "  channels from the first image unless given. Reference: docs/data.md\n";

int ddp_data_cmd_imagefolder(int argc, char **argv)
{
    import_args a = {.sub = "imagefolder", .takes_positional = 1};
    const char *frac = NULL, *resize = NULL, *chan = NULL;
    add_opt(&a, "--test-fraction", &frac);
    add_opt(&a, "--resize", &resize);
    add_opt(&a, "--channels", &chan);
    int r = parse_args(&a, argc, argv, imagefolder_help);
    if (r)
        return r < 0 ? DDP_EXIT_OK : r;
    if (!a.positional)
        return import_usage(&a, "DIR is required");
    if (a.classes_s)
        return import_usage(&a, "--classes does not apply: the classes are the class folders");
    ddp_imagefolder_spec spec = {.dir = a.positional};
    if (frac && (ddp_parse_f64(frac, &spec.test_fraction) != 0 || !(spec.test_fraction >= 0) ||
                 spec.test_fraction >= 1))
        return import_usage(&a, "--test-fraction `%s`: expected a number in [0, 1)", frac);
    if (chan && strcmp(chan, "1") && strcmp(chan, "3"))
        return import_usage(&a, "--channels `%s`: expected 1 (grey) or 3 (RGB)", chan);
    spec.channels = chan ? atoi(chan) : 0;
    if (resize) {
        char x = 0, tail = 0;
        if (sscanf(resize, "%d%c%d%c", &spec.resize_h, &x, &spec.resize_w, &tail) != 3 ||
            x != 'x' || spec.resize_h < 1 || spec.resize_w < 1 || spec.resize_h > 8192 ||
            spec.resize_w > 8192)
            return import_usage(&a, "--resize `%s`: expected HxW, e.g. 32x32 (1 to 8192)", resize);
    }
    char err[DDP_ERR_LEN];
    ddp_import_summary s;
    double t0 = ddp_now();
    int rc = ddp_import_imagefolder(&spec, &a.o, &s, err, sizeof err);
    return finish(&a, rc, &s, t0, err);
}
