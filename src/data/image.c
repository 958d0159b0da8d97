/*
 * image.c - PNG and JPEG decoding and bilinear resizing (image.h). libpng's simplified API
 * decodes every PNG to 8-bit RGBA; libjpeg-turbo decodes JPEG to grey or RGB; the channel
 * conversion to what the caller asked for is ours (Pillow's formulas), so both formats
 * convert alike.
 *
 * Legend: H rows, W columns, C channels (interleaved, H W C).
 */
#include "data/image.h"

#include "core/util.h"
#include "ddp_build.h"

#include <errno.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if HAVE_PNG
#include <png.h>
#endif
#if HAVE_JPEG
#include <jpeglib.h>
#endif

int ddp_image_have_png(void)
{
    return HAVE_PNG;
}

int ddp_image_have_jpeg(void)
{
    return HAVE_JPEG;
}

#if HAVE_PNG || HAVE_JPEG
/* src (n pixels of sc channels, sc 1 or 3 or 4) into dst of dc channels (1 or 3). */
static void convert(uint8_t *dst, int dc, const uint8_t *src, int sc, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *p = src + i * sc;
        if (dc == 3) {
            dst[3 * i] = p[0];
            dst[3 * i + 1] = sc >= 3 ? p[1] : p[0];
            dst[3 * i + 2] = sc >= 3 ? p[2] : p[0];
        } else {
            dst[i] = sc >= 3
                         ? (uint8_t)((19595u * p[0] + 38470u * p[1] + 7471u * p[2] + 0x8000u) >> 16)
                         : p[0];
        }
    }
}

/* Size check shared by both formats. */
static int check_size(const char *path, int64_t h, int64_t w, char *err, size_t errlen)
{
    if (h <= 0 || w <= 0 || h * w > DDP_IMAGE_MAX_PIXELS)
        return ddp_err(err, errlen,
                       "%s: image of %lld x %lld pixels; expected 1 to %lld "
                       "pixels, shrink it first",
                       path, (long long)h, (long long)w, (long long)DDP_IMAGE_MAX_PIXELS);
    return 0;
}

#endif

#if HAVE_PNG
/* PNG via the simplified API: RGBA 8-bit, then converted. */
static int load_png(FILE *f, const char *path, int channels, uint8_t **out, int *h, int *w,
                    int *gray, char *err, size_t errlen)
{
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_stdio(&im, f))
        return ddp_err(err, errlen, "%s: not a readable PNG (%s); the file is corrupt", path,
                       im.message);
    if (check_size(path, im.height, im.width, err, errlen) != 0) {
        png_image_free(&im);
        return -1;
    }
    *gray = !(im.format & PNG_FORMAT_FLAG_COLOR);
    im.format = PNG_FORMAT_RGBA;
    size_t n = (size_t)im.width * im.height;
    uint8_t *rgba = ddp_malloc(n * 4);
    if (!png_image_finish_read(&im, NULL, rgba, 0, NULL)) {
        ddp_err(err, errlen, "%s: PNG data is corrupt or truncated (%s)", path, im.message);
        free(rgba);
        png_image_free(&im);
        return -1;
    }
    *h = (int)im.height;
    *w = (int)im.width;
    *out = ddp_malloc(n * (size_t)channels);
    convert(*out, channels, rgba, 4, (int64_t)n);
    free(rgba);
    return 0;
}
#endif

#if HAVE_JPEG
typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
} jpeg_err;

/* libjpeg's fatal error: keep its message and jump back instead of exiting. */
static void jpeg_fail(j_common_ptr c)
{
    jpeg_err *e = (jpeg_err *)c->err;
    (*c->err->format_message)(c, e->msg);
    longjmp(e->jb, 1);
}

/* Warnings (corrupt data the library worked around) are errors too: a hostile file. */
static void jpeg_warn(j_common_ptr c, int level)
{
    if (level < 0)
        jpeg_fail(c);
}

/* JPEG via libjpeg-turbo: grey or RGB, then converted. */
static int load_jpeg(FILE *f, const char *path, int channels, uint8_t **out, int *h, int *w,
                     int *gray, char *err, size_t errlen)
{
    struct jpeg_decompress_struct d;
    jpeg_err je;
    uint8_t *volatile px = NULL;
    d.err = jpeg_std_error(&je.pub);
    je.pub.error_exit = jpeg_fail;
    je.pub.emit_message = jpeg_warn;
    if (setjmp(je.jb)) {
        ddp_err(err, errlen, "%s: JPEG data is corrupt or truncated (%s)", path, je.msg);
        jpeg_destroy_decompress(&d);
        free(px);
        return -1;
    }
    jpeg_create_decompress(&d);
    jpeg_stdio_src(&d, f);
    jpeg_read_header(&d, TRUE);
    if (d.jpeg_color_space == JCS_CMYK || d.jpeg_color_space == JCS_YCCK) {
        jpeg_destroy_decompress(&d);
        return ddp_err(err, errlen, "%s: CMYK JPEG; convert it to RGB first", path);
    }
    if (check_size(path, d.image_height, d.image_width, err, errlen) != 0) {
        jpeg_destroy_decompress(&d);
        return -1;
    }
    *gray = d.jpeg_color_space == JCS_GRAYSCALE;
    d.out_color_space = *gray ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_start_decompress(&d);
    const int sc = d.output_components;
    const size_t row = (size_t)d.output_width * (size_t)sc;
    px = ddp_malloc(row * d.output_height);
    while (d.output_scanline < d.output_height) {
        JSAMPROW r = px + row * d.output_scanline;
        jpeg_read_scanlines(&d, &r, 1);
    }
    jpeg_finish_decompress(&d);
    *h = (int)d.output_height;
    *w = (int)d.output_width;
    jpeg_destroy_decompress(&d);
    *out = ddp_malloc((size_t)*h * (size_t)*w * (size_t)channels);
    convert(*out, channels, px, sc, (int64_t)*h * *w);
    free(px);
    return 0;
}
#endif

int ddp_image_load(const char *path, int channels, uint8_t **pixels, int *h, int *w,
                   int *gray_source, char *err, size_t errlen)
{
    const char *kind = NULL;
    unsigned char m[8] = {0};
    int g = 0, rc = -1;
    *pixels = NULL;
    int fd = ddp_open_regular(path, &kind);
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        if (fd >= 0)
            close(fd);
        return ddp_err(err, errlen, "%s: cannot open: %s", path, kind ? kind : strerror(errno));
    }
    size_t got = fread(m, 1, sizeof m, f);
    rewind(f);
    if (got == 8 && !memcmp(m, "\x89PNG\r\n\x1a\n", 8)) {
#if HAVE_PNG
        rc = load_png(f, path, channels, pixels, h, w, &g, err, errlen);
#else
        rc = ddp_err(err, errlen,
                     "%s: a PNG, but this ddptrain was built without libpng; "
                     "install libpng-dev and rebuild",
                     path);
#endif
    } else if (got >= 3 && m[0] == 0xFF && m[1] == 0xD8 && m[2] == 0xFF) {
#if HAVE_JPEG
        rc = load_jpeg(f, path, channels, pixels, h, w, &g, err, errlen);
#else
        rc = ddp_err(err, errlen,
                     "%s: a JPEG, but this ddptrain was built without "
                     "libjpeg; install libjpeg62-turbo-dev and rebuild",
                     path);
#endif
    } else {
        rc = ddp_err(err, errlen,
                     "%s: not a PNG or JPEG image; class folders may hold only "
                     "images (move other files out)",
                     path);
    }
    fclose(f);
    if (gray_source)
        *gray_source = g;
    return rc;
}

void ddp_image_resize(uint8_t *dst, int dh, int dw, const uint8_t *src, int sh, int sw, int c)
{
    for (int y = 0; y < dh; y++) {
        double fy = (y + 0.5) * sh / dh - 0.5;
        fy = fy < 0 ? 0 : fy;
        int y0 = (int)fy;
        int y1 = y0 + 1 < sh ? y0 + 1 : sh - 1;
        double ay = fy - y0;
        for (int x = 0; x < dw; x++) {
            double fx = (x + 0.5) * sw / dw - 0.5;
            fx = fx < 0 ? 0 : fx;
            int x0 = (int)fx;
            int x1 = x0 + 1 < sw ? x0 + 1 : sw - 1;
            double ax = fx - x0;
            for (int k = 0; k < c; k++) {
                double top = src[((int64_t)y0 * sw + x0) * c + k] * (1 - ax) +
                             src[((int64_t)y0 * sw + x1) * c + k] * ax;
                double bot = src[((int64_t)y1 * sw + x0) * c + k] * (1 - ax) +
                             src[((int64_t)y1 * sw + x1) * c + k] * ax;
                double v = top * (1 - ay) + bot * ay;
                dst[((int64_t)y * dw + x) * c + k] = (uint8_t)(v + 0.5);
            }
        }
    }
}
