/* TensorBoard event files (the tfevents record format), written beside the
 * telemetry CSV: records of [uint64 length][masked CRC32C of length][Event
 * protobuf][masked CRC32C of data], each Event carrying scalar summaries. */
#ifndef CATCHAT_TFEVENTS_H
#define CATCHAT_TFEVENTS_H

#include <stdint.h>
#include <stdio.h>

typedef struct cc_tfevents { FILE *f; } cc_tfevents;

/* Create a new <dir>/events.out.tfevents.<time>.catchat.<pid>.<n> and write the version event. */
int cc_tfevents_open(cc_tfevents *t, const char *dir);
/* One event at `step` with n scalar values; flushed (a crash loses no step). */
int cc_tfevents_scalars(cc_tfevents *t, long step, const char *const *tags, const float *values, int n);
/* A text summary (TensorBoard's Text tab) under `tag`: UTF-8 `text`, cut
 * between characters to at most CC_TFEVENTS_TEXT_MAX bytes. */
#define CC_TFEVENTS_TEXT_MAX 3000
int cc_tfevents_text(cc_tfevents *t, long step, const char *tag, const char *text);
void cc_tfevents_close(cc_tfevents *t);
/* Resume: cut every event file in dir back to the events of step <= keep_step
 * (a torn last record goes too), so no step appears twice. */
int cc_tfevents_truncate_after(const char *dir, long keep_step);
uint32_t cc_crc32c(const uint8_t *data, size_t n);

#endif
