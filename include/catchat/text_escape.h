/* Generated text shown on a terminal (text_escape.c).
 *
 * An undertrained byte-level model emits any byte: ESC, NUL, CR, BEL and
 * the rest, which a terminal acts on (moves the cursor, changes colours,
 * retitles the window, rings the bell) instead of showing. On a terminal
 * such bytes are written as visible escapes:
 *   - \n and \t as they are;
 *   - every other C0 control (0x00-0x1f) and DEL as \xNN (ESC is \x1b);
 *   - the C1 controls U+0080..U+009F, which some terminals also act on, as
 *     \u0080..\u009f;
 *   - a valid UTF-8 sequence as it is (text in any script stays readable);
 *   - a byte that is not part of valid UTF-8 as \xNN.
 * A backslash stays as it is: the text is for reading, not for parsing
 * back. Files and pipes get the model's raw bytes: callers use these only
 * where isatty() says the output is a terminal. */
#ifndef CATCHAT_TEXT_ESCAPE_H
#define CATCHAT_TEXT_ESCAPE_H

#include <stddef.h>
#include <stdio.h>

/* in[0..n) escaped into out (at most cap bytes, NUL-terminated when cap > 0,
 * cut short where it does not fit); returns the length of the whole escaped
 * text, as snprintf does, so a return >= cap says it was cut. */
size_t cc_escape_controls(const char *in, size_t n, char *out, size_t cap);

/* bytes[0..n) escaped to `out`, a sequence cut off at the end as \xNN. */
void cc_write_text_for_terminal(FILE *out, const char *bytes, size_t n);

/* A stream whose bytes reach `terminal` escaped, for text written a token
 * at a time: a UTF-8 sequence split over two writes is held until its last
 * byte arrives, so it is shown whole. Each fflush of the stream flushes
 * `terminal` too. fclose writes a sequence left unfinished as \xNN and
 * leaves `terminal` open. NULL when the stream cannot be made (then write
 * to `terminal` itself). */
FILE *cc_terminal_text_stream(FILE *terminal);

#endif
