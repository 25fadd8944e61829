/* Generated text shown on a terminal (text_escape.h): control bytes and
 * bytes that are not UTF-8 become visible escapes; \n, \t and valid UTF-8
 * stay; a character split over two writes of the stream comes out whole. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/text_escape.h"
#include "catchat/util.h"

/* in: a string literal (its NULs counted) */
#define expect_escaped(in, want) expect_escaped_n(in, sizeof(in) - 1, want)

static void expect_escaped_n(const char *in, size_t n, const char *want)
{
    char out[256];
    const size_t len = cc_escape_controls(in, n, out, sizeof(out));
    cr_expect_str_eq(out, want);
    cr_expect_eq(len, strlen(want));
}

Test(text_escape, controls_are_visible_and_newline_tab_stay)
{
    expect_escaped("a\x1b[31mred\n\tb", "a\\x1b[31mred\n\tb");
    expect_escaped("x\0y", "x\\x00y");
    expect_escaped("\r\a\b\x7f", "\\x0d\\x07\\x08\\x7f");
    expect_escaped("back\\slash", "back\\slash"); /* a backslash stays */
}

Test(text_escape, utf8_stays_and_bytes_that_are_not_utf8_are_hex)
{
    expect_escaped("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    expect_escaped("\xff\xfe", "\\xff\\xfe");
    expect_escaped("\xc3", "\\xc3");                /* a lead byte cut off at the end */
    expect_escaped("\xc3" "A", "\\xc3A");           /* a lead byte without its continuation */
    expect_escaped("\x80", "\\x80");                /* a continuation byte alone */
    expect_escaped("\xc0\xaf", "\\xc0\\xaf");       /* an overlong '/' */
    expect_escaped("\xed\xa0\x80", "\\xed\\xa0\\x80"); /* a UTF-16 surrogate */
    expect_escaped("\xc2\x9b" "2J", "\\u009b2J");   /* C1 CSI: some terminals act on it */
    expect_escaped("\xc2\xa0", "\xc2\xa0");         /* U+00A0 is text */
}

/* Cut at a piece boundary, NUL-terminated; the return says the whole length. */
Test(text_escape, a_small_buffer_is_cut_between_pieces)
{
    char out[6];
    const size_t len = cc_escape_controls("ab\x1b" "cd", 5, out, sizeof(out));
    cr_expect_eq(len, 8);
    cr_expect_str_eq(out, "ab"); /* \x1b (4) does not fit after "ab" in 5 characters */
    cr_expect_eq(cc_escape_controls("abc", 3, NULL, 0), 3);
}

static char *through_stream(const char *const *writes, int n, size_t *len)
{
    char *buf = NULL;
    FILE *mem = open_memstream(&buf, len);
    cr_assert_not_null(mem);
    FILE *s = cc_terminal_text_stream(mem);
    cr_assert_not_null(s);
    for (int i = 0; i < n; i++) fwrite(writes[i], 1, strlen(writes[i]), s);
    cr_assert_eq(fclose(s), 0);
    fclose(mem);
    return buf;
}

/* A byte-level model writes "é" as two tokens, two writes: shown whole. */
Test(text_escape, stream_joins_a_character_split_over_writes)
{
    const char *w[] = { "caf", "\xc3", "\xa9", " \xf0\x9f", "\x98", "\x80", "\x1b" };
    size_t len;
    char *out = through_stream(w, 7, &len);
    cr_expect_str_eq(out, "caf\xc3\xa9 \xf0\x9f\x98\x80\\x1b");
    free(out);
}

/* A held lead byte that the next write does not continue is \xNN, and the
 * byte after it is shown for itself; one left at the end is \xNN at fclose. */
Test(text_escape, stream_shows_unfinished_sequences_as_hex)
{
    const char *w[] = { "\xe2\x82", "A", "\xc3" };
    size_t len;
    char *out = through_stream(w, 3, &len);
    cr_expect_str_eq(out, "\\xe2\\x82A\\xc3");
    free(out);
}

/* cc_valid_utf8 (util.h): one U+FFFD for each maximal part of an ill-formed
 * sequence, as Python's decode(errors="replace") writes them (the sample's
 * JSON text and its tokens' bytes decoded by a reader must agree). */
Test(text_escape, valid_utf8_replaces_each_maximal_ill_formed_part_once)
{
#define R "\xEF\xBF\xBD"
    static const struct {
        const char *in;
        size_t n;
        const char *want;
    } cases[] = {
        { "a\xE2\x82", 3, "a" R },                   /* a cut-off 3-byte sequence: one */
        { "\xE2\x82(", 3, R "(" },                   /* broken by a byte it may not take: one, then that byte */
        { "\xF0\x80\x80", 3, R R R },                /* F0 takes 90..BF only: each byte alone */
        { "\xED\xA0\x80", 3, R R R },                /* a surrogate's encoding: each byte alone */
        { "\xF4\x8F\xBF", 3, R },                    /* the start of U+10FFFF, cut off */
        { "\xC0\xAF", 2, R R },                      /* an overlong lead leads nothing */
        { "x\0y", 3, "x" R "y" },                    /* NUL is not in a C string */
        { "\xC3\xA9\xFF\xE2\x82\xAC", 6, "\xC3\xA9" R "\xE2\x82\xAC" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *got = cc_valid_utf8(cases[i].in, cases[i].n);
        cr_expect_str_eq(got, cases[i].want, "case %zu", i);
        free(got);
    }
#undef R
}
