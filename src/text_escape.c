/* Generated text shown on a terminal: control bytes and bytes that are not
 * UTF-8 as visible escapes (text_escape.h says which and why). One function
 * decides what a position becomes (escape_one); the buffer, the one-call
 * writer and the token-at-a-time stream only differ in where it goes. */
#define _GNU_SOURCE /* fopencookie */
#include "catchat/text_escape.h"

#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include "catchat/util.h"

/* What s[0..avail) starts with, as it is shown: written to out (at most 6
 * characters: \u0080), its length returned and the bytes it took in *used.
 * -1 when s is the start of a UTF-8 sequence whose remaining bytes are not
 * there yet and `more` says they may still come: the caller holds them. */
static int escape_one(const unsigned char *s, size_t avail, int more, char out[8], size_t *used)
{
    const unsigned c = s[0];
    *used = 1;
    if (c < 0x80) {
        if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) return snprintf(out, 8, "\\x%02x", c);
        out[0] = (char)c;
        return 1;
    }
    const size_t len = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len && avail < len) {
        /* A prefix: held while it can still become valid UTF-8. Checked by
         * completing it with the smallest continuation bytes its lead byte
         * allows (E0 needs A0 or more, F0 90 or more). */
        unsigned char whole[4];
        memcpy(whole, s, avail);
        for (size_t k = avail; k < len; k++) whole[k] = k > 1 ? 0x80 : c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
        if (more && cc_utf8_seq_len(whole, len) == len) return -1;
    } else if (len && cc_utf8_seq_len(s, len) == len) {
        *used = len;
        if (c == 0xC2 && s[1] < 0xA0) return snprintf(out, 8, "\\u%04x", (unsigned)s[1]); /* C1: U+0080..U+009F */
        memcpy(out, s, len);
        return (int)len;
    }
    return snprintf(out, 8, "\\x%02x", c); /* not UTF-8: this byte alone, the next starts afresh */
}

size_t cc_escape_controls(const char *in, size_t n, char *out, size_t cap)
{
    const unsigned char *s = (const unsigned char *)in;
    const size_t room = cap ? cap - 1 : 0; /* the NUL's byte kept */
    size_t total = 0, stored = 0, used;
    int cut = 0;
    char piece[8];
    for (size_t i = 0; i < n; i += used) {
        const int k = escape_one(s + i, n - i, 0, piece, &used);
        /* whole pieces only: a cut never leaves half an escape or half a character */
        if (!cut && stored + (size_t)k <= room) {
            memcpy(out + stored, piece, (size_t)k);
            stored += (size_t)k;
        } else {
            cut = 1;
        }
        total += (size_t)k;
    }
    if (cap) out[stored] = 0;
    return total;
}

void cc_write_text_for_terminal(FILE *out, const char *bytes, size_t n)
{
    const unsigned char *s = (const unsigned char *)bytes;
    size_t used;
    char piece[8];
    for (size_t i = 0; i < n; i += used) {
        const int k = escape_one(s + i, n - i, 0, piece, &used);
        fwrite(piece, 1, (size_t)k, out);
    }
}

/* The stream's state: where its text goes, and the start of a UTF-8
 * sequence the last write ended inside. */
typedef struct {
    FILE *terminal;
    unsigned char held[4];
    size_t n_held;
} term_stream;

/* Shows what of the held bytes can be shown; `more`: whether bytes may
 * still follow (else an unfinished sequence is written as \xNN). */
static void drain_held(term_stream *t, int more)
{
    size_t used;
    char piece[8];
    while (t->n_held) {
        const int k = escape_one(t->held, t->n_held, more, piece, &used);
        if (k < 0) return;
        fwrite(piece, 1, (size_t)k, t->terminal);
        t->n_held -= used;
        memmove(t->held, t->held + used, t->n_held);
    }
}

static ssize_t term_write(void *cookie, const char *buf, size_t size)
{
    term_stream *t = cookie;
    const unsigned char *s = (const unsigned char *)buf;
    size_t i = 0, used;
    char piece[8];
    /* finish a held sequence first, a byte at a time: held + 1 is at most 4 bytes */
    while (t->n_held && i < size) {
        t->held[t->n_held++] = s[i++];
        drain_held(t, 1);
    }
    while (i < size) {
        const int k = escape_one(s + i, size - i, 1, piece, &used);
        if (k < 0) { /* its end is in a later write */
            memcpy(t->held, s + i, size - i);
            t->n_held = size - i;
            break;
        }
        fwrite(piece, 1, (size_t)k, t->terminal);
        i += used;
    }
    fflush(t->terminal); /* text a token at a time is seen as it comes */
    return ferror(t->terminal) ? -1 : (ssize_t)size;
}

static int term_close(void *cookie)
{
    term_stream *t = cookie;
    drain_held(t, 0);
    const int rc = fflush(t->terminal);
    free(t);
    return rc == 0 ? 0 : EOF;
}

FILE *cc_terminal_text_stream(FILE *terminal)
{
    term_stream *t = cc_calloc(1, sizeof(*t));
    t->terminal = terminal;
    FILE *f = fopencookie(t, "w", (cookie_io_functions_t){ .write = term_write, .close = term_close });
    if (!f) {
        free(t);
        return NULL;
    }
    setvbuf(f, NULL, _IONBF, 0); /* each write reaches the terminal at once, as the caller's would */
    return f;
}
