/*
 * image.h - decode one PNG (libpng) or JPEG (libjpeg-turbo) file into 8-bit pixels, and
 * resize them, for the ImageFolder importer (import.h).
 *
 * The format is found from the file's first bytes, never its name. Output is interleaved
 * (H, W, C) uint8 with C = 1 or 3 as asked: colour to grey is Pillow's convert("L")
 * (L = (19595 R + 38470 G + 7471 B + 32768) >> 16), grey to colour repeats the value, an
 * alpha channel is dropped (as convert("RGB")). PNG is exact; JPEG is libjpeg's default
 * decode (islow DCT, fancy upsampling), which Pillow uses too. 16-bit PNGs are reduced to
 * 8 bits by libpng. Both libraries are optional at build time: without one, decoding that
 * format fails naming the package to install.
 *
 * The header is read and its size checked against DDP_IMAGE_MAX_PIXELS before the pixels
 * are allocated. Errors are one line in err naming the file; nothing prints or exits.
 * Ownership: *pixels is the caller's (free()).
 */
#ifndef DDP_IMAGE_H
#define DDP_IMAGE_H

#include <stddef.h>
#include <stdint.h>

/* 2^26 pixels (8192 x 8192): beyond any image a classifier trains on, and a bound on what
 * a lying header can make us allocate (3 x 64 MiB). */
#define DDP_IMAGE_MAX_PIXELS ((int64_t)1 << 26)

/* 1 when this build decodes PNG / JPEG. */
int ddp_image_have_png(void);
int ddp_image_have_jpeg(void);

/* Decode path into *pixels (h, w, channels), channels 1 or 3. *gray_source (may be NULL) is
 * 1 when the file itself is greyscale. Returns 0, or -1 with err. */
int ddp_image_load(const char *path, int channels, uint8_t **pixels, int *h, int *w,
                   int *gray_source, char *err, size_t errlen);

/* Bilinear resize of src (sh, sw, c) into dst (dh, dw, c) with half-pixel centres (sample
 * x of dst reads src at (x + 0.5) sw / dw - 0.5, clamped to the edges; no antialiasing),
 * rounded to nearest: OpenCV's INTER_LINEAR, torchvision's resize with antialias=False. */
void ddp_image_resize(uint8_t *dst, int dh, int dw, const uint8_t *src, int sh, int sw, int c);

#endif
