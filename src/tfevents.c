/* TensorBoard event writer. No protobuf library is needed for three message
 * types: Event { double wall_time = 1; int64 step = 2; string file_version = 3;
 * Summary summary = 5; }, Summary { repeated Value value = 1; },
 * Value { string tag = 1; float simple_value = 2; } — encoded by hand below. */
#define _POSIX_C_SOURCE 200809L
#include "catchat/tfevents.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>
#include "catchat/util.h"

uint32_t cc_crc32c(const uint8_t *data, size_t n)
{
    static uint32_t table[256];
    static int ready = 0;
    if (!ready) { /* Castagnoli polynomial, reflected */
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
            table[i] = c;
        }
        ready = 1;
    }
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < n; i++) crc = table[(crc ^ data[i]) & 0xff] ^ (crc >> 8);
    return crc ^ 0xffffffffu;
}

static uint32_t masked_crc(const uint8_t *data, size_t n)
{
    const uint32_t c = cc_crc32c(data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

typedef struct { uint8_t buf[4096]; size_t n; } pb;

static void pb_byte(pb *p, uint8_t b) { if (p->n < sizeof(p->buf)) p->buf[p->n++] = b; }
static void pb_varint(pb *p, uint64_t v)
{
    while (v >= 0x80) { pb_byte(p, (uint8_t)(v | 0x80)); v >>= 7; }
    pb_byte(p, (uint8_t)v);
}
static void pb_bytes(pb *p, const void *d, size_t n) { for (size_t i = 0; i < n; i++) pb_byte(p, ((const uint8_t *)d)[i]); }
static void pb_tag(pb *p, int field, int wire) { pb_varint(p, (uint64_t)(field << 3 | wire)); }

static int write_record(cc_tfevents *t, const pb *ev)
{
    uint8_t len8[8];
    const uint64_t len = ev->n;
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)(len >> (8 * i));
    const uint32_t c1 = masked_crc(len8, 8), c2 = masked_crc(ev->buf, ev->n);
    uint8_t c[4];
    for (int i = 0; i < 4; i++) c[i] = (uint8_t)(c1 >> (8 * i));
    int ok = fwrite(len8, 1, 8, t->f) == 8 && fwrite(c, 1, 4, t->f) == 4 && fwrite(ev->buf, 1, ev->n, t->f) == ev->n;
    for (int i = 0; i < 4; i++) c[i] = (uint8_t)(c2 >> (8 * i));
    ok = ok && fwrite(c, 1, 4, t->f) == 4 && fflush(t->f) == 0;
    return ok ? 0 : cc_error("tfevents write failed: %s", strerror(errno));
}

static void event_head(pb *p, long step)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    const double wall = tv.tv_sec + tv.tv_usec * 1e-6;
    pb_tag(p, 1, 1); /* wall_time, fixed64 */
    pb_bytes(p, &wall, 8);
    pb_tag(p, 2, 0); /* step, varint */
    pb_varint(p, (uint64_t)step);
}

/* Field `field` holding the message m (wire type 2: length, then bytes). */
static void pb_message(pb *p, int field, const pb *m)
{
    pb_tag(p, field, 2);
    pb_varint(p, m->n);
    pb_bytes(p, m->buf, m->n);
}

/* An Event record of `step` carrying the Summary `summary` (field 5). */
static int write_summary(cc_tfevents *t, long step, const pb *summary)
{
    pb ev = { .n = 0 };
    event_head(&ev, step);
    pb_message(&ev, 5, summary);
    return write_record(t, &ev);
}

int cc_tfevents_open(cc_tfevents *t, const char *dir)
{
    char path[CC_PATH_MAX + 64];
    struct timeval tv;
    gettimeofday(&tv, NULL);
    /* A new file each time, never one an earlier run (or an earlier call in
     * this second) wrote: "x" fails on an existing name and the count moves on. */
    t->f = NULL;
    for (int k = 0; k < 1000 && !t->f; k++) {
        snprintf(path, sizeof(path), "%s/events.out.tfevents.%ld.catchat.%ld.%d", dir, (long)tv.tv_sec,
                 (long)getpid(), k);
        t->f = fopen(path, "wbx");
        if (!t->f && errno != EEXIST) break;
    }
    if (!t->f) return cc_error("cannot write '%s': %s", path, strerror(errno));
    pb ev = { .n = 0 };
    event_head(&ev, 0);
    static const char version[] = "brain.Event:2";
    pb_tag(&ev, 3, 2);
    pb_varint(&ev, sizeof(version) - 1);
    pb_bytes(&ev, version, sizeof(version) - 1);
    return write_record(t, &ev);
}

int cc_tfevents_scalars(cc_tfevents *t, long step, const char *const *tags, const float *values, int n)
{
    if (!t->f) return 0;
    pb summary = { .n = 0 };
    for (int i = 0; i < n; i++) {
        pb value = { .n = 0 };
        const size_t tl = strlen(tags[i]);
        pb_tag(&value, 1, 2);
        pb_varint(&value, tl);
        pb_bytes(&value, tags[i], tl);
        pb_tag(&value, 2, 5); /* simple_value, fixed32 */
        pb_bytes(&value, &values[i], 4);
        pb_message(&summary, 1, &value);
    }
    return write_summary(t, step, &summary);
}

int cc_tfevents_text(cc_tfevents *t, long step, const char *tag, const char *text)
{
    if (!t->f) return 0;
    size_t n = strlen(text);
    if (n > CC_TFEVENTS_TEXT_MAX) { /* the record is built in one fixed buffer; cut between characters */
        n = CC_TFEVENTS_TEXT_MAX;
        while (n > 0 && ((unsigned char)text[n] & 0xC0) == 0x80) n--;
    }
    static const char plugin[] = "text";
    pb plugin_data = { .n = 0 }, metadata = { .n = 0 }, tensor = { .n = 0 }, value = { .n = 0 }, summary = { .n = 0 };
    pb_tag(&plugin_data, 1, 2); /* PluginData.plugin_name */
    pb_varint(&plugin_data, sizeof(plugin) - 1);
    pb_bytes(&plugin_data, plugin, sizeof(plugin) - 1);
    pb_message(&metadata, 1, &plugin_data); /* SummaryMetadata.plugin_data */
    pb_tag(&tensor, 1, 0); /* TensorProto.dtype = DT_STRING */
    pb_varint(&tensor, 7);
    pb_tag(&tensor, 2, 2); /* tensor_shape: a scalar (empty shape) */
    pb_varint(&tensor, 0);
    pb_tag(&tensor, 8, 2); /* string_val */
    pb_varint(&tensor, n);
    pb_bytes(&tensor, text, n);
    const size_t tl = strlen(tag);
    pb_tag(&value, 1, 2); /* Summary.Value.tag */
    pb_varint(&value, tl);
    pb_bytes(&value, tag, tl);
    pb_message(&value, 9, &metadata); /* Summary.Value.metadata */
    pb_message(&value, 8, &tensor);   /* Summary.Value.tensor */
    pb_message(&summary, 1, &value);
    return write_summary(t, step, &summary);
}

void cc_tfevents_close(cc_tfevents *t)
{
    if (t->f) fclose(t->f);
    t->f = NULL;
}

/* The step of an Event record (field 2, varint); -1 if the record is not one. */
static long event_step(const uint8_t *p, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint64_t key = 0;
        for (int sh = 0; i < n && sh < 64; sh += 7) {
            key |= (uint64_t)(p[i] & 0x7f) << sh;
            if (!(p[i++] & 0x80)) break;
        }
        uint64_t v = 0;
        switch (key & 7) {
        case 0:
            for (int sh = 0; i < n && sh < 64; sh += 7) {
                v |= (uint64_t)(p[i] & 0x7f) << sh;
                if (!(p[i++] & 0x80)) break;
            }
            if (key >> 3 == 2) return (long)v;
            break;
        case 1: i += 8; break;
        case 5: i += 4; break;
        case 2:
            for (int sh = 0; i < n && sh < 64; sh += 7) {
                v |= (uint64_t)(p[i] & 0x7f) << sh;
                if (!(p[i++] & 0x80)) break;
            }
            if (v > n - i) return -1;
            i += v;
            break;
        default: return -1;
        }
    }
    return 0; /* no step field: proto3 default 0 */
}

/* Rewrite one event file without the records past keep_step (and without a
 * torn tail), through a temporary file and a rename. */
static int truncate_file(const char *path, long keep_step)
{
    size_t len;
    uint8_t *buf = cc_read_file(path, &len);
    if (!buf) return -1;
    size_t keep = 0, i = 0;
    int dropped = 0;
    while (i + 12 <= len) {
        uint64_t n = 0;
        for (int k = 7; k >= 0; k--) n = n << 8 | buf[i + k];
        if (len - i < 16 || n > len - i - 16) break; /* torn */
        const long step = event_step(buf + i + 12, (size_t)n);
        if (step < 0 || step > keep_step) { dropped = 1; break; }
        i += 16 + (size_t)n;
        keep = i;
    }
    if (keep == len && !dropped) {
        free(buf);
        return 0;
    }
    char tmp[CC_PATH_MAX + 400];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    int rc = f && fwrite(buf, 1, keep, f) == keep ? 0 : -1;
    if (f && fclose(f) != 0) rc = -1;
    if (rc == 0 && rename(tmp, path) != 0) rc = -1;
    if (rc != 0) {
        cc_error("cannot rewrite TensorBoard file '%s': %s", path, strerror(errno));
        unlink(tmp);
    }
    free(buf);
    return rc;
}

int cc_tfevents_truncate_after(const char *dir, long keep_step)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    char path[CC_PATH_MAX + 300];
    int rc = 0;
    while (rc == 0 && (e = readdir(d)))
        if (strncmp(e->d_name, "events.out.tfevents.", 20) == 0 && !strstr(e->d_name, ".tmp.")) {
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
            rc = truncate_file(path, keep_step);
        }
    closedir(d);
    return rc;
}
